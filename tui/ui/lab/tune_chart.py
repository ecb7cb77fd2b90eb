"""Every measured configuration of a tune, PP against TG: MTP off and on in two markers and colours,
the Pareto front (no other trial is faster at both) drawn as a line through its points, the best a star."""

from __future__ import annotations

from textual_plotext import PlotextPlot

from tui.ui.theme_colors import series_rgb
from tui.ui.lab.tune_views import TunePoint

TITLE = "TG vs PP (t/s) · ● MTP off · ▲ MTP on · ─ Pareto front · ★ best"


class TuneChart(PlotextPlot):
    """Redraws from the points it is given, only when they change (theme colours via $series-*)."""

    DEFAULT_CSS = """
    TuneChart { height: 1fr; min-height: 6; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._points: tuple[TunePoint, ...] | None = None

    def on_mount(self) -> None:
        super().on_mount()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._draw())
        self._draw()

    def show(self, points: tuple[TunePoint, ...]) -> None:
        if points == self._points:
            return
        self._points = points
        self._draw()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(TITLE)
        colours = series_rgb(self.app.theme_variables)
        pts = list(self._points or ())
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
        if pts:
            lo_x, hi_x = min(p.pp for p in pts), max(p.pp for p in pts)
            lo_y, hi_y = min(p.tg for p in pts), max(p.tg for p in pts)
            pad_x, pad_y = max(1.0, (hi_x - lo_x) * 0.15), max(1.0, (hi_y - lo_y) * 0.15)
            plt.xlim(lo_x - pad_x, hi_x + pad_x * 2)
            plt.ylim(lo_y - pad_y, hi_y + pad_y)
            cell = (hi_x - lo_x + 3 * pad_x) / 40  # about one character cell: the label beside its point
            middle = (lo_x + hi_x) / 2
            for p in pts:  # the front and the best are named; the rest would crowd the plot
                if not (p.front or p.best):
                    continue
                right = p.pp <= middle
                colour = colours[3] if p.best else colours[1] if p.mtp else colours[0]
                plt.text(f"#{p.number}", p.pp + cell if right else p.pp - cell, p.tg,
                         alignment="left" if right else "right", color=colour)
        else:
            plt.xticks([])
            plt.yticks([])
        plt.xlabel("PP t/s")
        self.refresh()
