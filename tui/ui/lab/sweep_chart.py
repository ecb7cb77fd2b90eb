"""The sweep's rows compared: TG against PP, one point per measured configuration, the best marked."""

from __future__ import annotations

from textual_plotext import PlotextPlot

from tui.ui.theme_colors import series_rgb
from tui.ui.lab.views import SweepRowView


class SweepChart(PlotextPlot):
    """Redraws from the rows it is given, only when they change; the best row is a bold star."""

    DEFAULT_CSS = """
    SweepChart { height: 1fr; min-height: 6; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._rows: tuple[SweepRowView, ...] | None = None
        self._best: int | None = None

    def on_mount(self) -> None:
        super().on_mount()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._draw())
        self._draw()

    def show(self, rows: tuple[SweepRowView, ...], best: int | None) -> None:
        if rows == self._rows and best == self._best:
            return
        self._rows, self._best = rows, best
        self._draw()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("TG vs PP (t/s) · ★ best")
        colours = series_rgb(self.app.theme_variables)
        rows = [r for r in self._rows or () if r.tg is not None and r.pp is not None]
        others = [r for r in rows if r.number != self._best]
        best = [r for r in rows if r.number == self._best]
        if others:
            plt.scatter([r.pp for r in others], [r.tg for r in others], marker="●", color=colours[0])
        if best:
            plt.scatter([r.pp for r in best], [r.tg for r in best], marker="★", color=colours[1], style="bold")
        if rows:
            lo_x, hi_x = min(r.pp for r in rows), max(r.pp for r in rows)  # type: ignore[type-var]
            lo_y, hi_y = min(r.tg for r in rows), max(r.tg for r in rows)  # type: ignore[type-var]
            pad_x, pad_y = max(1.0, (hi_x - lo_x) * 0.15), max(1.0, (hi_y - lo_y) * 0.15)  # type: ignore[operator]
            plt.xlim(lo_x - pad_x, hi_x + pad_x * 2)  # type: ignore[operator]
            plt.ylim(lo_y - pad_y, hi_y + pad_y)  # type: ignore[operator]
            cell = (hi_x - lo_x + 3 * pad_x) / 20  # about two character cells (redrawn on data, not on resize)
            middle = (lo_x + hi_x) / 2  # type: ignore[operator]
            for r in rows:  # the label beside its point, on the side with room
                colour = colours[1] if r.number == self._best else colours[0]
                right = r.pp <= middle  # type: ignore[operator]
                x = r.pp + cell if right else r.pp - cell  # type: ignore[operator]
                plt.text(f"#{r.number}", x, r.tg, alignment="left" if right else "right", color=colour)
        else:
            plt.xticks([])
            plt.yticks([])
        plt.xlabel("PP t/s")
        self.refresh()
