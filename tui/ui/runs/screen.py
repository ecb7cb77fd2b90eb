"""The runs view (`h`): stored probe runs, open one, compare two side by side with a verdict, export."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from tui.ui.format import pct, plain, tps
from tui.ui.runs.controller import RunsController
from tui.ui.runs.detail_screen import RunDetailScreen
from tui.ui.runs.preview import RunsPreview
from tui.ui.runs.views import CompareRow, CompareView, RunDetail, RunRow
from tui.ui.theme_colors import rich_style

EXPORT_FORMATS = ("md", "csv", "json")


class RunsTable(DataTable):
    """The runs table: Enter, its select key, opens the run under the cursor, and the footer says so."""

    BINDINGS = [Binding("enter", "select_cursor", "Open", id="runs_screen.open")]


class RunsScreen(Screen[None]):
    """History table; `enter` opens a run, `space` marks up to two, `c` compares them, `e` exports the marked ones."""

    DEFAULT_CSS = """
    RunsScreen { layout: vertical; }
    RunsScreen > #runs-title { height: 1; background: $panel; color: $foreground; padding: 0 1; text-style: bold; }
    RunsScreen > #runs-table { height: 1fr; border: round $foreground 25%; }
    RunsScreen > #runs-table:focus { border: round $primary; }
    RunsScreen > #compare-box { height: auto; max-height: 50%; border: round $foreground 25%; padding: 0 1; }
    RunsScreen #compare-title { text-style: bold; }
    RunsScreen #compare-table { height: auto; }
    RunsScreen #compare-changes { color: $foreground; display: none; }
    RunsScreen #compare-note { color: $foreground-muted; }
    RunsScreen > #runs-status { height: auto; color: $foreground-muted; padding: 0 1; }
    RunsScreen > #runs-status.-error { color: $error; }
    RunsScreen #export-format { width: 16; }
    """
    BINDINGS = [
        Binding("escape,q,h", "close", "Back", id="runs_screen.close"),
        Binding("space", "mark", "Mark", id="runs_screen.mark"),
        Binding("c", "compare", "Compare", id="runs_screen.compare"),
        Binding("e", "export", "Export", id="runs_screen.export"),
        Binding("E", "cycle_format", "Format", id="runs_screen.format"),
        Binding("R", "reload", "Reload", id="runs_screen.reload"),
    ]

    class Answered(Message):
        """A controller answer from a worker; `show` draws it on the UI thread."""

        def __init__(self, show: Callable[[], None]) -> None:
            super().__init__()
            self.show = show

    def __init__(self, runs: RunsController | RunsPreview) -> None:
        """`runs`: the feature's controller, or its `preview` over fixed rows (snapshots, screenshots)."""
        super().__init__()
        self.runs = runs
        self._rows: tuple[RunRow, ...] = ()
        self._marked: list[int | str] = list(runs.compared)
        self._format = EXPORT_FORMATS[0]

    def compose(self) -> ComposeResult:
        yield Static("Runs: enter opens a run, space marks two, c compares them, e exports the marked runs "
                     "(E: format)", id="runs-title")
        yield RunsTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        with Vertical(id="compare-box"):
            yield Static("Compare: mark two runs with space, then press c", id="compare-title")
            compare = DataTable(id="compare-table", cursor_type="none", show_cursor=False)
            compare.can_focus = False  # nothing to select there: Tab stays on the runs
            yield compare
            yield Static("", id="compare-changes")
            yield Static("", id="compare-note")
        yield Static("", id="runs-status")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        table = self.query_one("#runs-table", DataTable)
        table.add_columns("", "run", "when", "configuration", "TG t/s", "PP t/s", "acceptance", "n", "notes")
        self.query_one("#compare-table", DataTable).add_columns("metric", "A", "B", "change", "verdict")
        table.focus()
        self._load()
        if len(self._marked) == 2:
            self._compare(self._marked[0], self._marked[1])

    # --- data: every call goes through the controller --------------------------------------------

    def _ask(self, call: Callable[[], Any], show: Callable[[Any], None]) -> None:
        """`show(call())`: in a worker when the controller blocks (the store), at once for a preview."""
        if self.runs.blocking:
            self._ask_in_worker(call, show)
        else:
            show(call())

    @work(thread=True, exit_on_error=False, group="runs")
    def _ask_in_worker(self, call: Callable[[], Any], show: Callable[[Any], None]) -> None:
        self.post_message(self.Answered(partial(show, call())))

    @on(Answered)
    def _answered(self, message: Answered) -> None:
        message.show()

    def _load(self) -> None:
        self._ask(self.runs.list_runs, self._loaded)

    def _loaded(self, answer: tuple[tuple[RunRow, ...], str | None]) -> None:
        rows, error = answer
        self._show_rows(rows)
        self._status(error or f"{len(rows)} run(s) stored", error=bool(error))

    def _show_rows(self, rows: tuple[RunRow, ...]) -> None:
        self._rows = rows
        table = self.query_one("#runs-table", DataTable)
        table.clear()
        for r in rows:
            mark = "●" if r.run_id in self._marked else ""
            notes = "failed" if r.failed else (f"⚠ {r.warnings}" if r.warnings else "")
            table.add_row(mark, str(r.run_id), r.when, r.config, tps(r.tg_median), tps(r.pp_median),
                          pct(r.acceptance), str(r.n), notes, key=str(r.run_id))

    def _status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#runs-status", Static)
        status.update(Content(text))
        status.set_class(error, "-error")

    # --- actions ---------------------------------------------------------------------------------

    def _current(self) -> RunRow | None:
        table = self.query_one("#runs-table", DataTable)
        if not self._rows or table.cursor_row < 0 or table.cursor_row >= len(self._rows):
            return None
        return self._rows[table.cursor_row]

    @on(DataTable.RowSelected, "#runs-table")
    def _open(self, event: DataTable.RowSelected) -> None:
        """Enter (or a click) on a run opens it."""
        event.stop()
        row = self._current()
        if row is not None:
            self._ask(partial(self.runs.detail, row.run_id), self._opened)

    def _opened(self, answer: tuple[RunDetail | None, str | None]) -> None:
        detail, error = answer
        if detail is None:
            self._status(error or "the run could not be opened", error=True)
        else:
            self.app.push_screen(RunDetailScreen(detail))

    def action_mark(self) -> None:
        row = self._current()
        if row is None:
            return
        if row.run_id in self._marked:
            self._marked.remove(row.run_id)
        else:
            self._marked = [*self._marked[-1:], row.run_id]
        cursor = self.query_one("#runs-table", DataTable).cursor_row
        self._show_rows(self._rows)
        self.query_one("#runs-table", DataTable).move_cursor(row=cursor)
        self._status(f"marked: {', '.join(map(str, self._marked)) or 'none'}")

    def action_compare(self) -> None:
        if len(self._marked) != 2:
            self._status("mark exactly two runs with space first", error=True)
            return
        self._compare(self._marked[0], self._marked[1])

    def _compare(self, a: int | str, b: int | str) -> None:
        self._ask(partial(self.runs.compare, a, b), partial(self._compared, (a, b)))

    def _compared(self, ids: tuple[int | str, int | str], answer: tuple[CompareView | None, str | None]) -> None:
        view, error = answer
        if view is None:
            self._status(error or "the runs could not be compared", error=True)
            return
        self.query_one("#compare-title", Static).update(f"Run {ids[0]} (A) vs run {ids[1]} (B)")
        table = self.query_one("#compare-table", DataTable)
        table.clear()
        colour = {"better": "success", "worse": "error", "same": "foreground-muted", "inconclusive": "warning"}
        for r in view.rows:
            style = rich_style(self.app.theme_variables, colour.get(r.verdict, "foreground"),
                               bold=r.verdict in ("better", "worse"))
            table.add_row(r.metric, r.a, r.b, r.change, Text(r.verdict, style=style))
        changes = self.query_one("#compare-changes", Static)
        changes.update(plain(_changes_line(view.changes)))
        changes.display = view.changes is not None
        self.query_one("#compare-note", Static).update(plain(view.note, keep_lines=True))

    def action_cycle_format(self) -> None:
        i = EXPORT_FORMATS.index(self._format)
        self._format = EXPORT_FORMATS[(i + 1) % len(EXPORT_FORMATS)]
        self._status(f"export format: {self._format}")

    def action_export(self) -> None:
        ids = list(self._marked) or ([self._current().run_id] if self._current() else [])
        if not ids:
            self._status("no run to export", error=True)
            return
        self._ask(partial(self.runs.export, tuple(ids), self._format), self._exported)

    def _exported(self, answer: tuple[str | None, str | None]) -> None:
        path, error = answer
        if error or path is None:
            self._status(error or "nothing was exported", error=True)
        else:
            self._status(f"exported to {path}")
            self.notify(f"exported to {path}", title="Export")

    def action_reload(self) -> None:
        self._load()

    def action_close(self) -> None:
        self.dismiss(None)


def _changes_line(changes: tuple[str, ...] | None) -> str:
    """The settings B changes against A, as llama-server reads them (the core resolved the defaults)."""
    if changes is None:
        return ""
    if not changes:
        return "settings: the same for llama-server (a value left out equals its default typed out)"
    return "settings A → B: " + " · ".join(changes)
