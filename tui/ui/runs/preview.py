"""The runs screen's fixed preview (snapshots, screenshots): `RunsController`'s calls over fixed rows.

Why a twin of the controller and not `if fixed` branches in the screen: the screen then has one way to
get its data, the controller's calls, and the preview cannot drift from what the store path draws.
Nothing here reads the store or blocks; `RunsController.preview` builds it.
"""

from __future__ import annotations

from tui.ui.format import pct, tps
from tui.ui.runs.views import CompareRow, CompareView, RunDetail, RunRow

PREVIEW_NOTE = "verdicts call a difference only when it exceeds the measured spread"


class RunsPreview:
    """Fixed runs, and the comparison of the two `compared` ones; the same answers as the controller."""

    #: Nothing here blocks: the screen calls at once, so a snapshot never waits on a worker.
    blocking = False

    def __init__(self, rows: tuple[RunRow, ...], comparison: tuple[CompareRow, ...] = (),
                 compared: tuple[int | str, ...] = ()) -> None:
        self._rows = rows
        self._comparison = comparison
        self.compared = compared

    def list_runs(self, limit: int = 200) -> tuple[tuple[RunRow, ...], str | None]:
        return self._rows[:limit], None

    def detail(self, run_id: int | str) -> tuple[RunDetail | None, str | None]:
        row = next((r for r in self._rows if str(r.run_id) == str(run_id)), None)
        if row is None:
            return None, f"no run {run_id} in this preview"
        measurements = (("TG (generation) t/s", tps(row.tg_median)), ("PP (prompt) t/s", tps(row.pp_median)),
                        ("acceptance", pct(row.acceptance)), ("requests", str(row.n)))
        notes = ("failed",) if row.failed else (f"⚠ {row.warnings} warning(s)",) if row.warnings else ()
        return RunDetail(row.run_id, f"#{row.run_id} {row.config}", (row.when,),
                         "(a fixed preview: no stored settings)", measurements, notes), None

    def compare(self, a: int | str, b: int | str) -> tuple[CompareView | None, str | None]:
        if [str(a), str(b)] != [str(x) for x in self.compared] or not self._comparison:
            shown = " and ".join(map(str, self.compared)) or "no runs"
            return None, f"this fixed preview compares {shown} only"
        return CompareView(self._comparison, None, PREVIEW_NOTE), None

    def export(self, ids: tuple[int | str, ...], fmt: str) -> tuple[str | None, str | None]:
        return None, "a fixed preview writes no files"
