"""The sweep's rows: axis values, the plan before the run (memory, risk), then medians with spread."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable

from tui.ui.format import mib_short, pct
from tui.ui.theme_colors import rich_style
from tui.ui.lab.views import SweepRowView, SweepView

STATUS = {"ok": "ok", "failed": "FAILED", "invalid": "invalid", "duplicate": "dup", "predicted_oom": "skip:oom",
          "pending": "pending", "running": "▶ running"}
RISK_COLOUR = {"ok": "success", "tight": "warning", "oom": "error", "invalid": "error", "unknown": "foreground-muted"}


def _speed(v: float | None, spread: float | None) -> str:
    if v is None:
        return "—"
    num = f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"
    if spread is None:
        return num
    half = spread * 50
    return f"{num} ±{half:.0f}%" if half >= 1 else f"{num} ±<1%"


def fill(table: DataTable[Any], labels: list[str], rows: list[list[object]], keys: list[str] | None = None) -> None:
    """Replace a table's columns and rows, each column as wide as its widest cell.

    Why not the table's own measuring: it waits for an idle moment, which a stream of progress
    updates can keep from coming, leaving columns at their labels' width (values cut short)."""
    table.clear(columns=True)
    for i, label in enumerate(labels):
        table.add_column(label, width=max([cell_len(label), *(cell_len(str(row[i])) for row in rows)]))
    for n, cells in enumerate(rows):
        table.add_row(*cells, key=keys[n] if keys else None)


class SweepTable(DataTable[object]):
    """One row per configuration; rebuilt from a SweepView only when its rows change."""

    DEFAULT_CSS = """
    SweepTable { height: 1fr; min-height: 4; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self._key: tuple[object, ...] | None = None

    def show(self, view: SweepView) -> None:
        key = (view.axes, view.rows, view.workload)
        if key == self._key:
            return
        self._key = key
        cursor = self.cursor_row
        cols = ["#", *view.axes, "plan MiB", "risk", "status", "TG t/s", "PP t/s", "accept"]
        if view.workload:
            cols.append("e2e s")
        cols.append("notes")
        fill(self, cols, [self._cells(r, view) for r in view.rows], [str(r.number) for r in view.rows])
        if self.row_count:
            self.move_cursor(row=min(max(cursor, 0), self.row_count - 1))

    def _cells(self, r: SweepRowView, view: SweepView) -> list[object]:
        v = self.app.theme_variables
        risk = Text(r.risk or "—", style=rich_style(v, RISK_COLOUR.get(r.risk or "", "foreground-muted"),
                                                 bold=r.risk in ("oom", "invalid")))
        status_colour = {"ok": "success", "failed": "error", "predicted_oom": "warning", "running": "primary"}
        status = Text(STATUS.get(r.status, r.status), style=rich_style(v, status_colour.get(r.status, "foreground")))
        mark = Text(r.mark, style=rich_style(v, "success", bold=True)) if r.mark else Text("")
        notes = Text.assemble(mark, " " if r.mark and r.note else "", r.note[:40] + ("…" if len(r.note) > 40 else ""))
        cells: list[object] = [str(r.number), *r.values, mib_short(r.planned_mib) if r.planned_mib else "—", risk,
                               status, _speed(r.tg, r.tg_spread), _speed(r.pp, r.pp_spread), pct(r.acceptance)]
        if view.workload:
            cells.append("—" if r.score is None else f"{r.score:.2f}")
        cells.append(notes)
        return cells
