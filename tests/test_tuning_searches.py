"""The searches' decisions against a scripted backend: which way to search, the floor, refusals.
(The real-server runs are in tests/test_tuning_searches_real.py.)"""

from __future__ import annotations

import threading

from tui.core.options.settings import Settings
from tui.core.server.failures import Failure, FailureKind
from tui.core.lab.launcher import LaunchOutcome
from tui.core.lab.failures import knob_outcome
from tui.core.lab.knobs import smallest_fit_target


class Scripted:
    """fit-target v loads when v >= bound (device memory, so --fit can act)."""

    def __init__(self, bound: int, other_failure_below: int | None = None) -> None:
        self.bound, self.other = bound, other_failure_below
        self.launched: list[int] = []

    def launch(self, settings: Settings, cancel: threading.Event) -> LaunchOutcome:
        v = settings.fit_target[0] if settings.fit_target else 1024
        self.launched.append(v)
        if self.other is not None and v < self.other:
            return LaunchOutcome(False, failure=Failure(FailureKind.UNKNOWN, "unknown model architecture", None, ""))
        if v >= self.bound:
            return LaunchOutcome(True, url="http://127.0.0.1:1")
        return LaunchOutcome(False, failure=Failure(FailureKind.OOM_DEVICE, "cudaMalloc failed", None, ""),
                             memory_failure=True, memory_on_device=True, devices=[{"name": "CUDA0", "free_mib": 8192}])

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass

    def failure(self) -> Failure | None:
        return None


S = Settings(model="m.gguf")


def test_from_a_working_value_it_comes_down_to_the_bound() -> None:
    b = Scripted(bound=700)
    r = smallest_fit_target(S, launcher=b)  # default 1024 works
    assert r.value == 704 and r.settings is not None and r.settings.fit_target == [704]
    assert b.launched[0] == 1024 and 0 not in b.launched  # gallops down from 1024, not up from 0
    assert [(t.value, t.outcome) for t in r.trials][:3] == [(1024, "ok"), (960, "ok"), (896, "ok")]
    assert all(t.outcome == ("ok" if t.value >= 700 else "oom") for t in r.trials)  # real outcomes recorded


def test_from_a_failing_value_it_climbs_and_the_floor_can_be_the_answer() -> None:
    up = smallest_fit_target(Settings(model="m.gguf", fit_target=[1024]), launcher=Scripted(bound=1300))
    assert up.value == 1344 and up.trials[0].outcome == "oom" and "smallest --fit-target" in up.message
    floor = smallest_fit_target(S, launcher=Scripted(bound=0))
    assert floor.value == 0 and "works down to 0 MiB" in floor.message


def test_a_failure_the_knob_does_not_explain_stops() -> None:
    r = smallest_fit_target(S, launcher=Scripted(bound=0, other_failure_below=2000))
    assert not r.found and "does not explain" in r.message
    mid = smallest_fit_target(S, launcher=Scripted(bound=0, other_failure_below=900))
    assert mid.value == 960 and "the search stopped" in mid.message  # the smallest value that worked
    host = Scripted(bound=5000)
    host_failure = smallest_fit_target(Settings(model="m.gguf", fit=False), launcher=host)
    assert not host_failure.found and "--fit cannot help" in host_failure.message and host.launched == [1024]


def test_judge_names_each_outcome() -> None:
    assert knob_outcome("fit_target", LaunchOutcome(True))[0] == "ok"
    assert knob_outcome("fit_target", LaunchOutcome(False, cancelled=True))[0] == "cancelled"
    assert knob_outcome("fit_target", LaunchOutcome(False, fit_gave_up=True))[0] == "overshoot"
    assert knob_outcome("ctx_size", LaunchOutcome(False, fit_gave_up=True, memory_failure=True))[0] == "oom"
    crash = LaunchOutcome(False, failure=Failure(FailureKind.CRASH, "SIGSEGV", None, ""))
    assert knob_outcome("ctx_size", crash)[0] == "oom" and "only ctx-size changed" in knob_outcome("ctx_size", crash)[1]
