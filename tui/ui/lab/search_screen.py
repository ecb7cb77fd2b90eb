"""A search as an action (`c` largest context, `F` smallest fit-target): progress, cancel, accept.

Every launch is a row (value, outcome, why); when it ends, `Enter` puts the answer in the settings
form (the screen is dismissed with the value) and `Escape` closes without changing anything
(cancelling a search still running).
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from tui.ui.lab.controller import LabController
from tui.ui.lab.tables import fill
from tui.ui.lab.views import SearchView, clock
from tui.ui.theme_colors import rich_style

OUTCOME_COLOUR = {"ok": "success", "oom": "error", "overshoot": "warning", "failed": "error", "cancelled": "warning"}


class SearchScreen(ModalScreen[Any]):
    """Shows the tuning controller's search; dismissed with the value found when the answer is accepted."""

    DEFAULT_CSS = """
    SearchScreen { align: center middle; }
    SearchScreen > #search-box { width: 90; max-width: 100%; height: auto; max-height: 90%; border: round $primary;
                                 background: $surface; padding: 0 1; }
    SearchScreen #search-message { height: auto; color: $foreground-muted; }
    SearchScreen #search-trials { height: auto; max-height: 12; margin-top: 1; }
    SearchScreen #search-answer { height: auto; margin-top: 1; text-style: bold; color: $foreground; }
    SearchScreen #search-answer.-found { color: $success; }
    SearchScreen #search-answer.-none { color: $warning; }
    """
    BINDINGS = [
        Binding("enter", "accept", "Accept", id="search_screen.accept"),
        Binding("x", "cancel", "Cancel search", id="search_screen.cancel"),
        Binding("escape", "close", "Close", id="search_screen.close"),
    ]

    def __init__(self, lab: LabController, knob: str, *, fixed: SearchView | None = None) -> None:
        super().__init__()
        self.lab, self.knob, self.fixed = lab, knob, fixed
        self.view: SearchView | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="search-box"):
            yield Static("", id="search-message")
            yield DataTable(id="search-trials", cursor_type="none", zebra_stripes=True)
            yield Static("", id="search-answer")
            yield Footer(compact=True)

    def on_mount(self) -> None:
        view = self.fixed if self.fixed is not None else self.lab.search_view
        if view is not None:
            self.show(view)

    def show(self, view: SearchView) -> None:
        self.view = view
        self.query_one("#search-box").border_title = view.title
        state = "running" if view.running else ("cancelled" if view.cancelled else "done")
        elapsed = f" · {clock(view.elapsed_s)}" if view.elapsed_s else ""
        where = f"\n{view.measured_on}" if view.measured_on else ""
        self.query_one("#search-message", Static).update(Content(f"{state}{elapsed} · {view.message}{where}"))
        variables = self.app.theme_variables
        rows: list[list[object]] = [
            [str(t.value), Text(t.outcome, style=rich_style(variables, OUTCOME_COLOUR.get(t.outcome, "foreground"))),
             f"{t.seconds:.1f}", t.detail[:60]] for t in view.trials]
        fill(self.query_one("#search-trials", DataTable), [view.flag, "outcome", "seconds", "why"], rows)
        answer = self.query_one("#search-answer", Static)
        if view.found and view.value is not None:
            answer.update(Content(f"{view.flag} {view.value} {view.unit} · Enter puts it in the form, "
                                  "Escape keeps the settings as they are"))
        else:
            answer.update(Content("no value to offer · Escape closes" if view.done else "x cancels the search"))
        answer.set_class(view.found, "-found")
        answer.set_class(view.done and not view.found, "-none")

    def tuning_changed(self, lab: LabController) -> None:
        if self.is_mounted and self.fixed is None and lab.search_view is not None and lab.search_view.knob == self.knob:
            self.show(lab.search_view)

    def action_accept(self) -> None:
        view = self.view
        if view is None or not view.found or view.value is None:
            self.notify("nothing to accept yet" if view is None or view.running else "the search found no value",
                        severity="warning")
            return
        self.dismiss(view.value)

    def action_cancel(self) -> None:
        if self.lab.running == "search":
            self.lab.cancel()

    def action_close(self) -> None:
        self.action_cancel()
        self.dismiss(None)
