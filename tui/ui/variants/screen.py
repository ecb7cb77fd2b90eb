"""The variants picker (`v`): every quant of the form's hf-repo planned side by side, before any download.

One row per model file (a split set is one row) and per main KV type: the file size, what each
device needs and would have left (a column per device key, its label on two lines, so that the
table fits a 120-column terminal), whether it fits, the largest `-c` that fits and what `--fit on`
would change; the best fitting row first, highlighted. Under the table: the highlighted row in
words (its full file name, what Enter puts in the form), what `-hf` downloads besides, the legend.
`Enter` puts the highlighted file in the form (`-hf REPO:TAG`, or `REPO` plus `-hff FILE` when the
tag would pick another file; its KV type as -ctk/-ctv), `k` compares KV types, `Escape` closes
without changing anything. The work is the `VariantsController`'s, on a worker; this screen only
shows what it is given.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from tui.core.options.settings import Settings
from tui.core.config.text import safe_text
from tui.ui.variants.controller import VariantsController
from tui.ui.variants.views import VariantsView
from tui.ui.format import cell, markup_safe, plain
from tui.ui.variants.messages import VariantsPlanned, VariantsProgressed
from tui.ui.theme_colors import rich_style

#: a device column's label, on two lines (`CUDA0` over `need (left)`): the cells are narrower than it
NEED = " need (left)"


def _label(column: str) -> str:
    return column[: -len(NEED)] + "\n" + NEED.strip() if column.endswith(NEED) else column


def fill(table: DataTable[Any], labels: list[str], rows: list[list[object]]) -> None:
    """Replace the columns and rows, each column as wide as its widest cell or label line (as
    `widgets.sweep_table.fill`, whose labels are one line)."""
    table.clear(columns=True)
    rows = [[cell(c) if isinstance(c, str) else c for c in r] for r in rows]  # a str cell is markup: Hub names are not
    for i, label in enumerate(labels):
        width = max([*(cell_len(line) for line in label.split("\n")), *(cell_len(str(row[i])) for row in rows)])
        table.add_column(Text(label), width=width)
    for cells in rows:
        table.add_row(*cells)


class VariantsScreen(ModalScreen[Settings | None]):
    """Dismissed with the form's settings for the chosen row, or None (Escape)."""

    DEFAULT_CSS = """
    VariantsScreen { align: center middle; }
    VariantsScreen > #variants-box { width: 98%; height: auto; max-height: 90%; border: round $primary;
                                     background: $surface; padding: 0 1; }
    VariantsScreen #variants-status { height: auto; color: $foreground-muted; }
    VariantsScreen #variants-error { height: auto; color: $error; text-style: bold; display: none; }
    VariantsScreen #variants-error.-shown { display: block; }
    VariantsScreen #variants-table { height: auto; max-height: 20; margin-top: 1; }
    VariantsScreen #variants-detail { height: auto; color: $foreground; }
    VariantsScreen #variants-notes { height: auto; margin-top: 1; color: $foreground-muted; }
    VariantsScreen #variants-hint { height: auto; margin-top: 1; color: $foreground; }
    """
    BINDINGS = [
        Binding("enter", "choose", "Use this file", priority=True, id="variants_screen.choose"),
        Binding("k", "kv", "KV types", id="variants_screen.kv"),
        Binding("escape", "close", "Close", id="variants_screen.close"),
    ]

    def __init__(self, controller: VariantsController) -> None:
        super().__init__()
        self.controller = controller

    def compose(self) -> ComposeResult:
        with Vertical(id="variants-box"):
            yield Static("", id="variants-status")
            yield Static("", id="variants-error")
            yield DataTable(id="variants-table", cursor_type="row", zebra_stripes=True, header_height=2)
            yield Static("", id="variants-detail")
            yield Static("", id="variants-notes")
            yield Static("", id="variants-hint")
            yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#variants-box").border_title = f"Variants of {markup_safe(self.controller.repo)} (headers only, no download)"
        self.query_one("#variants-table", DataTable).focus()
        self.show(self.controller.start(self))

    @on(VariantsProgressed)
    @on(VariantsPlanned)
    def _news(self, message: VariantsProgressed | VariantsPlanned) -> None:
        view = self.controller.take(message)
        if view is not None:
            self.show(view)

    def show(self, view: VariantsView) -> None:
        self.query_one("#variants-status", Static).update(plain(view.status if not view.error else view.repo))
        error = self.query_one("#variants-error", Static)
        error.update(plain(view.error, keep_lines=True))
        error.set_class(bool(view.error), "-shown")
        table = self.query_one("#variants-table", DataTable)
        best = view.best
        fill(table, [_label(c) for c in view.columns], [self._cells(view, i) for i in range(len(view.rows))])
        table.display = bool(view.rows)
        if view.rows:
            table.move_cursor(row=best or 0)
        self._show_detail(table.cursor_row if view.rows else None)
        notes = self.query_one("#variants-notes", Static)
        notes.update(Content("\n").join(plain(n) for n in view.notes))
        notes.display = bool(view.rows and view.notes)
        self.query_one("#variants-hint", Static).update(plain(self._hint(view)))

    @on(DataTable.RowHighlighted, "#variants-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail(event.cursor_row)

    def _show_detail(self, index: int | None) -> None:
        """The highlighted row in words under the table (its full file name, what Enter puts in the form)."""
        rows = self.controller.view.rows
        detail = self.query_one("#variants-detail", Static)
        line = rows[index].detail if index is not None and 0 <= index < len(rows) else ""
        detail.update(plain(line))
        detail.display = bool(line)

    def _cells(self, view: VariantsView, index: int) -> list[object]:
        row, variables = view.rows[index], self.app.theme_variables
        best = index == view.best
        cells: list[object] = [Text(safe_text(c), style=rich_style(variables, "success", bold=True)) if best and i == 0 else c
                               for i, c in enumerate(row.cells)]
        fits_at = len(view.columns) - 3
        colour = {"yes": "success", "with fit": "warning"}.get(row.tier, "error")
        cells[fits_at] = Text(safe_text(row.cells[fits_at]), style=rich_style(variables, colour, bold=row.tier != "yes"))
        return cells

    def _hint(self, view: VariantsView) -> str:
        kvs = "the form's" if self.controller.kvs == (None,) else ", ".join(str(k) for k in self.controller.kvs)
        if not view.done:
            return "reading the headers only (HTTP ranges); Escape closes"
        if view.error:
            return "Escape closes · k plans again (with the next KV types)"
        best = view.best
        lead = (f"best fit: {view.rows[best].tag or view.rows[best].path} (highlighted)" if best is not None
                else "no file fits these devices with these flags")
        return f"{lead} · Enter puts it in the form · k: KV types ({kvs}) · Escape closes"

    def action_choose(self) -> None:
        view = self.controller.view
        if not view.done or not view.rows:
            self.notify("nothing to choose yet" if not view.done else "no file to choose", severity="warning")
            return
        row = self.query_one("#variants-table", DataTable).cursor_row
        settings = self.controller.settings_for_row(row)
        if settings is None:
            self.notify("this row could not be planned; choose another", severity="warning")
            return
        self.dismiss(settings)

    def action_kv(self) -> None:
        """Compare the next set of main KV types (the headers are cached: nothing is fetched again)."""
        self.controller.next_kvs()
        self.show(self.controller.start(self))

    def action_close(self) -> None:
        self.dismiss(None)
