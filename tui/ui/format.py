"""Number formatting shared by the widgets (one place, so every panel says sizes the same way)."""

from __future__ import annotations


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
