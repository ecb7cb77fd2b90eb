"""A live plot of one probe metric, one series per configuration (so MTP on and off sit side by side)."""

from __future__ import annotations

from textual_plotext import PlotextPlot

from tui.ui.theme_colors import series_rgb
from tui.ui.shared_views import ProbePoint

METRICS = {
    "tg": ("TG t/s", lambda p: p.tg_tps),
    "pp": ("PP t/s", lambda p: p.pp_tps),
    "acceptance": ("acceptance %", lambda p: None if p.acceptance is None else 100.0 * p.acceptance),
}


class ProbePlot(PlotextPlot):
    """Redraws from the points it is given, on the main thread, only when they change."""

    DEFAULT_CSS = """
    ProbePlot { height: 1fr; min-height: 6; }
    """

    def __init__(self, metric: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.metric = metric
        self._points: tuple[ProbePoint, ...] | None = None

    def on_mount(self) -> None:
        super().on_mount()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._draw())
        self._draw()

    def show(self, points: tuple[ProbePoint, ...]) -> None:
        if points == self._points:
            return
        self._points = points
        self._draw()

    def _draw(self) -> None:
        title, get = METRICS[self.metric]
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(title)
        configs = list(dict.fromkeys(p.config for p in self._points or ()))
        colours = series_rgb(self.app.theme_variables)
        for i, config in enumerate(configs):
            xs, ys = [], []
            for p in self._points or ():
                value = get(p)
                if p.config == config and value is not None:
                    xs.append(p.index)
                    ys.append(value)
            if xs:
                label = config if self.metric == "tg" else None  # one legend is enough
                plt.plot(xs, ys, label=label, marker="braille", color=colours[i % len(colours)])
        if self.metric == "acceptance":
            plt.ylim(0, 100)
        n = max((p.index for p in self._points or ()), default=0) + 1
        step = max(1, n // 4)
        plt.xticks(list(range(0, n, step)))
        if not configs:
            plt.yticks([])
        self.refresh()


