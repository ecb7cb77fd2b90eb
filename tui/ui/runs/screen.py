"""The runs view (`h`): stored probe runs, compare two side by side with a verdict, export."""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from tui.ui.format import pct, tps
from tui.ui.runs.controller import RunsController
from tui.ui.theme_colors import rich_style
from tui.ui.runs.views import CompareRow, RunRow

EXPORT_FORMATS = ("md", "csv", "json")


class RunsScreen(Screen[None]):
    """History table; `space` marks up to two runs, `c` compares them, `e` exports the marked ones."""

    DEFAULT_CSS = """
    RunsScreen { layout: vertical; }
    RunsScreen > #runs-title { height: 1; background: $panel; color: $foreground; padding: 0 1; text-style: bold; }
    RunsScreen > #runs-table { height: 1fr; border: round $foreground 25%; }
    RunsScreen > #runs-table:focus { border: round $primary; }
    RunsScreen > #compare-box { height: auto; max-height: 50%; border: round $foreground 25%; padding: 0 1; }
    RunsScreen #compare-title { text-style: bold; }
    RunsScreen #compare-table { height: auto; }
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

    class Loaded(Message):
        def __init__(self, rows: tuple[RunRow, ...], error: str | None) -> None:
            super().__init__()
            self.rows = rows
            self.error = error

    class Compared(Message):
        def __init__(self, ids: tuple[int | str, int | str], rows: tuple[CompareRow, ...], note: str,
                     error: str | None) -> None:
            super().__init__()
            self.ids = ids
            self.rows = rows
            self.note = note
            self.error = error

    class Exported(Message):
        def __init__(self, path: str | None, error: str | None) -> None:
            super().__init__()
            self.path = path
            self.error = error

    def __init__(self, runs: RunsController, fixed: tuple[RunRow, ...] | None = None,
                 comparison: tuple[CompareRow, ...] = (), compared: tuple[int | str, ...] = ()) -> None:
        """`fixed`: the rows (and `comparison` of the two `compared` runs) of a fixed preview, no worker."""
        super().__init__()
        self.runs = runs
        self._fixed = fixed
        self._rows: tuple[RunRow, ...] = ()
        self._marked: list[int | str] = list(compared)
        self._fixed_comparison = comparison
        self._format = EXPORT_FORMATS[0]

    def compose(self) -> ComposeResult:
        yield Static("Runs: space marks two runs, c compares them, e exports the marked runs (E: format)",
                     id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        with Vertical(id="compare-box"):
            yield Static("Compare: mark two runs with space, then press c", id="compare-title")
            yield DataTable(id="compare-table", cursor_type="none", show_cursor=False)
            yield Static("", id="compare-note")
        yield Static("", id="runs-status")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        table = self.query_one("#runs-table", DataTable)
        table.add_columns("", "run", "when", "configuration", "TG t/s", "PP t/s", "acceptance", "n", "notes")
        self.query_one("#compare-table", DataTable).add_columns("metric", "A", "B", "change", "verdict")
        table.focus()
        if self._fixed is not None:
            self._show_rows(self._fixed)
            if self._fixed_comparison and len(self._marked) == 2:
                self._show_comparison((self._marked[0], self._marked[1]), self._fixed_comparison,
                                      "verdicts call a difference only when it exceeds the measured spread")
        else:
            self._load()

    # --- data ------------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="runs")
    def _load(self) -> None:
        rows, error = self.runs.list_runs()
        self.post_message(self.Loaded(rows, error))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        self._show_rows(message.rows)
        self._status(message.error or f"{len(message.rows)} run(s) stored", error=bool(message.error))

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
        if self._fixed is not None:
            return
        self._compare(self._marked[0], self._marked[1])

    @work(thread=True, exclusive=True, exit_on_error=False, group="runs-compare")
    def _compare(self, a: int | str, b: int | str) -> None:
        rows, note, error = self.runs.compare(a, b)
        self.post_message(self.Compared((a, b), rows, note, error))

    @on(Compared)
    def _compared(self, message: Compared) -> None:
        if message.error:
            self._status(message.error, error=True)
            return
        self._show_comparison(message.ids, message.rows, message.note)

    def _show_comparison(self, ids: tuple[int | str, int | str], rows: tuple[CompareRow, ...], note: str) -> None:
        self.query_one("#compare-title", Static).update(f"Run {ids[0]} (A) vs run {ids[1]} (B)")
        table = self.query_one("#compare-table", DataTable)
        table.clear()
        colour = {"better": "success", "worse": "error", "same": "foreground-muted", "inconclusive": "warning"}
        for r in rows:
            style = rich_style(self.app.theme_variables, colour.get(r.verdict, "foreground"),
                               bold=r.verdict in ("better", "worse"))
            verdict = Text(r.verdict, style=style)
            table.add_row(r.metric, r.a, r.b, r.change, verdict)
        self.query_one("#compare-note", Static).update(Content(note))

    def action_cycle_format(self) -> None:
        i = EXPORT_FORMATS.index(self._format)
        self._format = EXPORT_FORMATS[(i + 1) % len(EXPORT_FORMATS)]
        self._status(f"export format: {self._format}")

    def action_export(self) -> None:
        ids = list(self._marked) or ([self._current().run_id] if self._current() else [])
        if not ids:
            self._status("no run to export", error=True)
            return
        if self._fixed is not None:
            return
        self._export(tuple(ids), self._format)

    @work(thread=True, exclusive=True, exit_on_error=False, group="runs-export")
    def _export(self, ids: tuple[int | str, ...], fmt: str) -> None:
        path, error = self.runs.export(ids, fmt)
        self.post_message(self.Exported(path, error))

    @on(Exported)
    def _exported(self, message: Exported) -> None:
        if message.error:
            self._status(message.error, error=True)
        else:
            self._status(f"exported to {message.path}")
            self.notify(f"exported to {message.path}", title="Export")

    def action_reload(self) -> None:
        if self._fixed is None:
            self._load()

    def action_close(self) -> None:
        self.dismiss(None)


