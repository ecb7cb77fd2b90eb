"""The tune's trials: one row per candidate considered, what differs from the fixed flags, its plan,
what happened to it, its figures with spread, and why it was pruned, failed or dropped."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from tui.ui.format import pct
from tui.ui.theme_colors import rich_style
from tui.ui.lab.tune_views import TuneRowView, TuneView
from tui.ui.lab.sweep_table import fill

COLUMNS = ("#", "MTP", "searched values", "plan MiB", "status", "PP t/s", "TG t/s", "acc", "s/req", "why")
STATUS = {"ok": "ok", "eliminated": "dropped", "predicted_oom": "skip:oom", "dominated": "skip:dom",
          "invalid": "invalid", "failed": "FAILED"}
FAILURE = {"oom_load": "OOM load", "oom_decode": "OOM decode"}
STATUS_COLOUR = {"ok": "success", "eliminated": "foreground-muted", "predicted_oom": "warning", "dominated": "warning",
                 "invalid": "error", "failed": "error"}
RISK_COLOUR = {"ok": "success", "tight": "warning", "oom": "error", "invalid": "error"}
WHY_WIDTH = 16  # the highlighted row's whole reason is on the line below the table


def speed(v: float | None, spread: float | None) -> str:
    """t/s with its spread as ± half the relative range, as the sweep's table writes it: `512 ±1%`."""
    if v is None:
        return "—"
    num = f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}"
    return num if spread is None else f"{num} ±{spread * 50:.0f}%" if spread * 50 >= 1 else f"{num} ±<1%"


def seconds(v: float | None, spread: float | None) -> str:
    """Seconds per request with three significant figures and its spread: `0.512 ±2%`."""
    if v is None:
        return "—"
    num = f"{v:#.3g}" if v < 100 else f"{v:.0f}"
    return num if spread is None else f"{num} ±{spread * 50:.0f}%" if spread * 50 >= 1 else f"{num} ±<1%"


class TuneTable(DataTable[object]):
    """Rebuilt from a TuneView only when its rows change; the best and the best MTP-off marked."""

    DEFAULT_CSS = """
    TuneTable { height: 1fr; min-height: 4; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self._rows: tuple[TuneRowView, ...] | None = None

    def show(self, view: TuneView) -> None:
        if view.rows == self._rows:
            return
        self._rows = view.rows
        cursor = self.cursor_row
        fill(self, list(COLUMNS), [self._cells(r) for r in view.rows], [str(r.number) for r in view.rows])
        if self.row_count:
            self.move_cursor(row=min(max(cursor, 0), self.row_count - 1))

    def _cells(self, r: TuneRowView) -> list[object]:
        v = self.app.theme_variables
        mib = f" {r.planned_mib:.0f}" if r.planned_mib is not None else ""
        plan = Text(f"{r.plan}{mib}" if r.plan else "—", style=rich_style(v, RISK_COLOUR.get(r.plan, "foreground-muted")))
        status = FAILURE.get(r.failure, "") or STATUS.get(r.status, r.status)
        status_text = Text(status, style=rich_style(v, STATUS_COLOUR.get(r.status, "foreground")))
        mark_colour = "success" if r.mark == "BEST" else "primary" if r.mark.startswith("best") else "foreground-muted"
        mark = Text(r.mark, style=rich_style(v, mark_colour, bold=r.mark == "BEST")) if r.mark else Text("")
        why = r.reason if len(r.reason) <= WHY_WIDTH else r.reason[:WHY_WIDTH - 1] + "…"
        notes = Text.assemble(mark, " " if r.mark and why else "", why)
        number = f"{r.number}" + (" ↺" if r.resumed else "")
        return [number, "on" if r.mtp else "off", r.differs, plan, status_text, speed(r.pp, r.pp_spread),
                speed(r.tg, r.tg_spread), pct(r.acceptance) if r.mtp else "—", seconds(r.e2e, r.e2e_spread), notes]


def note(row: TuneRowView | None) -> str:
    """The highlighted row in full: its stage, plan source, passes, launches and the whole reason."""
    if row is None:
        return ""
    parts = [f"#{row.number} ({row.stage})" if row.stage else f"#{row.number}"]
    if row.plan:
        mib = f", {row.planned_mib:.0f} MiB" if row.planned_mib is not None else ""
        parts.append(f"plan {row.plan}{mib} ({row.plan_source})")
    parts.append(f"{row.passes} passes, {row.launches} launch{'es' if row.launches != 1 else ''}"
                 + (", from the saved tune" if row.resumed else ""))
    text = " · ".join(parts)
    return f"{text}: {row.reason}" if row.reason else text
