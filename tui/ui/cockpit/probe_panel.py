"""Probes: choose a suite and how many requests at once, run, cancel, progress; live plots of TG, PP and
acceptance, the acceptance by draft position beside them; last results, what N requests at once got
together, and the n-max advice."""

from __future__ import annotations

from pathlib import Path

from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.content import Content
from textual.widgets import Button, Collapsible, DataTable, Input, ProgressBar, Select, Static

from tui.ui.format import markup_safe, pct, plain, spread
from tui.ui.theme_colors import series_rgb
from tui.ui.cockpit.views import ProbeState, ProbeSummary
from tui.ui.widgets.position_bars import PositionBars


class ProbePanel(Vertical):
    """Shows a `ProbeState`; its buttons run app actions, the App reads `suite` when a run starts."""

    DEFAULT_CSS = """
    ProbePanel { height: 1fr; border: round $foreground 25%; padding: 0 1; }
    ProbePanel > #probe-controls { height: 1; }
    ProbePanel #probe-suite { width: 24; height: 1; }
    ProbePanel Button { margin-left: 1; min-width: 0; width: auto; }
    ProbePanel Button:focus { text-style: bold reverse; }
    ProbePanel #probe-at-once-label { width: auto; margin-left: 2; color: $foreground-muted; }
    ProbePanel #probe-concurrency { width: 4; margin-left: 1; }
    ProbePanel #probe-progress { width: 1fr; margin-left: 1; }
    ProbePanel #probe-message { height: 1; color: $foreground-muted; }
    ProbePanel > #probe-plots { height: 1fr; min-height: 6; }
    ProbePanel > #probe-results { height: auto; max-height: 6; }
    ProbePanel > #probe-load { height: auto; max-height: 2; color: $foreground; text-wrap: nowrap;
                               text-overflow: ellipsis; }
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
            # screen.: the actions are the main screen's (app. reached nothing, so a click did not run)
            yield Button("Run \\[p]", id="probe-run", action="screen.run_probes", variant="primary", compact=True)
            yield Button("Cancel \\[x]", id="probe-cancel", action="screen.cancel_probes", compact=True)
            yield Static("at once", id="probe-at-once-label")
            yield Input("1", id="probe-concurrency", compact=True, restrict=r"[0-9]*", max_length=3,
                        tooltip="requests in flight at once: N needs a server with -np N; Enter runs")
            yield ProgressBar(total=1, show_eta=False, id="probe-progress")
        yield Static("", id="probe-message")
        with Horizontal(id="probe-plots"):
            if not self._defer_plots:
                yield from self._plots()
            yield PositionBars(id="probe-positions")
        yield DataTable(id="probe-results", cursor_type="none", zebra_stripes=True)
        yield Static("", id="probe-load")
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

    def _swatch(self, state: ProbeState, config: str) -> Style:
        """The colour of `config`'s series in the plots (no colour for a row without points)."""
        configs = list(dict.fromkeys(p.config for p in state.points))
        if config not in configs:
            return Style()
        colours = series_rgb(self.app.theme_variables)
        return Style(color=Color.from_rgb(*colours[configs.index(config) % len(colours)]))

    def _fill_table(self, state: ProbeState) -> None:
        """One row per configuration, its swatch in the colour of its series in the plots."""
        table = self.query_one("#probe-results", DataTable)
        table.clear()
        for s in state.summaries:
            table.add_row(
                Text.assemble(("■ ", self._swatch(state, s.config)), s.config), str(s.n),
                spread(s.tg_median, s.tg_min, s.tg_max), spread(s.pp_median, s.pp_min, s.pp_max), pct(s.acceptance),
            )

    def _theme_changed(self) -> None:
        if self._last is not None:
            self._fill_table(self._last)
            self._show_load(self._last)

    @property
    def suite(self) -> str:
        value = self.query_one("#probe-suite", Select).value
        return str(value) if value is not Select.NULL else self._suites[0]

    @property
    def concurrency_text(self) -> str:
        """The "at once" field as typed (the core's `parse_concurrency` reads it when a run starts)."""
        return self.query_one("#probe-concurrency", Input).value

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "probe-concurrency":
            event.stop()
            self.run_action("screen.run_probes")

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
        self._show_load(state)
        self.query_one("#probe-verdict", Static).update(Content(state.verdict))
        self._show_positions(state)
        self._show_warnings(state.warnings)

    def _show_load(self, state: ProbeState) -> None:
        """Per configuration run N requests at once (the newest two), under its table row's swatch:
        what the N got together (the aggregate TG over each pass's concurrent phase) and how far apart
        the requests' own speeds were (the row's TG is theirs); hidden when every run sent one request
        at a time. The swatch stands for the name, which a long configuration would push off the line."""
        rows = [s for s in state.summaries if s.concurrency > 1][-2:]
        box = self.query_one("#probe-load", Static)
        box.display = bool(rows)
        box.update(Text("\n").join(Text.assemble(("■ ", self._swatch(state, s.config)), load_line(s)) for s in rows))

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


def load_line(row: ProbeSummary) -> str:
    """`×4 together 202 (166–266) t/s · per-request spread 130 %` (spread: (max - min) / median of
    the requests' own TG)."""
    agg, req = row.aggregate_tg or (None, None, None), row.request_tg
    far = f" · per-request spread {pct((req[2] - req[1]) / req[0])}" if req and req[0] else ""
    return f"×{row.concurrency} together {spread(*agg)} t/s{far}"
