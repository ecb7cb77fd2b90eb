"""The tune screen (`T`): "tune for me", the MTP-aware search of `mtp-tune tune` over the settings on
screen, with live progress.

The setup on the left says what is searched (an axis with values is searched over them; an empty
one keeps the form's value, fixed), for which workload, within which budget and KV floors; every
other setting of the form is fixed. It starts from what the form sets (fixed) and leaves unset
(searched), with MTP on and off searched; it steps aside once there are trials (`e` brings it back). `g` starts the tune (or continues the saved one with the same
setup), `x` cancels it (its server is stopped; finished trials are kept), `b` saves the best as a
TOML profile and an INI section, `r` writes the Markdown report. The tune runs in the main
screen's tuning controller, so `Escape` goes back while it keeps running.

On the right: the counts and the best so far with its spread, every trial (what differs from the
fixed flags, the plan, the status, PP, TG, acceptance, seconds per request, why it was pruned),
the PP-vs-TG plot with the Pareto front, and at the end the A/B verdict and the break-even.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Checkbox, DataTable, Footer, Input, Label, Static

from tui.core.options.settings import Settings
from tui.ui.lab.confirm import confirm_then
from tui.ui.lab.controller import LabController
from tui.ui.lab.screen_base import TuningScreen
from tui.ui.lab.messages import Kept, TunePrepared
from tui.ui.lab.tune_views import TUNE_AXES, TuneSetup, TuneView
from tui.ui.widgets.inputs import TextInput
from tui.ui.lab.tune_chart import TuneChart
from tui.ui.lab.tune_table import TuneTable, note


#: (field id, label, TuneSetup attribute, placeholder) of the setup's text fields besides the axes.
FIELDS = (
    ("tune-workload", "workload", "workload", "tasks, long-prompt or IN:OUT"),
    ("tune-budget", "budget", "budget", "none: until it converges"),
    ("tune-min-ctx", "min ctx", "min_ctx", "what the workload needs"),
    ("tune-kv-floor", "main KV floor", "kv_floor", "none"),
    ("tune-draft-kv-floor", "draft KV floor", "draft_kv_floor", "none"),
)


def form_value(settings: Settings, axis: str, fields: tuple[str, ...]) -> str:
    """What the form says for an axis (shown as the empty field's hint: it is what stays fixed)."""
    if axis == "mtp":
        return "on" if settings.mtp_enabled else "off"
    v = getattr(settings, fields[0])
    return "server default" if v is None else str(v)


class TuneScreen(TuningScreen):
    """Set up, run, watch and keep a tune of the settings on screen."""

    DEFAULT_CSS = """
    TuneScreen { layout: vertical; }
    TuneScreen > #tune-title { height: 1; background: $panel; color: $foreground; padding: 0 1; text-style: bold; }
    TuneScreen > #tune-body { height: 1fr; }
    TuneScreen #tune-setup { width: 38; border: round $foreground 25%; padding: 0 1; scrollbar-size-vertical: 1; }
    TuneScreen #tune-setup:focus-within { border: round $primary; }
    TuneScreen #tune-setup .row { height: 1; }
    TuneScreen #tune-setup .row > Label { width: 15; color: $foreground; }
    TuneScreen #tune-setup .row > Input { width: 1fr; }
    TuneScreen #tune-setup .section { color: $primary; text-style: bold; }
    TuneScreen #tune-setup Checkbox { border: none; height: 1; padding: 0; background: transparent; }
    TuneScreen #tune-right { width: 1fr; border: round $foreground 25%; padding: 0 1; }
    TuneScreen #tune-status { height: auto; color: $foreground; text-style: bold; }
    TuneScreen #tune-message { height: auto; max-height: 3; color: $foreground-muted; }
    TuneScreen #tune-message.-error { color: $error; }
    TuneScreen #tune-table { height: 1fr; min-height: 4; scrollbar-size-horizontal: 1; }
    TuneScreen #tune-note { height: auto; max-height: 2; color: $foreground-muted; }
    TuneScreen #tune-chart { height: 1fr; min-height: 8; }
    TuneScreen #tune-answer { height: auto; max-height: 8; color: $foreground; }
    TuneScreen.-narrow #tune-setup, TuneScreen.-trials #tune-setup { display: none; }
    TuneScreen.-editing #tune-setup { display: block; }
    TuneScreen.-short #tune-chart { display: none; }
    TuneScreen.-short #tune-answer { max-height: 3; }
    """
    AUTO_FOCUS = "#tune-table"
    BINDINGS = [
        Binding("escape", "back", "Back", id="tune_screen.back"),
        Binding("g", "run", "Run/continue", id="tune_screen.run"),
        Binding("x", "cancel", "Cancel", id="tune_screen.cancel"),
        Binding("b", "save_best", "Save best", id="tune_screen.save_best"),
        Binding("r", "report", "Report", id="tune_screen.report"),
        Binding("e", "edit", "Edit setup", id="tune_screen.edit"),
        Binding("f5", "run", "Run", show=False, priority=True, id="tune_screen.typing.run"),
        Binding("f9", "cancel", "Cancel", show=False, priority=True, id="tune_screen.typing.cancel"),
    ]

    def __init__(self, lab: LabController, settings: Settings, setup: TuneSetup, *,
                 fixed: TuneView | None = None) -> None:
        super().__init__(lab)
        self.settings, self.setup, self.fixed = settings, setup, fixed
        self.prepared: Any = None  # the newest checked setup (tune_ops.Prepared), or None
        self.problem: str | None = None
        self.checks = 0  # answered setup checks (tests wait on it)
        self._seq = 0
        self._answered = -1  # the seq of the check on screen
        self._shown: TuneView | None = None

    # --- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static("Tune for me: g runs/continues · x cancels · b saves the best · r report · e setup · "
                     "Escape back (it keeps running)", id="tune-title")
        with Horizontal(id="tune-body"):
            with VerticalScroll(id="tune-setup"):
                yield Static("Workload and limits", classes="section")
                for fid, label, attr, hint in FIELDS:
                    with Horizontal(classes="row"):
                        yield Label(label)
                        yield TextInput(getattr(self.setup, attr), placeholder=hint, id=fid, compact=True,
                                        select_on_focus=False)
                yield Static("Search (empty: the form's, fixed)", classes="section")
                for i, (axis, label, fields, _default) in enumerate(TUNE_AXES):
                    with Horizontal(classes="row"):
                        yield Label(f"{i + 1} {label}")
                        yield TextInput(self.setup.axis(axis), id=f"tune-axis-{i}", compact=True, select_on_focus=False,
                                        placeholder=f"fixed: {form_value(self.settings, axis, fields)}")
                yield Checkbox("smallest fit-target (GPU/RPC)", self.setup.fit, id="tune-fit", compact=True)
                yield Checkbox("simulated GPUs: launch on capped stand-ins", self.setup.stand_ins, id="tune-stand-ins",
                               compact=True)
                yield Static("Answer", classes="section")
                with Horizontal(classes="row"):
                    yield Label("A/B passes")
                    yield TextInput(str(self.setup.ab_passes), id="tune-ab", compact=True, select_on_focus=False)
                with Horizontal(classes="row"):
                    yield Label("save best as")
                    yield TextInput(self.setup.save_as, id="tune-save-as", compact=True, select_on_focus=False)
            with Vertical(id="tune-right"):
                yield Static("", id="tune-status")
                yield Static("", id="tune-message")
                yield TuneTable(id="tune-table")
                yield Static("", id="tune-note")
                yield TuneChart(id="tune-chart")
                yield Static("", id="tune-answer")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#tune-right").border_title = "Trials"
        self.query_one("#tune-setup").border_title = "Setup"
        self._apply_size_classes()
        if self.fixed is not None:
            self.show(self.fixed)
            return
        panel = self.lab
        if panel.tune_view is not None:
            self.show(panel.tune_view)
        else:
            self.show(TuneView(message="checking the setup…"))
        self._request_check()

    # --- setup -> check ------------------------------------------------------------------------

    def read_setup(self) -> TuneSetup:
        """The fields as a TuneSetup (bad values are left for the check to name)."""
        def text(fid: str) -> str:
            return self.query_one(f"#{fid}", Input).value.strip()

        try:
            ab = int(text("tune-ab") or 0)
        except ValueError:
            ab = -1
        axes = tuple((axis, text(f"tune-axis-{i}")) for i, (axis, _l, _f, _d) in enumerate(TUNE_AXES))
        return replace(self.setup, **{attr: text(fid) for fid, _l, attr, _h in FIELDS}, axes=axes, ab_passes=ab,
                       fit=self.query_one("#tune-fit", Checkbox).value,
                       stand_ins=self.query_one("#tune-stand-ins", Checkbox).value,
                       save_as=text("tune-save-as") or "tune-best")

    @on(Input.Changed)
    @on(Checkbox.Changed)
    def _setup_changed(self) -> None:
        if self.fixed is None and self.is_mounted:
            self._request_check()

    def _request_check(self) -> None:
        self.setup = self.read_setup()
        self._seq += 1
        self._check_worker(self._seq, self.settings, self.setup)

    @work(thread=True, exclusive=True, exit_on_error=False, group="tune-check")
    def _check_worker(self, seq: int, settings: Settings, setup: TuneSetup) -> None:
        self.post_message(TunePrepared(seq, self.lab.check_tune(settings, setup)))

    @on(TunePrepared)
    def _checked(self, message: TunePrepared) -> None:
        if message.seq < self._seq:
            return
        self._answered = message.seq
        self.checks += 1
        ok = not isinstance(message.prepared, str)
        self.prepared, self.problem = (message.prepared, None) if ok else (None, message.prepared)
        panel = self.lab
        if panel.running == "tune":
            return  # the running tune stays on screen
        if panel.tune_view is not None and panel.tunes_finished:  # the last tune stays; a problem is said over it
            self.show(replace(panel.tune_view, error=None if ok else message.prepared))
            return
        text = f"{message.prepared.summary} · g starts" if ok else message.prepared
        notes = message.prepared.notes if ok else ()
        self.show(TuneView(message=text, error=None if ok else text, notes=notes))

    # --- showing -------------------------------------------------------------------------------

    def show(self, view: TuneView) -> None:
        self._shown = view
        self.set_class(bool(view.rows), "-trials")  # the setup steps aside for the trials; e brings it back
        self.query_one("#tune-status", Static).update(Content(view.status_text()))
        msg = self.query_one("#tune-message", Static)
        msg.update(Content(view.error or view.message))
        msg.set_class(bool(view.error), "-error")
        self.query_one(TuneTable).show(view)
        self._show_note()
        self.query_one(TuneChart).show(view.points)
        lines = [x for x in (view.ab, view.break_even) if x]
        if not view.running and view.answer:
            lines.append(view.answer)
        if view.workload:
            lines.append(f"Workload {view.workload}.")
        lines += list(view.notes)
        self.query_one("#tune-answer", Static).update(Content("\n".join(lines)))

    @on(DataTable.RowHighlighted, "#tune-table")
    def _show_note(self) -> None:
        view, table = self._shown, self.query_one(TuneTable)
        row = view.rows[table.cursor_row] if view is not None and 0 <= table.cursor_row < len(view.rows) else None
        self.query_one("#tune-note", Static).update(Content(note(row)))

    def tuning_changed(self, panel: LabController) -> None:
        """The controller's state changed: the tune while it runs, and its last view after."""
        if self.fixed is None and self.is_mounted and panel.tune_view is not None and (
                panel.running == "tune" or panel.tunes_finished):
            self.show(panel.tune_view)

    # --- actions -------------------------------------------------------------------------------

    def action_run(self) -> None:
        if self.fixed is not None:
            self.notify("this is a fixed preview; nothing runs", severity="warning")
            return
        reason = self.lab.blocked()
        if reason:
            self.notify(reason, title="Cannot tune", severity="warning")
            return
        if self.read_setup() != self.setup:
            self._request_check()
        prepared = self.prepared
        if self._answered != self._seq:  # what runs is what was checked: the header is read once (`check_tune`)
            self.notify("the setup is still being checked; press g again in a moment")
            return
        if prepared is None:
            self.notify(self.problem or "the setup cannot run", title="Cannot tune", severity="warning")
            return
        confirm_then(self.app, self.lab.stops_server(), "the tune", self.lab.server.running_settings(),
                     lambda: self._started(self.lab.start_tune(prepared)))

    def _started(self, reason: str | None) -> None:
        if reason:
            self.notify(reason, title="Cannot tune", severity="warning")

    def action_cancel(self) -> None:
        panel = self.lab
        if panel.running == "tune":
            panel.cancel()

    def action_save_best(self) -> None:
        if self.fixed is None:
            self._keep_worker("best", self.read_setup().save_as)

    def action_report(self) -> None:
        if self.fixed is None:
            self._keep_worker("report", "")

    @work(thread=True, exclusive=True, exit_on_error=False, group="tune-keep")
    def _keep_worker(self, what: str, name: str) -> None:
        """The best saved as profile `name`, or the report written; the screen says how it went."""
        done, error = self.lab.keep_tune(what, name, self.settings)
        if what == "best":
            titles, said = ("Best saved", "Best not saved"), f"saved the best as {done}"
        else:
            titles, said = ("Report written", "Report not written"), f"the Markdown report is in {done}"
        self.post_message(Kept(titles[1], error, True) if error else Kept(titles[0], said))

    def action_edit(self) -> None:
        """Into the setup (shown on demand in a narrow terminal)."""
        self.add_class("-editing")
        self.set_focus(self.query_one("#tune-workload", Input))

    def action_back(self) -> None:
        if isinstance(self.focused, (Input, Checkbox)):
            self.remove_class("-editing")
            self.set_focus(self.query_one(TuneTable))
            return
        self.dismiss(None)
