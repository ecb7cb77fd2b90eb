"""The lab's tables: a sweep's rows (axis values, the plan before the run, then medians with spread)
and a tune's trials (what differs from the fixed flags, its plan, what happened to it, its figures,
and why it was pruned, failed or dropped); `fill` also serves the verdict's and the searches' tables."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import DataTable

from tui.ui.format import mib_short, pct
from tui.ui.theme_colors import rich_style
from tui.ui.lab.tune_views import TuneRowView, TuneView
from tui.ui.lab.views import SweepRowView, SweepView, num

SWEEP_STATUS = {"ok": "ok", "failed": "FAILED", "invalid": "invalid", "duplicate": "dup", "predicted_oom": "skip:oom",
                "pending": "pending", "running": "▶ running"}
SWEEP_STATUS_COLOUR = {"ok": "success", "failed": "error", "predicted_oom": "warning", "running": "primary"}
TUNE_COLUMNS = ("#", "MTP", "searched values", "plan MiB", "status", "PP t/s", "TG t/s", "acc", "s/req", "why")
TUNE_STATUS = {"ok": "ok", "eliminated": "dropped", "predicted_oom": "skip:oom", "dominated": "skip:dom",
               "invalid": "invalid", "failed": "FAILED"}
TUNE_STATUS_COLOUR = {"ok": "success", "eliminated": "foreground-muted", "predicted_oom": "warning",
                      "dominated": "warning", "invalid": "error", "failed": "error"}
FAILURE = {"oom_load": "OOM load", "oom_decode": "OOM decode"}
RISK_COLOUR = {"ok": "success", "tight": "warning", "oom": "error", "invalid": "error", "unknown": "foreground-muted"}
WHY_WIDTH = 16  # the highlighted trial's whole reason is on the line below the table


def with_spread(text: str, spread: float | None) -> str:
    """A median with its spread as ± half the relative range: `512 ±1%`."""
    if spread is None:
        return text
    return f"{text} ±{spread * 50:.0f}%" if spread * 50 >= 1 else f"{text} ±<1%"


def speed(v: float | None, spread: float | None) -> str:
    """t/s with its spread: `512 ±1%`."""
    return "—" if v is None else with_spread(num(v), spread)


def seconds(v: float | None, spread: float | None) -> str:
    """Seconds per request with three significant figures and its spread: `0.512 ±2%`."""
    return "—" if v is None else with_spread(f"{v:#.3g}" if v < 100 else f"{v:.0f}", spread)


def fill(table: DataTable[Any], labels: list[str], rows: list[list[object]], keys: list[str] | None = None) -> None:
    """Replace a table's columns and rows, each column as wide as its widest cell.

    Why not the table's own measuring: it waits for an idle moment, which a stream of progress
    updates can keep from coming, leaving columns at their labels' width (values cut short)."""
    table.clear(columns=True)
    for i, label in enumerate(labels):
        table.add_column(label, width=max([cell_len(label), *(cell_len(str(row[i])) for row in rows)]))
    for n, cells in enumerate(rows):
        table.add_row(*cells, key=keys[n] if keys else None)


def marked(mark: Text, note: str) -> Text:
    """The last column: the mark (BEST, ~best…), then the note."""
    return Text.assemble(mark, " " if mark.plain and note else "", note)


class RowsTable(DataTable[object]):
    """A table of numbered rows, rebuilt only when what it shows changes; the cursor stays on its row."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self._key: object = None

    def rebuild(self, key: object, labels: list[str], rows: list[list[object]], numbers: list[int]) -> None:
        if key == self._key:
            return
        self._key = key
        cursor = self.cursor_row
        fill(self, labels, rows, [str(n) for n in numbers])
        if self.row_count:
            self.move_cursor(row=min(max(cursor, 0), self.row_count - 1))

    def colour(self, name: str, bold: bool = False) -> str:
        return rich_style(self.app.theme_variables, name, bold=bold)


class SweepTable(RowsTable):
    """One row per configuration of a sweep."""

    def show(self, view: SweepView) -> None:
        cols = ["#", *view.axes, "plan MiB", "risk", "status", "TG t/s", "PP t/s", "accept"]
        cols += ["e2e s", "notes"] if view.workload else ["notes"]
        self.rebuild((view.axes, view.rows, view.workload), cols, [self._cells(r, view.workload) for r in view.rows],
                     [r.number for r in view.rows])

    def _cells(self, r: SweepRowView, workload: bool) -> list[object]:
        risk = Text(r.risk or "—", style=self.colour(RISK_COLOUR.get(r.risk or "", "foreground-muted"),
                                                     bold=r.risk in ("oom", "invalid")))
        status = Text(SWEEP_STATUS.get(r.status, r.status),
                      style=self.colour(SWEEP_STATUS_COLOUR.get(r.status, "foreground")))
        mark = Text(r.mark, style=self.colour("success", bold=True))
        cells: list[object] = [str(r.number), *r.values, mib_short(r.planned_mib) if r.planned_mib else "—", risk,
                               status, speed(r.tg, r.tg_spread), speed(r.pp, r.pp_spread), pct(r.acceptance)]
        if workload:
            cells.append("—" if r.score is None else f"{r.score:.2f}")
        return [*cells, marked(mark, r.note[:40] + ("…" if len(r.note) > 40 else ""))]


class TuneTable(RowsTable):
    """One row per trial of a tune; the best and the best MTP-off marked."""

    def show(self, view: TuneView) -> None:
        self.rebuild(view.rows, list(TUNE_COLUMNS), [self._cells(r) for r in view.rows], [r.number for r in view.rows])

    def _cells(self, r: TuneRowView) -> list[object]:
        mib = f" {r.planned_mib:.0f}" if r.planned_mib is not None else ""
        plan = Text(f"{r.plan}{mib}" if r.plan else "—",
                    style=self.colour(RISK_COLOUR.get(r.plan, "foreground-muted")))
        status = Text(FAILURE.get(r.failure, "") or TUNE_STATUS.get(r.status, r.status),
                      style=self.colour(TUNE_STATUS_COLOUR.get(r.status, "foreground")))
        mark_colour = "success" if r.mark == "BEST" else "primary" if r.mark.startswith("best") else "foreground-muted"
        mark = Text(r.mark, style=self.colour(mark_colour, bold=r.mark == "BEST"))
        why = r.reason if len(r.reason) <= WHY_WIDTH else r.reason[:WHY_WIDTH - 1] + "…"
        return [f"{r.number}" + (" ↺" if r.resumed else ""), "on" if r.mtp else "off", r.differs, plan, status,
                speed(r.pp, r.pp_spread), speed(r.tg, r.tg_spread), pct(r.acceptance) if r.mtp else "—",
                seconds(r.e2e, r.e2e_spread), marked(mark, why)]

