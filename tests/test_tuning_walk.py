"""The axis walk steps over a plateau: an ordered axis whose next value only ties the leader may still
lead two values on (draft n-max 1 and 2 the same, 3 faster), so one tied step does not end the walk;
a slower step does. A fake machine whose seconds per request depend on draft n-max alone, no noise
beyond a fixed per-pass spread, a virtual clock."""

from __future__ import annotations

import threading
from typing import Any

from tests.helpers.fake_machine import FakeBackendBase
from tui.core.options.settings import Settings
from tui.core.lab.launcher import LaunchOutcome
from tui.core.tune.space import build_space
from tui.core.lab.trial import Samples
from tui.core.tune.machine import Machine
from tui.core.tune.search import TuneOptions, tune
from tui.core.tune.workload import shape

WL = shape(100, 100)
#: Everything but draft n-max fixed, MTP on (given), so the walk is of that one axis from n-max 1.
FIXED = Settings(model="m.gguf", spec_type=["draft-mtp"], ubatch_size=512, batch_size=2048, cache_type_k="f16",
                 cache_type_v="f16", cache_type_k_draft="f16", cache_type_v_draft="f16", flash_attn="auto")


class OneAxis(FakeBackendBase):
    """Seconds per request by n-max; each pass is the base time times a fixed spread pattern."""

    def __init__(self, seconds: dict[int, float]) -> None:
        self.seconds, self.now, self.current = seconds, 0.0, None
        self.launched: list[int] = []

    def launch(self, s: Settings, cancel: threading.Event) -> LaunchOutcome:
        self.now += 10.0
        self.current = s
        self.launched.append(int(s.spec_draft_n_max or 0))
        return LaunchOutcome(True, url="http://fake")

    def measure(self, out: LaunchOutcome, wl: Any, n: int) -> Samples:
        assert self.current is not None
        return self.passes(self.seconds[int(self.current.spec_draft_n_max or 0)], n, Samples())

    def machine(self) -> Machine:
        return Machine(self, self.measure, None, None, lambda: self.now)


def run(seconds: dict[int, float]) -> tuple[Any, OneAxis]:
    fake = OneAxis(seconds)
    space = build_space(FIXED, WL, has_mtp=True, values={"draft-n-max": (1, 2, 3, 4, 5, 6)})
    assert [a.name for a in space.axes] == ["draft-n-max"] and space.branches == (True,)
    return tune(space, WL, fake.machine(), TuneOptions()), fake


def test_a_tied_step_is_stepped_over_and_the_faster_value_past_it_found() -> None:
    res, fake = run({1: 1.00, 2: 1.002, 3: 0.80, 4: 0.801, 5: 0.90, 6: 1.0})
    assert res.best is not None and res.best.settings["spec_draft_n_max"] == 3, res.message
    assert 6 not in fake.launched  # n-max 5 was slower: the walk stopped there
    assert fake.launched[:5] == [1, 2, 3, 4, 5]


def test_two_tied_steps_in_a_row_end_the_direction() -> None:
    res, fake = run({1: 1.00, 2: 1.002, 3: 1.001, 4: 0.5, 5: 0.5, 6: 0.5})
    assert fake.launched == [1, 2, 3]  # a plateau of two: not stepped over (PLATEAU_STEPS = 1)
    assert res.best is not None and res.best.settings["spec_draft_n_max"] == 1


def test_a_slower_step_ends_the_direction_at_once() -> None:
    res, fake = run({1: 1.00, 2: 1.2, 3: 0.5, 4: 0.5, 5: 0.5, 6: 0.5})
    assert fake.launched == [1, 2]
    assert res.best is not None and res.best.settings["spec_draft_n_max"] == 1
