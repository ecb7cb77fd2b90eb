"""The sweep screen (`w`): axes over the knobs that matter, planned before it runs, then measured.

The grid is planned as the fields change (planned memory and risk per row; predicted OOMs are
skipped unless "try anyway" is ticked). `g` runs it (or resumes it: finished rows are kept), `x`
cancels, `b` saves the best row as a TOML profile and an INI section. The sweep itself runs in the
main screen's tuning controller, so `Escape` goes back while it keeps running.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Checkbox, Footer, Input, ProgressBar, Select, Static

from tui.core.options.settings import Settings
from tui.ui.lab import experiments
from tui.ui.lab.charts import SweepChart
from tui.ui.lab.controller import LabController
from tui.ui.lab.messages import SavedSweep
from tui.ui.lab.screen_base import SetupScreen, keys, progress_row, row, text_field
from tui.ui.lab.tables import SweepTable
from tui.ui.lab.views import SWEEP_KNOBS, SweepRowView, SweepSetup, SweepView
from tui.ui.widgets.probe_plot import ProbePlot

OBJECTIVE_HINT = "tg, pp or workload:IN,OUT"


def default_setup(suite: str, repeat: int, n_predict: int | None) -> SweepSetup:
    """MTP on and off: the first question; the other knobs start empty (their hint shows values)."""
    return SweepSetup(axes=(("mtp", "on,off"),), suite=suite, repeat=repeat, n_predict=n_predict)


def suite_choices(suites: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(Path(s).name if "/" in s else s, s) for s in suites]


class SweepScreen(SetupScreen):
    """Set up, plan, run, watch and save a sweep over the settings on screen."""

    DEFAULT_CSS = """
    SweepScreen #sweep-setup { width: 36; }
    SweepScreen #sweep-setup .row > Label { width: 14; }
    SweepScreen #sweep-message { height: 1; }
    SweepScreen #sweep-table { height: 1fr; min-height: 4; scrollbar-size-horizontal: 0; }
    SweepScreen #sweep-note { height: auto; max-height: 3; color: $warning; }
    SweepScreen #sweep-plots { height: 1fr; min-height: 6; }
    SweepScreen #sweep-summary { height: auto; max-height: 4; color: $foreground; }
    SweepScreen.-narrow #sweep-live { display: none; }
    SweepScreen.-short #sweep-plots { display: none; }
    SweepScreen.-short #sweep-summary { max-height: 2; }
    """
    AUTO_FOCUS = "#sweep-table"
    BINDINGS = keys(
        "sweep_screen", "run", "Run/resume",
        Binding("b", "save_best", "Save best", id="sweep_screen.save_best"),
        Binding("e", "edit", "Edit axes", id="sweep_screen.edit"),
        Binding("r", "resume_saved", "Saved sweep", id="sweep_screen.saved"),
        *[Binding(str(i + 1), f"edit({i})", f"Edit axis {i + 1}", show=False, id=f"sweep_screen.axis{i + 1}")
          for i in range(len(SWEEP_KNOBS))],
        typing=(Binding("f4", "save_best", "Save best", show=False, priority=True, id="sweep_screen.typing.save_best"),))
    KIND, WHAT, REFUSED = "sweep", "the sweep", "Cannot run the sweep"
    BORDER_TITLES = {"#sweep-right": "Rows", "#sweep-setup": "Setup"}

    def __init__(self, lab: LabController, settings: Settings, setup: SweepSetup, suites: tuple[str, ...], *,
                 fixed: SweepView | None = None) -> None:
        super().__init__(lab, settings, setup, fixed)
        self.suites = suites if setup.suite in suites else (setup.suite, *suites)
        self.defn: Any = None  # the planned grid's core SweepDefinition, and its plans
        self.plans: dict[str, Any] = {}
        self._planner: Any = None

    def compose(self) -> ComposeResult:
        yield Static("Sweep: g runs or resumes · x cancels · b saves the best · Escape goes back (it keeps running)",
                     classes="title")
        with Horizontal(classes="body"):
            with VerticalScroll(id="sweep-setup", classes="box setup"):
                yield Static("Axes (values, comma-separated)", classes="section")
                given = dict(self.setup.axes)
                for i, (knob, label, hint) in enumerate(SWEEP_KNOBS):
                    yield row(f"{i + 1} {label}", text_field(given.get(knob, ""), f"axis-{i}", f"e.g. {hint}"))
                yield Static("Run", classes="section")
                yield row("suite", Select(suite_choices(self.suites), value=self.setup.suite, allow_blank=False,
                                          id="sweep-suite", compact=True))
                yield row("repeats", text_field(str(self.setup.repeat), "sweep-repeat"))
                yield row("objective", text_field(self.setup.objective, "sweep-objective", OBJECTIVE_HINT))
                yield row("save as", text_field(self.setup.save_as, "sweep-save-as"))
                yield Checkbox("run predicted OOMs anyway", self.setup.try_anyway, id="sweep-try-anyway", compact=True)
            with Vertical(id="sweep-right", classes="box"):
                yield progress_row("sweep")
                yield Static("", id="sweep-message", classes="message")
                yield SweepTable(id="sweep-table")
                yield Static("", id="sweep-note", classes="note")
                with Horizontal(id="sweep-plots"):
                    yield ProbePlot("tg", id="sweep-live")
                    yield SweepChart(id="sweep-chart")
                yield Static("", id="sweep-summary")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        if self.fixed is None:
            self._planner = experiments.planner(experiments.simulated(self.lab.options))
        super().on_mount()

    # --- setup -> definition -> plan -----------------------------------------------------------

    def read_setup(self) -> SweepSetup:
        """The fields as a SweepSetup (bad numbers are left for the core to name)."""
        def text(fid: str) -> str:
            return self.query_one(f"#{fid}", Input).value.strip()

        axes = tuple((knob, text(f"axis-{i}")) for i, (knob, _l, _h) in enumerate(SWEEP_KNOBS))
        try:
            repeat = int(text("sweep-repeat"))
        except ValueError:
            repeat = -1
        return replace(self.setup, axes=tuple(a for a in axes if a[1]), repeat=repeat,
                       suite=str(self.query_one("#sweep-suite", Select).value), objective=text("sweep-objective") or "tg", save_as=text("sweep-save-as"),
                       try_anyway=self.query_one("#sweep-try-anyway", Checkbox).value)

    def check(self, settings: Settings, setup: SweepSetup) -> tuple[SweepView, Any, Any] | str:
        """The grid planned: (its view, definition, plans), or the field that is wrong."""
        if setup.repeat < 1:
            return "repeats: give a whole number, at least 1 (3 or more to see the spread)"
        try:
            return experiments.preview(settings, setup, self._planner)
        except ValueError as exc:
            return str(exc)

    def checked(self, answer: tuple[SweepView, Any, Any] | str) -> None:
        if isinstance(answer, str):
            self.say("#sweep-message", answer, error=True)
            return
        view, self.defn, self.plans = answer
        if self.lab.running == "sweep":
            return  # the running sweep stays on screen
        oom = sum(1 for r in view.rows if r.risk == "oom")
        done = sum(1 for r in view.rows if r.status not in ("pending", "running"))
        parts = [f"{len(view.rows)} rows planned"]
        if oom:
            parts.append(f"{oom} predicted to OOM ({'run anyway' if self.setup.try_anyway else 'skipped'})")
        if done:
            parts.append(f"{done} already done (g resumes)")
        runs = len(view.rows) - done - (0 if self.setup.try_anyway else oom)
        self.show(replace(view, message=" · ".join(parts) + self.duration(runs)))

    def duration(self, rows: int) -> str:
        """What `g` will do and how long it should take, said before it starts (a long run's rule)."""
        # lazy: the lab's engine loads with the first check (a worker), never with the first frame
        from tui.core.lab.events import work_size
        from tui.core.probes.run_types import RunConfig
        from tui.core.probes.suites import SuiteError, get_suite

        try:
            prompts = get_suite(self.setup.suite).prompts
        except SuiteError:
            return " · g runs"  # the check says why the suite cannot be read
        per = self.setup.n_predict or RunConfig().n_predict
        size = work_size(rows, [p.n_predict or per for p in prompts], self.setup.repeat)
        return (f" · g runs {rows} launch{'es' if rows != 1 else ''} and {size.requests} requests\n"
                + self.lab.expected(size))

    # --- showing -------------------------------------------------------------------------------

    def show(self, view: SweepView) -> None:
        self._shown = view
        self.query_one("#sweep-progress", ProgressBar).update(total=max(1, view.total), progress=view.done)
        self.query_one("#sweep-progress-text", Static).update(Content(view.progress_text()))
        self.say("#sweep-message", view.error or view.message, error=bool(view.error))
        self.query_one(SweepTable).show(view)
        self.show_note()
        self.query_one(ProbePlot).show(view.points)
        self.query_one(SweepChart).show((view.measured, view.best))
        self.query_one("#sweep-summary", Static).update(Content("\n".join(view.summary)))

    def note(self, row: SweepRowView | None) -> str:
        return f"#{row.number}: {row.note}" if row is not None and row.note else ""

    def live(self, lab: LabController) -> SweepView | None:
        """The sweep while it runs, and its last view after (when it is the grid on screen)."""
        same = self.defn is not None and lab.sweep_defn is not None and lab.sweep_defn.sweep_id == self.defn.sweep_id
        return lab.sweep_view if lab.running == "sweep" or same else None

    # --- actions -------------------------------------------------------------------------------

    def ready(self) -> Callable[[], str | None] | None:
        if self.refuse(self.problem):
            return None
        if self.defn is None:
            self.notify("the grid is still being planned; press g again in a moment")
            return None
        if self.refuse(self.lab.blocked()):
            return None
        defn, plans = self.defn, self.plans
        return lambda: self.lab.start_sweep(defn, plans)

    def action_save_best(self) -> None:
        if self.fixed is None and self.defn is not None:
            defn, name = self.defn, self.setup.save_as or "sweep-best"
            self.keep(lambda: experiments.save_best(defn, name), ("Best saved", "Best not saved"),
                      "saved the best as {}")

    def action_resume_saved(self) -> None:
        """The newest saved sweep, its settings and axes on screen: `g` then continues it."""
        if self.fixed is None:
            self._saved_worker(self.settings)

    @work(thread=True, exclusive=True, exit_on_error=False, group="sweep-saved")
    def _saved_worker(self, current: Settings) -> None:
        self.post_message(SavedSweep(experiments.newest_saved(current)))

    @on(SavedSweep)
    def _saved(self, message: SavedSweep) -> None:
        if isinstance(message.found, str):
            self.notify(message.found, title="Saved sweeps", severity="warning")
            return
        self.settings, setup = message.found
        self.setup = replace(setup, save_as=self.setup.save_as)
        given = dict(setup.axes)
        with self.prevent(Input.Changed, Select.Changed, Checkbox.Changed):
            for i, (knob, _l, _h) in enumerate(SWEEP_KNOBS):
                self.query_one(f"#axis-{i}", Input).value = given.get(knob, "")
            self.query_one("#sweep-repeat", Input).value = str(setup.repeat)
            self.query_one("#sweep-objective", Input).value = setup.objective
            self.query_one("#sweep-try-anyway", Checkbox).value = setup.try_anyway
            if setup.suite not in self.suites:
                self.suites = (*self.suites, setup.suite)
                self.query_one("#sweep-suite", Select).set_options(suite_choices(self.suites))
            self.query_one("#sweep-suite", Select).value = setup.suite
        self.recheck()
        self.notify("the newest saved sweep, with the settings it ran with: g continues it", title="Saved sweep")
