"""The MTP on/off verdict (`a`): passes interleaved A B A B, then the answer for the user's workload.

The input and output lengths are editable; the verdict is recomputed at once from the same passes
(`MtpVerdict.for_workload`, nothing is run again). The A/B runs in the main screen's tuning controller,
so `Escape` goes back while it keeps running; `x` cancels, `g` runs it again.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import DataTable, Footer, Input, Label, ProgressBar, Static

from tui.ui.lab.confirm import confirm_then
from tui.ui.lab.controller import LabController
from tui.ui.lab.screen_base import TuningScreen
from tui.ui.theme_colors import rich_style
from tui.ui.lab.views import VerdictView, clock
from tui.ui.widgets.inputs import TextInput
from tui.ui.lab.sweep_table import fill


VERDICT_COLOUR = {"better": "success", "worse": "error", "same": "foreground-muted", "inconclusive": "warning"}
COLUMNS = ("metric", "MTP off", "MTP on", "change", "verdict")
HEADLINE_CLASS = {"mtp_wins": "-wins", "mtp_loses": "-loses", "inconclusive": "-inconclusive"}


def parse_tokens(text: str) -> int | None:
    """`1000`, `13k`, `1.5k` -> tokens; None when it is not a count >= 0."""
    t = text.strip().lower().replace("_", "")
    mult = 1000 if t.endswith("k") else 1
    t = t[:-1] if t.endswith("k") else t
    try:
        v = float(t)
    except ValueError:
        return None
    if v < 0 or (mult == 1 and not v.is_integer()):
        return None
    return int(round(v * mult))


class VerdictScreen(TuningScreen):
    """Progress while the passes run; the verdict table, break-even and answer when they are done."""

    DEFAULT_CSS = """
    VerdictScreen { layout: vertical; }
    VerdictScreen > #verdict-title { height: 1; background: $panel; color: $foreground; padding: 0 1; text-style: bold; }
    VerdictScreen > #verdict-box { height: 1fr; border: round $foreground 25%; padding: 0 1; }
    VerdictScreen #verdict-progress-row { height: 1; }
    VerdictScreen #verdict-progress { width: 24; }
    VerdictScreen #verdict-progress-text { width: 1fr; margin-left: 1; color: $foreground-muted; }
    VerdictScreen #verdict-workload { height: 1; margin-top: 1; }
    VerdictScreen #verdict-workload > Label { width: auto; margin-right: 1; }
    VerdictScreen #verdict-workload > Input { width: 10; margin-right: 2; }
    VerdictScreen #verdict-headline { height: 1; margin-top: 1; text-style: bold; color: $foreground-muted; }
    VerdictScreen #verdict-headline.-wins { color: $success; }
    VerdictScreen #verdict-headline.-loses { color: $error; }
    VerdictScreen #verdict-headline.-inconclusive { color: $warning; }
    VerdictScreen #verdict-table { height: auto; max-height: 7; margin-top: 1; }
    VerdictScreen #verdict-break-even { height: auto; color: $foreground; }
    VerdictScreen #verdict-answer { height: auto; color: $foreground-muted; margin-top: 1; }
    VerdictScreen #verdict-passes { height: auto; color: $foreground-muted; margin-top: 1; }
    VerdictScreen.-short #verdict-passes { display: none; }
    VerdictScreen.-short #verdict-answer { margin-top: 0; }
    """
    AUTO_FOCUS = "#verdict-table"
    BINDINGS = [
        Binding("escape", "back", "Back", id="verdict_screen.back"),
        Binding("g", "rerun", "Run again", id="verdict_screen.run"),
        Binding("x", "cancel", "Cancel", id="verdict_screen.cancel"),
        Binding("i", "edit", "Workload", id="verdict_screen.workload"),
        Binding("f5", "rerun", "Run again", show=False, priority=True, id="verdict_screen.typing.run"),
        Binding("f9", "cancel", "Cancel", show=False, priority=True, id="verdict_screen.typing.cancel"),
    ]

    def __init__(self, lab: LabController, *, fixed: VerdictView | None = None, workload: tuple[int, int] = (1000, 500),
                 fixed_verdict: Any = None) -> None:
        super().__init__(lab)
        self.fixed = fixed
        self.fixed_verdict = fixed_verdict  # a core MtpVerdict for fixed screens (re-judged like a real one)
        self.workload = fixed.workload if fixed is not None else workload
        self.view: VerdictView | None = None

    def compose(self) -> ComposeResult:
        yield Static("MTP on vs off: passes interleaved (off, on, off, on…) so drift hits both · "
                     "edit the workload, the verdict follows", id="verdict-title")
        with Vertical(id="verdict-box"):
            with Horizontal(id="verdict-progress-row"):
                yield ProgressBar(total=1, show_eta=False, id="verdict-progress")
                yield Static("", id="verdict-progress-text")
            with Horizontal(id="verdict-workload"):
                yield Label("input tokens")
                yield TextInput(str(self.workload[0]), id="verdict-in", compact=True, select_on_focus=False)
                yield Label("output tokens")
                yield TextInput(str(self.workload[1]), id="verdict-out", compact=True, select_on_focus=False)
            yield Static("", id="verdict-headline")
            yield DataTable(id="verdict-table", cursor_type="none", zebra_stripes=True)
            yield Static("", id="verdict-break-even")
            yield Static("", id="verdict-answer")
            yield Static("", id="verdict-passes")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#verdict-box").border_title = "Verdict"
        fill(self.query_one("#verdict-table", DataTable), list(COLUMNS), [])
        self.set_class(self.app.size.height < 34, "-short")
        if self.fixed is not None:
            self.show(self.fixed)
            return
        panel = self.lab
        if panel.verdict_view is not None:
            self.show(panel.verdict_view)

    def on_resize(self) -> None:
        self.set_class(self.app.size.height < 34, "-short")

    def show(self, view: VerdictView) -> None:
        self.view = view
        bar = self.query_one("#verdict-progress", ProgressBar)
        bar.update(total=max(1, view.total), progress=view.done)
        eta = f" · ETA {clock(view.eta_s)}" if view.running and view.eta_s is not None else ""
        passes = f"{view.done:.0f}/{view.total} passes" if view.total else ""
        self.query_one("#verdict-progress-text", Static).update(Content(f"{passes}{eta} · {view.message}".strip(" ·")))
        head = self.query_one("#verdict-headline", Static)
        text = view.headline or ("measuring…" if view.running else "no verdict yet: g runs MTP on vs off")
        if view.headline and view.running:
            text += " (so far)"
        head.update(Content(text))
        for cls in HEADLINE_CLASS.values():
            head.remove_class(cls)
        if view.label in HEADLINE_CLASS:
            head.add_class(HEADLINE_CLASS[view.label])
        variables = self.app.theme_variables
        rows: list[list[object]] = []
        for r in view.rows:
            style = rich_style(variables, VERDICT_COLOUR.get(r.verdict, "foreground"), bold=r.verdict in ("better", "worse"))
            rows.append([r.metric, r.off, r.on, r.change, Text(r.verdict, style=style)])
        fill(self.query_one("#verdict-table", DataTable), list(COLUMNS), rows)
        self.query_one("#verdict-break-even", Static).update(Content(view.break_even))
        self.query_one("#verdict-answer", Static).update(Content(view.error or view.answer))
        self.query_one("#verdict-passes", Static).update(Content(" · ".join(view.passes)))

    def tuning_changed(self, panel: LabController) -> None:
        if self.is_mounted and self.fixed is None and panel.verdict_view is not None:
            self.show(panel.verdict_view)

    @on(Input.Changed)
    def _workload_changed(self) -> None:
        n_in = parse_tokens(self.query_one("#verdict-in", Input).value)
        n_out = parse_tokens(self.query_one("#verdict-out", Input).value)
        if n_in is None or n_out is None:
            self.query_one("#verdict-answer", Static).update(
                Content("input and output tokens: whole numbers of tokens (13k allowed)"))
            return
        self.workload = (n_in, n_out)
        if self.fixed is not None:
            if self.fixed_verdict is not None:
                self.fixed_verdict = self.fixed_verdict.for_workload(n_in, n_out)
                old = self.view or self.fixed
                self.show(self.lab.verdict_view_of(self.fixed_verdict, done=old.done, total=old.total, message=old.message))
            return
        view = self.lab.rejudge(n_in, n_out)
        if view is not None:
            self.show(view)

    def action_rerun(self) -> None:
        if self.fixed is not None:
            self.notify("this is a fixed preview; nothing runs", severity="warning")
            return
        def go() -> None:
            reason = self.lab.rerun_ab()
            if reason:
                self.notify(reason, title="Cannot run MTP on vs off", severity="warning")

        confirm_then(self.app, self.lab.stops_server(), "the MTP on/off run", self.lab.server.running_settings(), go)

    def action_cancel(self) -> None:
        panel = self.lab
        if panel.running == "ab":
            panel.cancel()

    def action_edit(self) -> None:
        self.set_focus(self.query_one("#verdict-in", Input))  # at once: keys typed next go there

    def action_back(self) -> None:
        if isinstance(self.focused, Input):
            self.set_focus(self.query_one("#verdict-table", DataTable))
            return
        self.dismiss(None)
