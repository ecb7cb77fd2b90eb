"""The sweep screen (`w`): axes over the knobs that matter, planned before it runs, then measured.

The grid is planned as the fields change (planned memory and risk per row; predicted OOMs are
skipped unless "try anyway" is ticked). `g` runs it (or resumes it: finished rows are kept), `x`
cancels, `b` saves the best row as a TOML profile and an INI section. The sweep itself runs in the
main screen's tuning controller, so `Escape` goes back while it keeps running.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Checkbox, DataTable, Footer, Input, Label, ProgressBar, Select, Static

from tui.core.options.settings import Settings
from tui.ui.lab.confirm import confirm_then
from tui.ui.lab.controller import LabController
from tui.ui.lab.screen_base import TuningScreen
from tui.ui.lab.messages import Kept, SavedSweep, SweepPreviewed
from tui.ui.lab.views import SWEEP_KNOBS, SweepSetup, SweepView
from tui.ui.widgets.inputs import TextInput
from tui.ui.widgets.probe_plot import ProbePlot
from tui.ui.lab.sweep_chart import SweepChart
from tui.ui.lab.sweep_table import SweepTable


OBJECTIVE_HINT = "tg, pp or workload:IN,OUT"


def default_setup(suite: str, repeat: int, n_predict: int | None) -> SweepSetup:
    """MTP on and off: the first question; the other knobs start empty (their hint shows values)."""
    return SweepSetup(axes=(("mtp", "on,off"),), suite=suite, repeat=repeat, n_predict=n_predict)


class SweepScreen(TuningScreen):
    """Set up, plan, run, watch and save a sweep over the settings on screen."""

    DEFAULT_CSS = """
    SweepScreen { layout: vertical; }
    SweepScreen > #sweep-title { height: 1; background: $panel; color: $foreground; padding: 0 1; text-style: bold; }
    SweepScreen > #sweep-body { height: 1fr; }
    SweepScreen #sweep-setup { width: 36; border: round $foreground 25%; padding: 0 1; scrollbar-size-vertical: 1; }
    SweepScreen #sweep-setup:focus-within { border: round $primary; }
    SweepScreen #sweep-setup .row { height: 1; }
    SweepScreen #sweep-setup .row > Label { width: 14; color: $foreground; }
    SweepScreen #sweep-setup .row > Input { width: 1fr; }
    SweepScreen #sweep-setup .row > Select { width: 1fr; }
    SweepScreen #sweep-setup .section { color: $primary; text-style: bold; }
    SweepScreen #sweep-setup Checkbox { border: none; height: 1; padding: 0; background: transparent; }
    SweepScreen #sweep-right { width: 1fr; border: round $foreground 25%; padding: 0 1; }
    SweepScreen #sweep-progress-row { height: 1; }
    SweepScreen #sweep-progress { width: 24; }
    SweepScreen #sweep-progress-text { width: 1fr; margin-left: 1; color: $foreground-muted; }
    SweepScreen #sweep-message { height: 1; color: $foreground-muted; }
    SweepScreen #sweep-message.-error { color: $error; }
    SweepScreen #sweep-table { height: 1fr; min-height: 4; scrollbar-size-horizontal: 0; }
    SweepScreen #sweep-note { height: auto; max-height: 3; color: $warning; }
    SweepScreen #sweep-plots { height: 1fr; min-height: 6; }
    SweepScreen #sweep-summary { height: auto; max-height: 4; color: $foreground; }
    SweepScreen.-narrow #sweep-setup { display: none; }
    SweepScreen.-narrow.-editing #sweep-setup { display: block; width: 36; }
    SweepScreen.-narrow #sweep-live { display: none; }
    SweepScreen.-short #sweep-plots { display: none; }
    SweepScreen.-short #sweep-summary { max-height: 2; }
    """
    AUTO_FOCUS = "#sweep-table"
    BINDINGS = [
        Binding("escape", "back", "Back", id="sweep_screen.back"),
        Binding("g", "run", "Run/resume", id="sweep_screen.run"),
        Binding("x", "cancel", "Cancel", id="sweep_screen.cancel"),
        Binding("b", "save_best", "Save best", id="sweep_screen.save_best"),
        Binding("e", "edit", "Edit axes", id="sweep_screen.edit"),
        Binding("r", "resume_saved", "Saved sweep", id="sweep_screen.saved"),
        *[Binding(str(i + 1), f"edit({i})", f"Edit axis {i + 1}", show=False, id=f"sweep_screen.axis{i + 1}") for i in range(len(SWEEP_KNOBS))],
        Binding("f5", "run", "Run", show=False, priority=True, id="sweep_screen.typing.run"),
        Binding("f9", "cancel", "Cancel", show=False, priority=True, id="sweep_screen.typing.cancel"),
        Binding("f4", "save_best", "Save best", show=False, priority=True, id="sweep_screen.typing.save_best"),
    ]

    def __init__(self, lab: LabController, settings: Settings, setup: SweepSetup, suites: tuple[str, ...], *,
                 fixed: SweepView | None = None) -> None:
        super().__init__(lab)
        self.settings = settings
        self.setup = setup
        self.suites = suites if setup.suite in suites else (setup.suite, *suites)
        self.fixed = fixed
        self.preview: SweepView | None = None
        self.defn: Any = None
        self.plans: dict[str, Any] = {}
        self.problem: str | None = None
        self.previews = 0  # answered preview requests (tests wait on it)
        self._seq = 0
        self._planner: Any = None
        self._shown: SweepView | None = None

    # --- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static("Sweep: g runs or resumes · x cancels · b saves the best · Escape goes back (it keeps running)",
                     id="sweep-title")
        with Horizontal(id="sweep-body"):
            with VerticalScroll(id="sweep-setup"):
                yield Static("Axes (values, comma-separated)", classes="section")
                given = dict(self.setup.axes)
                for i, (knob, label, hint) in enumerate(SWEEP_KNOBS):
                    with Horizontal(classes="row"):
                        yield Label(f"{i + 1} {label}")
                        yield TextInput(given.get(knob, ""), placeholder=hint, id=f"axis-{i}", compact=True,
                                        select_on_focus=False)
                yield Static("Run", classes="section")
                with Horizontal(classes="row"):
                    yield Label("suite")
                    choices = [(Path(s).name if "/" in s else s, s) for s in self.suites]
                    yield Select(choices, value=self.setup.suite, allow_blank=False, id="sweep-suite", compact=True)
                with Horizontal(classes="row"):
                    yield Label("repeats")
                    yield TextInput(str(self.setup.repeat), id="sweep-repeat", compact=True, select_on_focus=False)
                with Horizontal(classes="row"):
                    yield Label("objective")
                    yield TextInput(self.setup.objective, placeholder=OBJECTIVE_HINT, id="sweep-objective",
                                    compact=True, select_on_focus=False)
                with Horizontal(classes="row"):
                    yield Label("save as")
                    yield TextInput(self.setup.save_as, id="sweep-save-as", compact=True, select_on_focus=False)
                yield Checkbox("run predicted OOMs anyway", self.setup.try_anyway, id="sweep-try-anyway",
                               compact=True)
            with Vertical(id="sweep-right"):
                with Horizontal(id="sweep-progress-row"):
                    yield ProgressBar(total=1, show_eta=False, id="sweep-progress")
                    yield Static("", id="sweep-progress-text")
                yield Static("", id="sweep-message")
                yield SweepTable(id="sweep-table")
                yield Static("", id="sweep-note")
                with Horizontal(id="sweep-plots"):
                    yield ProbePlot("tg", id="sweep-live")
                    yield SweepChart(id="sweep-chart")
                yield Static("", id="sweep-summary")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#sweep-right").border_title = "Rows"
        self.query_one("#sweep-setup").border_title = "Setup"
        self._apply_size_classes()
        if self.fixed is not None:
            self.show(self.fixed)
            return
        self._planner = self.lab.sweep_planner()
        panel = self.lab
        if panel.running == "sweep" and panel.sweep_view is not None:
            self.show(panel.sweep_view)
        self._request_preview()

    # --- setup -> definition -> plan -----------------------------------------------------------

    def read_setup(self) -> SweepSetup:
        """The fields as a SweepSetup (bad numbers are left for the core to name)."""
        axes = tuple((knob, self.query_one(f"#axis-{i}", Input).value.strip()) for i, (knob, _l, _h) in
                     enumerate(SWEEP_KNOBS))
        suite = self.query_one("#sweep-suite", Select).value
        repeat_text = self.query_one("#sweep-repeat", Input).value.strip()
        try:
            repeat = int(repeat_text)
        except ValueError:
            repeat = -1
        return replace(self.setup, axes=tuple(a for a in axes if a[1]), suite=str(suite),
                       repeat=repeat, objective=self.query_one("#sweep-objective", Input).value.strip() or "tg",
                       try_anyway=self.query_one("#sweep-try-anyway", Checkbox).value,
                       save_as=self.query_one("#sweep-save-as", Input).value.strip())

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    def _setup_changed(self) -> None:
        if self.fixed is None and self.is_mounted:
            self._request_preview()

    def _request_preview(self) -> None:
        setup = self.read_setup()
        self.setup = setup
        self._seq += 1
        if setup.repeat < 1:
            self._preview_failed("repeats: give a whole number, at least 1 (3 or more to see the spread)")
            return
        self._preview_worker(self._seq, self.settings, setup)

    @work(thread=True, exclusive=True, exit_on_error=False, group="sweep-preview")
    def _preview_worker(self, seq: int, settings: Settings, setup: SweepSetup) -> None:
        try:
            view, defn, plans = self.lab.preview_sweep(settings, setup, self._planner)
        except ValueError as exc:
            self.post_message(SweepPreviewed(seq, None, error=str(exc)))
            return
        self.post_message(SweepPreviewed(seq, view, defn, plans))

    @on(SweepPreviewed)
    def _previewed(self, message: SweepPreviewed) -> None:
        if message.seq < self._seq:
            return
        self.previews += 1
        if message.error:
            self._preview_failed(message.error)
            return
        self.problem = None
        self.defn, self.plans, self.preview = message.defn, message.plans, message.view
        if self.lab.running == "sweep":
            return  # the running sweep stays on screen
        oom = sum(1 for r in message.view.rows if r.risk == "oom")
        done = sum(1 for r in message.view.rows if r.status not in ("pending", "running"))
        parts = [f"{len(message.view.rows)} rows planned"]
        if oom:
            parts.append(f"{oom} predicted to OOM ({'run anyway' if self.setup.try_anyway else 'skipped'})")
        if done:
            parts.append(f"{done} already done (g resumes)")
        self.show(replace(message.view, message=" · ".join(parts) + " · g runs"))

    def _preview_failed(self, error: str) -> None:
        self.problem = error
        msg = self.query_one("#sweep-message", Static)
        msg.update(Content(error))
        msg.set_class(True, "-error")

    # --- showing -------------------------------------------------------------------------------

    def show(self, view: SweepView) -> None:
        self._shown = view
        bar = self.query_one("#sweep-progress", ProgressBar)
        bar.update(total=max(1, view.total), progress=view.done)
        self.query_one("#sweep-progress-text", Static).update(Content(view.progress_text()))
        msg = self.query_one("#sweep-message", Static)
        msg.update(Content(view.error or view.message))
        msg.set_class(bool(view.error), "-error")
        self.query_one(SweepTable).show(view)
        self._show_note()
        for plot in self.query("#sweep-live"):
            plot.show(view.points)  # type: ignore[attr-defined]
        for chart in self.query("#sweep-chart"):
            chart.show(view.measured, view.best)  # type: ignore[attr-defined]
        self.query_one("#sweep-summary", Static).update(Content("\n".join(view.summary)))

    @on(DataTable.RowHighlighted, "#sweep-table")
    def _show_note(self) -> None:
        """The highlighted row's whole note (the table cuts it to the column)."""
        view, table = self._shown, self.query_one(SweepTable)
        row = view.rows[table.cursor_row] if view is not None and 0 <= table.cursor_row < len(view.rows) else None
        text = f"#{row.number}: {row.note}" if row is not None and row.note else ""
        self.query_one("#sweep-note", Static).update(Content(text))

    def tuning_changed(self, panel: LabController) -> None:
        """The tuning controller's state changed: show the sweep while it runs, and its last view after."""
        if self.fixed is not None or panel.sweep_view is None or not self.is_mounted:
            return
        if panel.running == "sweep" or (self.defn is not None and panel.sweep_defn is not None
                                        and panel.sweep_defn.sweep_id == self.defn.sweep_id):
            self.show(panel.sweep_view)

    # --- actions -------------------------------------------------------------------------------

    def action_run(self) -> None:
        if self.fixed is not None:
            self.notify("this is a fixed preview; nothing runs", severity="warning")
            return
        if self.problem:
            self.notify(self.problem, title="Cannot run the sweep", severity="warning")
            return
        if self.defn is None:
            self.notify("the grid is still being planned; press g again in a moment")
            return
        reason = self.lab.blocked()
        if reason:
            self.notify(reason, title="Cannot run the sweep", severity="warning")
            return
        defn, plans = self.defn, self.plans
        confirm_then(self.app, self.lab.stops_server(), "the sweep", self.lab.server.running_settings(),
                     lambda: self._started(self.lab.start_sweep(defn, plans)))

    def _started(self, reason: str | None) -> None:
        if reason:
            self.notify(reason, title="Cannot run the sweep", severity="warning")

    def action_cancel(self) -> None:
        panel = self.lab
        if panel.running == "sweep":
            panel.cancel()

    def action_save_best(self) -> None:
        if self.fixed is not None or self.defn is None:
            return
        name = self.setup.save_as or "sweep-best"
        self._save_worker(self.defn, name)

    @work(thread=True, exclusive=True, exit_on_error=False, group="sweep-save")
    def _save_worker(self, defn: Any, name: str) -> None:
        what, error = self.lab.save_sweep_best(defn, name)
        self.post_message(Kept("Best not saved", error, True) if error else Kept("Best saved", f"saved the best as {what}"))

    def action_resume_saved(self) -> None:
        """The newest saved sweep, its settings and axes on screen: `g` then continues it."""
        if self.fixed is None:
            self._saved_worker(self.settings)

    @work(thread=True, exclusive=True, exit_on_error=False, group="sweep-saved")
    def _saved_worker(self, current: Settings) -> None:
        self.post_message(SavedSweep(self.lab.newest_saved_sweep(current)))

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
                select = self.query_one("#sweep-suite", Select)
                select.set_options([(Path(x).name if "/" in x else x, x) for x in self.suites])
            self.query_one("#sweep-suite", Select).value = setup.suite
        self._request_preview()
        self.notify("the newest saved sweep, with the settings it ran with: g continues it", title="Saved sweep")

    def action_edit(self, axis: int = 0) -> None:
        """Into the setup, at axis field `axis` (keys 1-8); shown on demand in a narrow terminal."""
        self.add_class("-editing")
        self.set_focus(self.query_one(f"#axis-{axis}", Input))  # at once: keys typed next go there

    def action_back(self) -> None:
        if isinstance(self.focused, (Input, Select, Checkbox)):
            self.remove_class("-editing")
            self.set_focus(self.query_one(SweepTable))
            return
        self.dismiss(None)
