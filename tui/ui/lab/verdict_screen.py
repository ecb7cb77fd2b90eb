"""The A/B verdict (`a`): passes interleaved A B A B, then the answer for the user's workload. MTP on vs
off, or (`v`, asked by the cockpit's lab keys) the settings on screen against a saved profile or another
llama-server build: the same screen, its columns named after the sides.

The input and output lengths are editable; the verdict is recomputed at once from the same passes
(`AbVerdict.for_workload`, nothing is run again). The A/B runs in the main screen's tuning controller,
so `Escape` goes back while it keeps running; `x` cancels, `g` runs it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import DataTable, Footer, Input, Label, ProgressBar, Static

from tui.ui.lab import experiments, verdict_levels
from tui.ui.lab.controller import LabController
from tui.ui.lab.screen_base import TuningScreen, keys, progress_row, text_field
from tui.ui.lab.tables import fill
from tui.ui.lab.views import VerdictView, clock
from tui.ui.theme_colors import rich_style

VERDICT_COLOUR = {"better": "success", "worse": "error", "same": "foreground-muted", "inconclusive": "warning"}
HEADLINE_CLASS = {"b_wins": "-wins", "b_loses": "-loses", "inconclusive": "-inconclusive"}
#: The title's tail, after what is A/B'd.
HOW = ": passes interleaved ({}, {}, {}, {}…) so drift hits both · edit the workload, the verdict follows"


def columns(names: tuple[str, str]) -> list[str]:
    """The table's columns: the metric, each side by name (MTP off and on, or A and B), change, verdict."""
    return ["metric", *names, "change", "verdict"]


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
    VerdictScreen #verdict-workload { height: 1; margin-top: 1; }
    VerdictScreen #verdict-workload > Label { width: auto; margin-right: 1; }
    VerdictScreen #verdict-workload > Input { width: 10; margin-right: 2; }
    VerdictScreen #verdict-headline { height: 1; margin-top: 1; text-style: bold; color: $foreground-muted; }
    VerdictScreen #verdict-headline.-wins { color: $success; }
    VerdictScreen #verdict-headline.-loses { color: $error; }
    VerdictScreen #verdict-headline.-inconclusive { color: $warning; }
    VerdictScreen #verdict-table { height: auto; max-height: 7; margin-top: 1; }
    VerdictScreen #verdict-levels { height: auto; max-height: 4; margin-top: 1; display: none; }
    VerdictScreen #verdict-break-even { height: auto; color: $foreground; }
    VerdictScreen #verdict-answer { height: auto; color: $foreground-muted; margin-top: 1; }
    VerdictScreen #verdict-passes { height: auto; color: $foreground-muted; margin-top: 1; }
    VerdictScreen #verdict-quality { height: auto; color: $foreground-muted; }
    VerdictScreen.-short #verdict-passes { display: none; }
    VerdictScreen.-short #verdict-answer { margin-top: 0; }
    """
    AUTO_FOCUS = "#verdict-table"
    BINDINGS = keys("verdict_screen", "run", "Run again", Binding("i", "edit", "Workload", id="verdict_screen.workload"),
                    Binding("v", "versus", "Versus…", id="verdict_screen.versus"), f5="Run again")
    KIND, WHAT, REFUSED = "ab", "the MTP on/off run", "Cannot run MTP on vs off"
    BORDER_TITLES = {"#verdict-box": "Verdict"}

    def __init__(self, lab: LabController, *, fixed: VerdictView | None = None, workload: tuple[int, int] = (1000, 500),
                 fixed_verdict: Any = None, versus: Callable[[], None] | None = None, quality: str = "") -> None:
        """`quality`: what the main K/V cost in output quality, from the quality index (`index.kv_quality`;
        "" when nothing could be looked up: no line then). An A/B changes speed, never the K/V's cost."""
        super().__init__(lab, fixed)
        self.fixed_verdict = fixed_verdict  # a core AbVerdict for fixed screens (re-judged like a real one)
        self.versus = versus  # asks what to A/B the settings on screen against (the cockpit's lab keys), then runs it
        self.quality = quality
        self.workload = fixed.workload if fixed is not None else workload
        self.view: VerdictView | None = None

    def compose(self) -> ComposeResult:
        yield Static(self._title(VerdictView()), id="verdict-title", classes="title")
        with Vertical(id="verdict-box", classes="body box"):
            yield progress_row("verdict")
            with Horizontal(id="verdict-workload"):
                yield Label("input tokens")
                yield text_field(str(self.workload[0]), "verdict-in")
                yield Label("output tokens")
                yield text_field(str(self.workload[1]), "verdict-out")
            yield Static("", id="verdict-headline")
            quality = Static(Content(f"quality of the main K/V, the same with MTP on and off: {self.quality}"),
                             id="verdict-quality")
            quality.display = bool(self.quality)
            yield quality
            yield DataTable(id="verdict-table", cursor_type="none", zebra_stripes=True)
            yield DataTable(id="verdict-levels", cursor_type="none")  # at 1 and N at once (`verdict_levels`)
            yield Static("", id="verdict-break-even")
            yield Static("", id="verdict-answer")
            yield Static("", id="verdict-passes")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        fill(self.query_one("#verdict-table", DataTable), columns(VerdictView().names), [])
        super().on_mount()

    @staticmethod
    def _title(view: VerdictView) -> Content:
        short = ("off", "on") if view.names == VerdictView().names else view.names
        return Content(view.title + HOW.format(*short, *short))

    def show(self, view: VerdictView) -> None:
        self.view = view
        self.query_one("#verdict-progress", ProgressBar).update(total=max(1, view.total), progress=view.done)
        eta = f" · ETA {clock(view.eta_s)}" if view.running and view.eta_s is not None else ""
        passes = f"{view.done:.0f}/{view.total} passes" if view.total else ""
        self.query_one("#verdict-progress-text", Static).update(Content(f"{passes}{eta} · {view.message}".strip(" ·")))
        head = self.query_one("#verdict-headline", Static)
        self.query_one("#verdict-title", Static).update(self._title(view))
        text = view.headline or ("measuring…" if view.running else f"no verdict yet: g runs {view.title}")
        head.update(Content(text + (" (so far)" if view.headline and view.running else "")))
        for label, cls in HEADLINE_CLASS.items():
            head.set_class(view.label == label, cls)
        variables = self.app.theme_variables
        rows: list[list[object]] = [
            [r.metric, r.a, r.b, r.change, Text(r.verdict, style=rich_style(
                variables, VERDICT_COLOUR.get(r.verdict, "foreground"), bold=r.verdict in ("better", "worse")))]
            for r in view.rows]
        fill(self.query_one("#verdict-table", DataTable), columns(view.names), rows)
        verdict_levels.show(self.query_one("#verdict-levels", DataTable), view.levels, variables)
        self.query_one("#verdict-break-even", Static).update(Content(view.break_even))
        self.query_one("#verdict-answer", Static).update(Content(view.error or view.answer))
        self.query_one("#verdict-passes", Static).update(Content(" · ".join(view.passes)))

    def live(self, lab: LabController) -> VerdictView | None:
        return lab.verdict_view

    @on(Input.Changed)
    def _workload_changed(self) -> None:
        n_in = parse_tokens(self.query_one("#verdict-in", Input).value)
        n_out = parse_tokens(self.query_one("#verdict-out", Input).value)
        if n_in is None or n_out is None:
            self.query_one("#verdict-answer", Static).update(
                Content("input and output tokens: whole numbers of tokens (13k allowed)"))
            return
        self.workload = (n_in, n_out)
        if self.fixed is None:
            view = self.lab.rejudge(n_in, n_out)
        elif self.fixed_verdict is not None:
            self.fixed_verdict, view = experiments.rejudge(self.fixed_verdict, self.view or self.fixed, self.workload)
        else:
            return
        if view is not None:
            self.show(view)

    def ready(self) -> Callable[[], str | None]:
        return self.lab.rerun_ab  # it says why it cannot start (another action runs, nothing to run again)

    def action_versus(self) -> None:
        """Ask what to A/B the settings on screen against (a saved profile, another build), then run it here."""
        if self.fixed is not None or self.versus is None:
            self.notify("a fixed preview runs nothing", severity="warning")
            return
        self.versus()

    def action_edit(self) -> None:
        self.set_focus(self.query_one("#verdict-in", Input))  # at once: keys typed next go there
