"""One stored run opened from the runs table (Enter): what ran, what it measured (acceptance by draft
position and the n-max advice included), every note in full.

Why a screen of its own: the runs table has one line per run, so a warning or a failure's reason is
cut to a count ("⚠ 1"); here nothing is cut and the settings read as the llama-server command line
they launch, ready to copy.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from tui.ui.format import plain
from tui.ui.runs.views import RunDetail
from tui.ui.widgets.position_bars import PositionBars


class RunDetailScreen(ModalScreen[None]):
    """A run's facts, its command line, its measurements and its notes; Esc or q goes back to the runs."""

    DEFAULT_CSS = """
    RunDetailScreen { align: center middle; background: $background 60%; }
    RunDetailScreen > VerticalScroll { width: 110; max-width: 100%; height: 90%; border: round $primary;
                                       background: $surface; padding: 0 1; }
    RunDetailScreen .run-heading { text-style: bold; margin-top: 1; }
    RunDetailScreen #run-title { text-style: bold; }
    RunDetailScreen #run-facts { color: $foreground-muted; }
    RunDetailScreen #run-measurements { height: auto; }
    RunDetailScreen #run-positions { padding: 0; }
    RunDetailScreen #run-advice { color: $foreground-muted; }
    """
    BINDINGS = [Binding("escape,q", "dismiss", "Back", id="run_screen.close")]

    def __init__(self, detail: RunDetail) -> None:
        super().__init__()
        self.detail = detail

    def compose(self) -> ComposeResult:
        d = self.detail
        with VerticalScroll(id="run-detail"):
            yield Static(plain(f"Run {d.title}"), id="run-title")
            yield Static(plain("\n".join(d.facts), keep_lines=True), id="run-facts")
            yield Static(plain("llama-server command line"), classes="run-heading")
            yield Static(plain(d.command), id="run-command")
            yield Static(plain("Measurements (median [min-max] over passes)"), classes="run-heading")
            yield DataTable(id="run-measurements", cursor_type="none", show_cursor=False, show_header=False)
            if d.positions:
                yield Static(plain("Acceptance by draft position (share of drafts whose first i tokens were "
                                   "accepted)"), classes="run-heading")
                yield PositionBars(id="run-positions")
                yield Static(plain(d.advice), id="run-advice")
            yield Static(plain("Notes"), classes="run-heading")
            yield Static(plain("\n".join(d.notes), keep_lines=True), id="run-notes")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        table = self.query_one("#run-measurements", DataTable)
        table.add_columns("measurement", "value")
        for name, value in self.detail.measurements:
            table.add_row(name, value)
        if self.detail.positions:
            self.query_one("#run-positions", PositionBars).show(self.detail.positions, self.detail.advised_n_max,
                                                                 title="")
        self.query_one("#run-detail", VerticalScroll).focus()
