"""The lab's TG-against-PP plots: a sweep's measured rows, and a tune's every measured configuration
(MTP off and on in two markers and colours, the Pareto front, where no other trial is faster at both,
drawn as a line through its points). The best is a bold star in both."""

from __future__ import annotations

from typing import Any

from tui.ui.lab.tune_views import TuneRowView
from tui.ui.lab.views import SweepRowView
from tui.ui.widgets.probe_plot import Plot


def pad(lo: float, hi: float) -> float:
    """Room around a range: 15 % of it, and at least 5 % of its size, so one point (or points all
    alike) sits in axes of its own scale (one trial at 1315 t/s drew axes 1313.5 to 1316.5)."""
    return max(1.0, (hi - lo) * 0.15, 0.05 * max(abs(lo), abs(hi)))


def frame(plt: Any, xs: list[float], ys: list[float], labels: list[tuple[str, float, float, Any]], cells: int) -> None:
    """Axes around the points with room for the labels, each label (text, x, y, colour) beside its
    point on the side with room; `cells` is the width in label steps (redrawn on data, not on resize)."""
    if not xs:
        plt.xticks([])
        plt.yticks([])
    else:
        lo_x, hi_x, lo_y, hi_y = min(xs), max(xs), min(ys), max(ys)
        pad_x, pad_y = pad(lo_x, hi_x), pad(lo_y, hi_y)
        plt.xlim(lo_x - pad_x, hi_x + pad_x * 2)
        plt.ylim(lo_y - pad_y, hi_y + pad_y)
        cell, middle = (hi_x - lo_x + 3 * pad_x) / cells, (lo_x + hi_x) / 2
        for text, x, y, colour in labels:
            right = x <= middle
            plt.text(text, x + cell if right else x - cell, y, alignment="left" if right else "right", color=colour)
    plt.xlabel("PP t/s")


class SweepChart(Plot):
    """`show((rows, best))`: every row labelled; the best's number is `best`."""

    def draw(self, plt: Any, colours: list[Any]) -> None:
        rows_in, best_number = self.data or ((), None)
        plt.title("TG vs PP (t/s) · ★ best")
        rows: list[SweepRowView] = [r for r in rows_in if r.tg is not None and r.pp is not None]
        others = [r for r in rows if r.number != best_number]
        best = [r for r in rows if r.number == best_number]
        if others:
            plt.scatter([r.pp for r in others], [r.tg for r in others], marker="●", color=colours[0])
        if best:
            plt.scatter([r.pp for r in best], [r.tg for r in best], marker="★", color=colours[1], style="bold")
        frame(plt, [r.pp for r in rows], [r.tg for r in rows],  # type: ignore[misc]
              [(f"#{r.number}", r.pp, r.tg, colours[1] if r.number == best_number else colours[0]) for r in rows], 20)


class TuneChart(Plot):
    """`show(points)`: the measured trials; the front and the best are labelled (the rest would crowd the plot)."""

    def draw(self, plt: Any, colours: list[Any]) -> None:
        pts: list[TuneRowView] = list(self.data or ())
        plt.title("TG vs PP (t/s) · ● MTP off · ▲ MTP on · ─ Pareto front · ★ best")
        front = sorted((p for p in pts if p.front), key=lambda p: p.pp)
        if len(front) > 1:
            plt.plot([p.pp for p in front], [p.tg for p in front], marker="braille", color=colours[2])
        for mtp, marker, colour in ((False, "●", colours[0]), (True, "▲", colours[1])):
            side = [p for p in pts if p.mtp == mtp and not p.best]
            if side:
                plt.scatter([p.pp for p in side], [p.tg for p in side], marker=marker, color=colour)
        best = [p for p in pts if p.best]
        if best:
            plt.scatter([p.pp for p in best], [p.tg for p in best], marker="★", color=colours[3], style="bold")
        labels = [(f"#{p.number}", p.pp, p.tg, colours[3] if p.best else colours[1] if p.mtp else colours[0])
                  for p in pts if p.front or p.best]
        frame(plt, [p.pp for p in pts], [p.tg for p in pts], labels, 40)
