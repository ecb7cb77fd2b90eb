"""Formatting shared by the widgets (one place, so every panel says sizes the same way), and text from
outside (a file name, a repo, `general.name`, a server's error body) made safe for a widget: its
control characters shown escaped (`tui.core.config.text.safe_text`: Textual passes an ESC through to the
terminal) and never read as markup (a DataTable reads a str cell as markup, a border title too)."""

from __future__ import annotations

from rich.text import Text
from textual.content import Content
from textual.markup import escape

from tui.core.config.text import safe_text


def plain(text: object, *, keep_lines: bool = False) -> Content:
    """Outside text for `Static.update`: shown escaped, no markup."""
    return Content(safe_text(text, keep_lines=keep_lines))


def cell(text: object) -> Text:
    """Outside text for a DataTable cell or a Rich `Text` (a str cell would be read as markup)."""
    return Text(safe_text(text))


def markup_safe(text: object, *, keep_lines: bool = False) -> str:
    """Outside text inside a markup string (a border title, `notify`): shown escaped, its `[` literal."""
    return escape(safe_text(text, keep_lines=keep_lines))


def mib(value: float | None) -> str:
    """`812 MiB`, `3.10 GiB`; `n/a` for unknown values."""
    if value is None:
        return "n/a"
    if abs(value) >= 1024:
        return f"{value / 1024:.2f} GiB"
    if abs(value) >= 10:
        return f"{value:.0f} MiB"
    return f"{value:.1f} MiB"


def tps(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def pct(value: float | None) -> str:
    """A 0..1 fraction as a percentage."""
    return "—" if value is None else f"{100 * value:.0f} %"


def _speed(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"


def spread(median: float | None, lo: float | None, hi: float | None) -> str:
    """`41.3 (40.8–42.0)`, `436 (431–440)`: a median with its min–max spread."""
    if median is None:
        return "—"
    if lo is None or hi is None:
        return _speed(median)
    return f"{_speed(median)} ({_speed(lo)}–{_speed(hi)})"


def gib_pair(part: float, total: float) -> str:
    """`5.62/6.00 GiB`: a compact used/total for bar suffixes."""
    return f"{part / 1024:.2f}/{total / 1024:.2f} GiB"


def mib_short(value: float | None) -> str:
    """A MiB number without its unit, for dense tables: `25`, `4.0`, `4.08G`."""
    if value is None:
        return "?"
    if abs(value) >= 1024:
        return f"{value / 1024:.2f}G"
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"
