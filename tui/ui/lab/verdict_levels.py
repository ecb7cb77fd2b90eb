"""The MTP on/off verdict at one request at a time and at N at once, side by side: what `a` runs when
the probe panel's *at once* is N > 1 (the core's `lab.ab_load.run_ab_levels`, an interleaved A/B at
each concurrency, each launched with its slots).

The verdict screen keeps showing one verdict in full (N's: the load asked for), and this module adds a
row per concurrency under it: the call, each side's seconds per request, the change, TG per request and
acceptance, so a setting that wins for one user and loses for N shows both at once.

The core is imported inside the functions on purpose (lazy, not a cycle): the lab's engine loads the
server supervisor and httpx, which the TUI's first frame must not pay for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from tui.core.options.settings import Settings
from tui.ui.lab.tables import fill
from tui.ui.lab.views import LevelRow
from tui.ui.theme_colors import rich_style

COLUMNS = ("at once", "verdict", "MTP off s/request", "MTP on s/request", "time", "TG/request off → on",
           "acceptance")
CALL_COLOUR = {"b_wins": "success", "b_loses": "error", "same": "foreground", "inconclusive": "warning"}


def levels(concurrency: int) -> list[int]:
    """The concurrencies `a` runs for `concurrency` requests at once (the core's rule)."""
    from tui.core.lab.ab_load import levels_for  # lazy: see the module docstring

    return levels_for(concurrency)


def concurrency_of(verdict: Any) -> int:
    """The requests at once a verdict was measured at (1 for one at a time)."""
    return int(getattr(verdict, "concurrency", 1))


def run(settings: Settings, *, suite: str, workload: tuple[int, int], passes: int, n_predict: int | None,
        concurrency: int, server_bin: Path, on_event: Callable[[Any], None],
        cancel: threading.Event) -> tuple[Any, str | None]:
    """MTP on vs off at 1 and at `concurrency` at once (blocking). Returns (LoadVerdict or None, error).
    The levels' progress is reported as one run: passes counted across the levels, each message saying
    which concurrency it is about, a level's own end not taken for the whole run's."""
    from tui.core.lab.ab import mtp_sides  # lazy: see the module docstring
    from tui.core.lab.ab_load import run_ab_levels
    from tui.core.lab.events import LabError
    from tui.core.lab.ranking import MTP

    at = levels(concurrency)
    level = [-1]

    def relay(ev: Any) -> None:
        level[0] += ev.kind == "started"  # each level's A/B starts once
        k = max(0, level[0])
        last = k == len(at) - 1
        on_event(replace(ev, kind=ev.kind if last or ev.kind != "finished" else "pass_done",
                         done=ev.done + 2 * passes * k, total=2 * passes * len(at),
                         message=f"{at[k]} at once: {ev.message}" if ev.message else ev.message))

    try:
        v = run_ab_levels(*mtp_sides(replace(settings, port=None)), suite, workload, passes, at, pair=MTP,
                          server_bin=server_bin, n_predict=n_predict, on_event=relay, cancel=cancel)
    except (LabError, ValueError) as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - shown, never a traceback
        return None, f"the MTP on/off run stopped: {exc}"
    return v, next((lv.error for _, lv in v.levels if lv.error), None)


def level_rows(verdict: Any) -> tuple[LevelRow, ...]:
    """One row per concurrency of a core `LoadVerdict`: medians (the ranges are in N's table above and
    the call already weighs them), so both levels fit side by side."""
    from tui.core.probes.stats import fmt_rel  # lazy: see the module docstring

    def med(s: Any, digits: int = 1) -> str:
        return "-" if s is None else f"{s.median:.{digits}f}"

    return tuple(
        LevelRow(n, v.label, v.headline, med(v.a.e2e_s, 2), med(v.b.e2e_s, 2), fmt_rel(v.e2e.rel_change),
                 f"{med(v.a.tg_tps)} → {med(v.b.tg_tps)}", med(v.b.acceptance, 2))
        for n, v in verdict.levels)


def show(table: DataTable[Any], rows: tuple[LevelRow, ...], variables: dict[str, str]) -> None:
    """The side-by-side table (hidden for a verdict at one request at a time)."""
    table.display = bool(rows)
    fill(table, list(COLUMNS), [
        [str(r.concurrency), Text(r.headline.upper(), style=rich_style(
            variables, CALL_COLOUR.get(r.label, "foreground"), bold=r.label in ("b_wins", "b_loses"))),
         r.off_s, r.on_s, r.change, r.tg, r.acceptance]
        for r in rows])
