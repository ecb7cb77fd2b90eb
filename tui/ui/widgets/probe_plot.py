"""The plots: `Plot`, what every plotext plot of the TUI shares, and `ProbePlot`, a live plot of one probe
metric, one series per configuration (so MTP on and off sit side by side)."""

from __future__ import annotations

from typing import Any

from textual_plotext import PlotextPlot

from tui.ui.theme_colors import series_rgb
from tui.ui.shared_views import ProbePoint

METRICS = {
    "tg": ("TG t/s", lambda p: p.tg_tps),
    "pp": ("PP t/s", lambda p: p.pp_tps),
    "acceptance": ("acceptance %", lambda p: None if p.acceptance is None else 100.0 * p.acceptance),
}


class Plot(PlotextPlot):
    """Redraws from the data it is given, on the main thread, only when it changes, and when the theme
    does (its colours are the theme's $series-* variables)."""

    DEFAULT_CSS = """
    Plot { height: 1fr; min-height: 6; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.data: Any = None

    def on_mount(self) -> None:
        super().on_mount()
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._redraw())
        self._redraw()

    def show(self, data: Any) -> None:
        if data == self.data:
            return
        self.data = data
        self._redraw()

    def _redraw(self) -> None:
        self.plt.clear_data()
        self.plt.clear_figure()
        self.draw(self.plt, series_rgb(self.app.theme_variables))
        self.refresh()

    def draw(self, plt: Any, colours: list[Any]) -> None:
        raise NotImplementedError


class ProbePlot(Plot):
    """One metric of the probe points it is given (`show(points)`)."""

    def __init__(self, metric: str, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.metric = metric

    def draw(self, plt: Any, colours: list[Any]) -> None:
        title, get = METRICS[self.metric]
        points: tuple[ProbePoint, ...] = self.data or ()
        plt.title(title)
        configs = list(dict.fromkeys(p.config for p in points))
        for i, config in enumerate(configs):
            xs, ys = [], []
            for p in points:
                value = get(p)
                if p.config == config and value is not None:
                    xs.append(p.index)
                    ys.append(value)
            if xs:
                label = config if self.metric == "tg" else None  # one legend is enough
                plt.plot(xs, ys, label=label, marker="braille", color=colours[i % len(colours)])
        values = {v for p in points if (v := get(p)) is not None}
        if self.metric == "acceptance":
            plt.ylim(0, 100)
        elif len(values) == 1:  # one point, or all alike: axes of its own scale, not a ±0.5 sliver
            (v,) = values
            plt.ylim(v * 0.9, v * 1.1) if v else plt.ylim(0, 1)
        n = max((p.index for p in points), default=0) + 1
        step = max(1, n // 4)
        plt.xticks(list(range(0, n, step)))
        if not configs:
            plt.yticks([])
