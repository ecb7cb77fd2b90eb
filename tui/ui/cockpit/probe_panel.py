"""Probes: choose a suite, run, cancel, progress; live plots of TG, PP and acceptance, the acceptance by
draft position beside them; last results and the n-max advice."""

from __future__ import annotations

from pathlib import Path

from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.content import Content
from textual.widgets import Button, Collapsible, DataTable, ProgressBar, Select, Static

from tui.ui.format import markup_safe, pct, plain, spread
from tui.ui.theme_colors import series_rgb
from tui.ui.cockpit.views import ProbeState
from tui.ui.widgets.position_bars import PositionBars


class ProbePanel(Vertical):
    """Shows a `ProbeState`; its buttons run app actions, the App reads `suite` when a run starts."""

    DEFAULT_CSS = """
    ProbePanel { height: 1fr; border: round $foreground 25%; padding: 0 1; }
    ProbePanel > #probe-controls { height: 1; }
    ProbePanel #probe-suite { width: 24; height: 1; }
    ProbePanel Button { margin-left: 1; min-width: 0; width: auto; }
    ProbePanel Button:focus { text-style: bold reverse; }
    ProbePanel #probe-progress { width: 1fr; margin-left: 1; }
    ProbePanel #probe-message { height: 1; color: $foreground-muted; }
    ProbePanel > #probe-plots { height: 1fr; min-height: 6; }
    ProbePanel > #probe-results { height: auto; max-height: 6; }
    ProbePanel > #probe-verdict { height: auto; color: $foreground; }
    ProbePanel > #probe-advice { height: auto; max-height: 6; border: none; padding: 0; margin: 0;
                                 background: transparent; }
    ProbePanel > #probe-advice CollapsibleTitle { color: $foreground-muted; padding: 0; }
    ProbePanel > #probe-advice Contents { padding: 0 0 0 2; }
    ProbePanel #probe-advice-text { color: $foreground-muted; height: auto; }
    ProbePanel > #probe-warnings { height: auto; max-height: 8; border: none; padding: 0; margin: 0;
                                   background: transparent; }
    ProbePanel > #probe-warnings CollapsibleTitle { color: $warning; padding: 0; }
    ProbePanel > #probe-warnings Contents { padding: 0 0 0 2; }
    ProbePanel #probe-warnings-text { color: $warning; height: auto; }
    """

    def __init__(self, suites: tuple[str, ...] = ("tasks", "long-prompt"), *, defer_plots: bool = True,
                 **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._suites = suites
        self._defer_plots = defer_plots
        self._last: ProbeState | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="probe-controls"):
            choices = [(Path(s).name if "/" in s else s, s) for s in self._suites]
            yield Select(choices, value=self._suites[0], allow_blank=False, id="probe-suite", compact=True)
            yield Button("Run \\[p]", id="probe-run", action="app.run_probes", variant="primary", compact=True)
            yield Button("Cancel \\[x]", id="probe-cancel", action="app.cancel_probes", compact=True)
            yield ProgressBar(total=1, show_eta=False, id="probe-progress")
        yield Static("", id="probe-message")
        with Horizontal(id="probe-plots"):
            if not self._defer_plots:
                yield from self._plots()
            yield PositionBars(id="probe-positions")
        yield DataTable(id="probe-results", cursor_type="none", zebra_stripes=True)
        yield Static("", id="probe-verdict")
        # the n-max advice folds into one line, as the warnings do, so the plots keep their rows
        with Collapsible(title="", collapsed=True, id="probe-advice"):
            yield Static("", id="probe-advice-text")
        # warnings fold into one line: three of them used to squeeze every plot to two rows
        with Collapsible(title="", collapsed=True, id="probe-warnings"):
            yield Static("", id="probe-warnings-text")

    def on_mount(self) -> None:
        self.border_title = "Probes"
        if self._defer_plots:  # plotext imports slowly: the first frame does not wait for it
            self.call_after_refresh(self._mount_plots)
        table = self.query_one("#probe-results", DataTable)
        # the plots' samples: one per request (median and min–max over them)
        table.add_columns("configuration", "reqs", "TG t/s (min–max)", "PP t/s (min–max)", "accept")
        self.show(ProbeState(suites=self._suites))
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self._theme_changed())

    @staticmethod
    def _plots() -> list[Widget]:
        from tui.ui.widgets.probe_plot import ProbePlot  # lazy: plotext loads after the first frame (defer_plots)

        return [ProbePlot(metric, id=f"plot-{metric}") for metric in ("tg", "pp", "acceptance")]

    def _mount_plots(self) -> None:
        plots = self._plots()
        self.query_one("#probe-plots", Horizontal).mount_all(plots, before="#probe-positions")
        if self._last is not None:
            for plot in plots:
                plot.show(self._last.points)

    def _fill_table(self, state: ProbeState) -> None:
        """One row per configuration, its swatch in the colour of its series in the plots."""
        table = self.query_one("#probe-results", DataTable)
        table.clear()
        configs = list(dict.fromkeys(p.config for p in state.points))
        colours = series_rgb(self.app.theme_variables)
        for s in state.summaries:
            i = configs.index(s.config) if s.config in configs else -1
            style = Style(color=Color.from_rgb(*colours[i % len(colours)])) if i >= 0 else Style()
            table.add_row(
                Text.assemble(("■ ", style), s.config), str(s.n), spread(s.tg_median, s.tg_min, s.tg_max),
                spread(s.pp_median, s.pp_min, s.pp_max), pct(s.acceptance),
            )

    def _theme_changed(self) -> None:
        if self._last is not None:
            self._fill_table(self._last)

    @property
    def suite(self) -> str:
        value = self.query_one("#probe-suite", Select).value
        return str(value) if value is not Select.NULL else self._suites[0]

    def show(self, state: ProbeState) -> None:
        last, self._last = self._last, state
        self.query_one("#probe-run", Button).disabled = state.running
        self.query_one("#probe-cancel", Button).disabled = not state.running
        bar = self.query_one("#probe-progress", ProgressBar)
        bar.update(total=max(1, state.total), progress=state.done)
        message = state.message or ("running…" if state.running else "choose a suite and press p")
        self.query_one("#probe-message", Static).update(plain(message, keep_lines=True))  # a server's error body
        if last is None or last.points != state.points:
            for plot in self.query("#probe-plots > ProbePlot"):
                plot.show(state.points)  # type: ignore[attr-defined]
        if last is None or last.summaries != state.summaries or last.points != state.points:
            self._fill_table(state)
        self.query_one("#probe-verdict", Static).update(Content(state.verdict))
        self._show_positions(state)
        self._show_warnings(state.warnings)

    def _show_positions(self, state: ProbeState) -> None:
        """The newest configuration with per-position figures: its bars beside the acceptance plot
        (app.tcss hides them on a narrow screen, as the PP plot), its n-max advice under the verdict, one line that unfolds to the
        evidence (hidden when no configuration drafted with /metrics on)."""
        row = next((s for s in reversed(state.summaries) if s.positions), None)
        self.query_one("#probe-positions", PositionBars).show(row.positions if row else (),
                                                               row.advised_n_max if row else None)
        box = self.query_one("#probe-advice", Collapsible)
        box.display = bool(row and row.advice)
        if row is None or not row.advice:
            return
        box.title = markup_safe(f"{row.config}: {row.advice_headline}")
        # "57 %" never breaks across lines
        self.query_one("#probe-advice-text", Static).update(plain(row.advice.replace(" %", "\u00a0%")))

    def _show_warnings(self, warnings: tuple[str, ...]) -> None:
        """One collapsed line ("⚠ 2 warnings: the first…"); Enter or a click unfolds all of them."""
        box = self.query_one("#probe-warnings", Collapsible)
        unique = tuple(dict.fromkeys(warnings))
        box.display = bool(unique)
        if not unique:
            return
        first = unique[0] if len(unique[0]) <= 60 else unique[0][:59] + "…"
        box.title = markup_safe(f"⚠ {len(unique)} warning{'s' if len(unique) > 1 else ''}: {first}")
        self.query_one("#probe-warnings-text", Static).update(plain("\n".join(f"⚠ {w}" for w in unique), keep_lines=True))
