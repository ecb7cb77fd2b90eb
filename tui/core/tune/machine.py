"""What a tune drives, as injected callables: a launcher, a probe, the planner and the fit-target
search. The real tune passes the lab's launcher (`lab.launcher.open_launcher`), a probe run,
`lab.planning.plan_check(exact=True)` and `searches.smallest_fit_target`; the tests pass a fake machine.

The tuner wraps the launcher in `lab.launcher.CountingLauncher`, the fit-target searches' launches
included, so the launch count (the figure a tune is judged by) and the budget's pace are exact
whatever the search does inside.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tui.core.options.settings import Settings
from tui.core.lab.launcher import LaunchOutcome, Launcher
from tui.core.lab.planning import PlanCheck
from tui.core.lab.knobs import SearchResult
from tui.core.lab.trial import Samples
from tui.core.tune.workload import Workload

#: (the running launch, the workload, passes) -> that many passes of per-pass figures.
MeasureFn = Callable[[LaunchOutcome, Workload, int], Samples]
#: (settings, the launcher to launch through, cancel) -> the smallest fit-target that survives a first
#: decode: `lambda s, la, ev: searches.smallest_fit_target(s, launcher=la, cancel=ev)`.
FitSearch = Callable[[Settings, Launcher, threading.Event], SearchResult]


@dataclass
class Machine:
    """`launcher` launches (`lab.launcher.Launcher`); `measure` probes the running server; `plan` is
    a `lab.planning.PlanCheck`; `fit_search` is None without a GPU (nothing for --fit to do);
    `clock` is what the budget reads (a fake machine passes its own)."""

    launcher: Launcher
    measure: MeasureFn
    plan: PlanCheck | None = None
    fit_search: FitSearch | None = None
    clock: Callable[[], float] = time.monotonic
    on_launch: Callable[[Settings], None] | None = None  # told of each launch before it starts (progress)
    #: the machine's hygiene before a candidate's launch (no server of ours runs then): one sentence per
    #: problem that would make its numbers lie (another process on the GPU, throttled clocks).
    hygiene: Callable[[], list[str]] | None = None


@dataclass
class PaceWork:
    """What `lab.pace.Pace` weighs for a tune: one unit per pass (it reads key, launch_key, n_predict)."""

    n_predict: int
    key: str = "next"
    launch_key: str = "next"
