"""The tune's last step: its best MTP-on configuration against its best MTP-off one, interleaved.

Why a module of its own: the A/B is the lab's (`lab.ab.run_ab`, any two sides), but which two, when
none can run, what a saved tune already answered, and the answer at 1 and at N requests at once
(`lab.ab_load`) are the tune's rules; `run.TuneRun` asks them here and keeps only the journal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tui.core.lab.ab import mtp_sides, run_ab
from tui.core.lab.ab_load import LoadVerdict, levels_for, run_ab_levels
from tui.core.lab.events import LabEvent
from tui.core.lab.launcher import Launcher
from tui.core.lab.ranking import MTP, AbVerdict
from tui.core.lab.runner import default_prober
from tui.core.options.settings import Settings
from tui.core.probes.concurrency import rescale_slots
from tui.core.probes.suites import Suite
from tui.core.tune.result import TuneResult


def why_no_ab(result: TuneResult, passes: int) -> str | None:
    """Why the tune cannot end with an A/B (stopped early, a side never measured, none asked), or None."""
    if result.stopped in ("cancelled", "budget"):
        return f"no A/B yet: the tune {'was cancelled' if result.stopped == 'cancelled' else 'ran out of budget'}; " \
               "it continues where it stopped when run again with the same settings."
    if result.best_mtp_on is None or result.best_mtp_off is None:
        return "no A/B: " + ("no MTP-on configuration was measured." if result.best_mtp_on is None else
                             "no MTP-off configuration was measured.")
    return "no A/B (--ab-passes 0)." if passes <= 0 else None


def saved_ab(known: dict[str, Any], load: int) -> tuple[AbVerdict | None, LoadVerdict | None]:
    """A verdict the journal kept: at a concurrency above 1 the levels it was stored with."""
    if load > 1:
        levels = LoadVerdict.from_json(known)
        return levels.at(load), levels
    return AbVerdict.from_json(known), None


def measure_ab(on: Settings, off: Settings, suite: Suite, shape: tuple[int, int], passes: int, load: int, *,
               exact_output: bool, launcher: Launcher, on_event: Callable[[LabEvent], None], cancel: Any,
               store: Any) -> tuple[AbVerdict | None, LoadVerdict | None]:
    """MTP off (`off`) against on (`on`), both as the tune launched them. At a concurrency above 1 the
    A/B runs at 1 and at `load` (`on`/`off` carry `load`'s slots; each level sets its own)."""
    if load > 1:
        levels = run_ab_levels(*mtp_sides(rescale_slots(on, load, 1), rescale_slots(off, load, 1)), suite, shape,
                               passes, levels_for(load), ignore_eos=exact_output, pair=MTP, launcher=launcher,
                               on_event=on_event, cancel=cancel, store=store)
        return levels.at(load), levels
    return run_ab(*mtp_sides(on, off), suite, shape, passes, pair=MTP, launcher=launcher,
                  prober=default_prober(exact_output), on_event=on_event, cancel=cancel, store=store), None
