"""What a tune drives, as injected callables: a backend that launches, a probe, the planner and the
fit-target search. The real tune passes the sweep's `SupervisorBackend`, a probe run, `sweep.planning
.plan_check(exact=True)` and `searches.smallest_fit_target`; the tests pass a fake machine.

Every launch goes through `CountingBackend`, the fit-target searches' too, so the launch count (the
figure a tune is judged by) and the budget's pace are exact whatever the search does inside.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tui.core.options.settings import Settings
from tui.core.sweep.backend import Backend, LaunchOutcome
from tui.core.sweep.pace import Pace
from tui.core.sweep.planning import PlanCheck
from tui.core.tuning.searches import SearchResult
from tui.core.tuning.trials import Samples
from tui.core.tuning.workload import Workload

#: (the running launch, the workload, passes) -> that many passes of per-pass figures.
MeasureFn = Callable[[LaunchOutcome, Workload, int], Samples]
#: (settings, the backend to launch through, cancel) -> the smallest fit-target that survives a first
#: decode: `lambda s, be, ev: searches.smallest_fit_target(s, backend=be, cancel=ev)`.
FitSearch = Callable[[Settings, Backend, threading.Event], SearchResult]


@dataclass
class Machine:
    """`backend` launches (`sweep.backend.Backend`); `measure` probes the running server; `plan` is
    a `sweep.planning.PlanCheck`; `fit_search` is None without a GPU (nothing for --fit to do);
    `clock` is what the budget reads (a fake machine passes its own)."""

    backend: Backend
    measure: MeasureFn
    plan: PlanCheck | None = None
    fit_search: FitSearch | None = None
    clock: Callable[[], float] = time.monotonic
    on_launch: Callable[[Settings], None] | None = None  # told of each launch before it starts (progress)
    #: the machine's hygiene before a candidate's launch (no server of ours runs then): one sentence per
    #: problem that would make its numbers lie (another process on the GPU, throttled clocks).
    hygiene: Callable[[], list[str]] | None = None


class CountingBackend:
    """The machine's backend, counting and timing every launch (and telling `on_launch` first)."""

    def __init__(self, inner: Backend, clock: Callable[[], float], pace: Pace,
                 on_launch: Callable[[Settings], None] | None = None) -> None:
        self.inner, self.clock, self.pace, self.n, self.on_launch = inner, clock, pace, 0, on_launch

    def launch(self, settings: Settings, cancel: threading.Event) -> LaunchOutcome:
        if self.on_launch is not None:
            self.on_launch(settings)
        t = self.clock()
        out = self.inner.launch(settings, cancel)
        self.n += 1
        self.pace.launched(self.clock() - t)
        return out

    def stop(self) -> None:
        self.inner.stop()

    def close(self) -> None:
        self.inner.close()

    def failure(self) -> Any:
        return self.inner.failure()


@dataclass
class PaceWork:
    """What `sweep.pace.Pace` weighs for a tune: one unit per pass (it reads key, launch_key, n_predict)."""

    n_predict: int
    key: str = "next"
    launch_key: str = "next"
