"""The tune screen (`T`): "tune for me", the MTP-aware search of `mtp-tune tune` over the settings on
screen, with live progress.

The setup on the left says what is searched (an axis with values is searched over them; an empty
one keeps the form's value, fixed), for which workload, within which budget and KV floors (or a
max KLD: the main KV types measured by llama-perplexity first, as `mtp-tune tune --max-kld`); every
other setting of the form is fixed. It starts from what the form sets (fixed) and leaves unset
(searched), with MTP on and off searched; it steps aside once there are trials (`e` brings it back).
`g` starts the tune (or continues the saved one with the same setup), `x` cancels it (its server is
stopped; finished trials are kept), `b` saves the best as a TOML profile and an INI section, `r`
writes the Markdown report. The tune runs in the main
screen's tuning controller, so `Escape` goes back while it keeps running.

On the right: the counts and the best so far with its spread, every trial (what differs from the
fixed flags, the plan, the status, PP, TG, acceptance, seconds per request, why it was pruned),
the PP-vs-TG plot with the Pareto front, and at the end the A/B verdict and the break-even.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Checkbox, Footer, Input, Static

from tui.core.options.settings import Settings
from tui.core.tune import DEFAULT_DRAFT_KV_FLOOR, DEFAULT_KV_FLOOR
from tui.ui.lab import tune_ops
from tui.ui.lab.charts import TuneChart
from tui.ui.lab.controller import LabController
from tui.ui.lab.screen_base import SetupScreen, keys, row, text_field
from tui.ui.lab.tables import TuneTable
from tui.ui.lab.tune_views import TUNE_AXES, TuneRowView, TuneSetup, TuneView

#: (field id, label, TuneSetup attribute, placeholder) of the setup's text fields besides the axes.
FIELDS = (
    ("tune-workload", "workload", "workload", "tasks, long-prompt or IN:OUT"),
    ("tune-concurrency", "at once", "concurrency", "1 request (N: -np N, A/B at 1 and N)"),
    ("tune-budget", "budget", "budget", "none: until it converges"),
    ("tune-min-ctx", "min ctx", "min_ctx", "what the workload needs"),
    ("tune-kv-floor", "main KV floor", "kv_floor", f"default: {DEFAULT_KV_FLOOR}"),  # the CLI's defaults too
    ("tune-max-kld", "max KLD", "max_kld", "none: the floor above"),  # measured instead of the main floor
    ("tune-draft-kv-floor", "draft KV floor", "draft_kv_floor", f"default: {DEFAULT_DRAFT_KV_FLOOR}"),
)


def form_value(settings: Settings, axis: str, fields: tuple[str, ...]) -> str:
    """What the form says for an axis (shown as the empty field's hint: it is what stays fixed)."""
    if axis == "mtp":
        return "on" if settings.mtp_enabled else "off"
    v = getattr(settings, fields[0])
    return "server default" if v is None else str(v)


class TuneScreen(SetupScreen):
    """Set up, run, watch and keep a tune of the settings on screen."""

    DEFAULT_CSS = """
    TuneScreen #tune-setup { width: 38; }
    TuneScreen #tune-setup .row > Label { width: 15; }
    TuneScreen #tune-status { height: auto; color: $foreground; text-style: bold; }
    TuneScreen #tune-message { height: auto; max-height: 3; }
    TuneScreen #tune-table { height: 1fr; min-height: 4; scrollbar-size-horizontal: 1; }
    TuneScreen #tune-note { height: auto; max-height: 2; color: $foreground-muted; }
    TuneScreen #tune-chart { height: 1fr; min-height: 8; }
    TuneScreen #tune-answer { height: auto; max-height: 8; color: $foreground; }
    TuneScreen.-trials #tune-setup { display: none; }
    TuneScreen.-editing #tune-setup { display: block; }
    TuneScreen.-short #tune-chart { display: none; }
    TuneScreen.-short #tune-answer { max-height: 3; }
    """
    AUTO_FOCUS = "#tune-table"
    BINDINGS = keys("tune_screen", "run", "Run/continue",
                    Binding("b", "save_best", "Save best", id="tune_screen.save_best"),
                    Binding("r", "report", "Report", id="tune_screen.report"),
                    Binding("e", "edit", "Edit setup", id="tune_screen.edit"))
    KIND, WHAT, REFUSED = "tune", "the tune", "Cannot tune"
    BORDER_TITLES = {"#tune-right": "Trials", "#tune-setup": "Setup"}

    def __init__(self, lab: LabController, settings: Settings, setup: TuneSetup, *,
                 fixed: TuneView | None = None) -> None:
        super().__init__(lab, settings, setup, fixed)
        self.prepared: tune_ops.Prepared | None = None  # the newest checked setup

    def compose(self) -> ComposeResult:
        yield Static("Tune for me: g runs/continues · x cancels · b saves the best · r report · e setup · "
                     "Escape back (it keeps running)", classes="title")
        with Horizontal(classes="body"):
            with VerticalScroll(id="tune-setup", classes="box setup"):
                yield Static("Workload and limits", classes="section")
                for fid, label, attr, hint in FIELDS:
                    yield row(label, text_field(getattr(self.setup, attr), fid, hint))
                yield Static("Search (empty: the form's, fixed)", classes="section")
                for i, (axis, label, fields, _default) in enumerate(TUNE_AXES):
                    hint = f"fixed: {form_value(self.settings, axis, fields)}"
                    yield row(f"{i + 1} {label}", text_field(self.setup.axis(axis), f"tune-axis-{i}", hint))
                yield Checkbox("smallest fit-target (GPU/RPC)", self.setup.fit, id="tune-fit", compact=True)
                yield Checkbox("simulated GPUs: launch on capped stand-ins", self.setup.stand_ins, id="tune-stand-ins",
                               compact=True)
                yield Static("Answer", classes="section")
                yield row("A/B passes", text_field(str(self.setup.ab_passes), "tune-ab"))
                yield row("save best as", text_field(self.setup.save_as, "tune-save-as"))
            with Vertical(id="tune-right", classes="box"):
                yield Static("", id="tune-status")
                yield Static("", id="tune-message", classes="message")
                yield TuneTable(id="tune-table")
                yield Static("", id="tune-note", classes="note")
                yield TuneChart(id="tune-chart")
                yield Static("", id="tune-answer")
        yield Footer(compact=True)

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

    def check(self, settings: Settings, setup: TuneSetup) -> tune_ops.Prepared | str:
        """The setup checked as `mtp-tune tune` checks its flags (it reads the header: once, here)."""
        return tune_ops.prepare(settings, setup, self.lab.options)

    def checked(self, answer: tune_ops.Prepared | str) -> None:
        self.prepared = None if isinstance(answer, str) else answer
        if self.lab.running == "tune":
            return  # the running tune stays on screen
        if self.lab.tune_view is not None and self.lab.finished["tune"]:
            self.show(replace(self.lab.tune_view, error=self.problem))  # the last tune stays; a problem is said over it
        elif isinstance(answer, str):
            self.show(TuneView(message=answer, error=answer))
        else:
            self.show(TuneView(message=f"{answer.summary} · g starts", notes=answer.notes))

    # --- showing -------------------------------------------------------------------------------

    def show(self, view: TuneView) -> None:
        self._shown, self._shown_at = view, time.monotonic()
        self.set_class(bool(view.rows), "-trials")  # the setup steps aside for the trials; e brings it back
        self.query_one("#tune-status", Static).update(Content(view.status_text()))
        self.say("#tune-message", view.error or view.message, error=bool(view.error))
        self.query_one(TuneTable).show(view)
        self.show_note()
        self.query_one(TuneChart).show(view.points)
        lines = [x for x in (view.ab, view.break_even) if x]
        if not view.running and view.answer:
            lines.append(view.answer)
        if view.workload:
            lines.append(f"Workload {view.workload}.")
        self.query_one("#tune-answer", Static).update(Content("\n".join(lines + list(view.notes))))

    def on_mount(self) -> None:
        super().on_mount()
        self._shown_at = time.monotonic()
        if self.fixed is None:
            self.set_interval(1.0, self._tick)

    def _tick(self) -> None:
        """The clock moves while a trial measures (its events can be minutes apart)."""
        view = self._shown
        if isinstance(view, TuneView) and view.running:
            since = time.monotonic() - self._shown_at
            self.query_one("#tune-status", Static).update(Content(view.status_text(since)))

    def note(self, row: TuneRowView | None) -> str:
        """The highlighted trial in full: its stage, plan source, passes, launches and the whole reason."""
        if row is None:
            return ""
        parts = [f"#{row.number} ({row.stage})" if row.stage else f"#{row.number}"]
        if row.plan:
            mib = f", {row.planned_mib:.0f} MiB" if row.planned_mib is not None else ""
            parts.append(f"plan {row.plan}{mib} ({row.plan_source})")
        parts.append(f"{row.passes} passes, {row.launches} launch{'es' if row.launches != 1 else ''}"
                     + (", from the saved tune" if row.resumed else ""))
        if row.quality:
            parts.append(f"quality {row.quality}")
        text = " · ".join(parts)
        return f"{text}: {row.reason}" if row.reason else text

    def live(self, lab: LabController) -> TuneView | None:
        """The tune while it runs, and its last view after."""
        return lab.tune_view if lab.running == "tune" or lab.finished["tune"] else None

    def first_view(self) -> TuneView:
        return self.live(self.lab) or TuneView(message="checking the setup…")

    # --- actions -------------------------------------------------------------------------------

    def ready(self) -> Callable[[], str | None] | None:
        if self.refuse(self.lab.blocked()):
            return None
        if self.read_setup() != self.setup:
            self.recheck()
        prepared = self.prepared
        if self._answered != self._seq:  # what runs is what was checked: the header is read once (`check`)
            self.notify("the setup is still being checked; press g again in a moment")
            return None
        if prepared is None:
            self.refuse(self.problem or "the setup cannot run")
            return None
        return lambda: self.lab.start_tune(prepared)

    def action_save_best(self) -> None:
        if self.fixed is None:
            name = self.read_setup().save_as
            self.keep(lambda: tune_ops.save_best(self.lab.tune_outcome, name), ("Best saved", "Best not saved"),
                      "saved the best as {}")

    def action_report(self) -> None:
        if self.fixed is None:
            self.keep(lambda: tune_ops.write_report(self.lab.tune_outcome, self.lab.tune_base or self.settings),
                      ("Report written", "Report not written"), "the Markdown report is in {}")
