"""Acceptance by draft position as one bar per position (`1 ████████▏  82 %`): the share of drafts whose
first i tokens were all accepted (`tui.core.probes.positions`). Shown beside the probe panel's
acceptance plot and in a stored run's detail; positions past the advised n-max are drawn in $warning."""

from __future__ import annotations

from collections.abc import Sequence

from textual.widgets import Static

#: Eighths of a cell, so a 10-cell bar still tells 12 % from 16 %.
_EIGHTHS = " ▏▎▍▌▋▊▉"
WIDTH = 8


def bar(share: float, width: int = WIDTH) -> tuple[str, str]:
    """The filled and the empty part of a bar for `share` (0..1)."""
    eighths = round(max(0.0, min(1.0, share)) * width * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (_EIGHTHS[part] if part else "")
    return filled, "░" * (width - len(filled))


def bars_markup(shares: Sequence[float], best: int | None = None, title: str = "per position") -> str:
    """Markup of the bars, theme colours only; positions after `best` (the advised n-max) in $warning;
    `title` ("": none) heads them."""
    lines = [f"[$foreground-muted]{title}[/]"] if title else []
    for i, share in enumerate(shares, start=1):
        filled, empty = bar(share)
        colour = "$warning" if best is not None and i > best else "$success"
        lines.append(f"{i} [{colour}]{filled}[/][$foreground-muted]{empty}[/] {100.0 * share:3.0f} %")
    return "\n".join(lines)


class PositionBars(Static):
    """The bars of one configuration; hidden without figures (MTP off, or no /metrics)."""

    DEFAULT_CSS = """
    PositionBars { width: auto; height: auto; padding: 0 0 0 1; }
    PositionBars.-empty { display: none; }
    """

    def show(self, shares: Sequence[float], best: int | None = None, title: str = "per position") -> None:
        self.set_class(not shares, "-empty")
        self.update(bars_markup(shares, best, title) if shares else "")
