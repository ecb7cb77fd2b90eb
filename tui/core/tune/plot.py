"""The report's plot: every measured trial's PP against TG medians as text, the Pareto front marked.

Plain characters in a fenced block, so the report reads the same in a terminal, a pull request and
a Markdown viewer, and needs no image file beside it. The TUI draws the same points as a widget.
"""

from __future__ import annotations

from collections.abc import Sequence

from tui.core.lab.trial import Trial

WIDTH, HEIGHT = 56, 14
#: What each mark means, in the order a cell keeps the most important one.
MARKS = (("B", "the best"), ("*", "on the PP-vs-TG front"), ("o", "MTP on"), ("x", "MTP off"))


def _rank(mark: str) -> int:
    return [m for m, _ in MARKS].index(mark)


def pp_tg_plot(records: Sequence[Trial], front: Sequence[Trial], best: Trial | None) -> list[str]:
    """The lines of a text scatter (TG up, PP across), or [] with fewer than two measured trials."""
    pts = [(r, r.median("pp_tps"), r.median("tg_tps")) for r in records if r.measured]
    pts = [(r, float(p), float(t)) for r, p, t in pts if p is not None and t is not None]
    if len(pts) < 2:
        return []
    p_lo, p_hi = min(p for _, p, _ in pts), max(p for _, p, _ in pts)
    t_lo, t_hi = min(t for _, _, t in pts), max(t for _, _, t in pts)
    p_span, t_span = (p_hi - p_lo) or 1.0, (t_hi - t_lo) or 1.0
    grid = [[" "] * WIDTH for _ in range(HEIGHT)]
    on_front = {r.number for r in front}
    for r, p, t in pts:
        x = round((p - p_lo) / p_span * (WIDTH - 1))
        y = HEIGHT - 1 - round((t - t_lo) / t_span * (HEIGHT - 1))
        mark = "B" if best is not None and r.number == best.number else "*" if r.number in on_front else \
            "o" if r.mtp else "x"
        if grid[y][x] == " " or _rank(mark) < _rank(grid[y][x]):
            grid[y][x] = mark
    label_w = max(len(f"{t_hi:.0f}"), len(f"{t_lo:.0f}"))
    out = [f"TG t/s (generation), {len(pts)} measured trials"]
    for i, row in enumerate(grid):
        label = f"{t_hi:.0f}" if i == 0 else f"{t_lo:.0f}" if i == HEIGHT - 1 else ""
        out.append(f"{label:>{label_w}} |" + "".join(row).rstrip())
    out.append(" " * label_w + " +" + "-" * WIDTH)
    lo, hi = f"{p_lo:.0f}", f"{p_hi:.0f}"
    out.append(" " * (label_w + 2) + lo + " " * max(1, WIDTH - len(lo) - len(hi)) + hi)
    out.append(" " * (label_w + 2) + "PP t/s (prompt processing)")
    out.append("  ".join(f"{m} {what}" for m, what in MARKS))
    return out
