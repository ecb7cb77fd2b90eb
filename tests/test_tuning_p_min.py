"""Draft p-min joins the tune's axes only where it pays: when the MTP side's leader rarely accepts its last
draft position (`space.Space.add_p_min`). Pure checks of the rule, then the search on a fake machine whose
per-position figures and speed depend on p-min alone (a virtual clock, a fixed per-pass spread)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from tests.helpers.fake_machine import FakeBackendBase
from tui.core.lab.launcher import LaunchOutcome
from tui.core.lab.trial import Samples, Trial
from tui.core.options.settings import Settings
from tui.core.probes.positions import DraftPositions
from tui.core.tune.machine import Machine
from tui.core.tune.result import position_lines, settings_text
from tui.core.tune.search import TuneOptions, tune
from tui.core.tune.space import LATE_SHARE, P_MIN_VALUES, build_space
from tui.core.tune.workload import shape

WL = shape(100, 100)
#: Everything fixed, MTP on and n-max 3: the only axis a tune can add is p-min.
FIXED = Settings(model="m.gguf", spec_type=["draft-mtp"], spec_draft_n_max=3, ubatch_size=512, batch_size=2048,
                 cache_type_k="f16", cache_type_v="f16", cache_type_k_draft="f16", cache_type_v_draft="f16",
                 flash_attn="auto")


def leader(accepted: tuple[int, ...] | None, number: int = 1) -> Trial:
    pos = None if accepted is None else DraftPositions(100, 100 * len(accepted), accepted).to_json()
    return Trial("k", "ok", number=number, mtp=True, samples=Samples([1.0], [1.0], [0.5], [1.0], positions=pos))


def test_rarely_accepted_late_positions_add_the_axis_once() -> None:
    space = build_space(FIXED, WL, has_mtp=True)
    before = space.point({}, True)
    assert space.add_p_min(leader((80, 40, 10)))  # position 3 accepted in 10 % of drafts
    ax = space.axes[-1]
    assert (ax.name, ax.fields, ax.values, ax.start, ax.ordered, ax.mtp_only) == (
        "draft-p-min", ("spec_draft_p_min",), P_MIN_VALUES, None, True, True)
    assert any("draft p-min searched: #1" in n and "10 %" in n for n in space.notes)
    # What was measured keeps its launch; a p-min is a new launch with the same memory (no new fit-target).
    assert space.point({}, True).key == before.key
    c = space.point({"draft-p-min": 0.75}, True)
    assert c.settings.spec_draft_p_min == 0.75 and c.key != before.key and c.memory_key == before.memory_key
    assert c.invalid is None
    assert not space.add_p_min(leader((80, 40, 10)))  # once


def test_no_axis_where_p_min_cannot_pay_or_is_not_ours() -> None:
    share_at_limit = round(100 * LATE_SHARE)
    for rec in (leader((90, 80, 60)), leader((90, 50, share_at_limit)), leader(None), None):
        assert not build_space(FIXED, WL, has_mtp=True).add_p_min(rec)
    fixed_p_min = build_space(replace(FIXED, spec_draft_p_min=0.5), WL, has_mtp=True)
    assert not fixed_p_min.add_p_min(leader((80, 40, 10)))  # the user's flag stays fixed
    no_mtp = build_space(Settings(model="m.gguf"), WL, has_mtp=False)
    assert not no_mtp.add_p_min(leader((80, 40, 10)))


class PMinMachine(FakeBackendBase):
    """Seconds per request by p-min, the same accepted tokens per position at every p-min."""

    def __init__(self, seconds: dict[float | None, float], accepted: tuple[int, ...]) -> None:
        self.seconds, self.accepted, self.now = seconds, accepted, 0.0
        self.current: Settings | None = None
        self.launched: list[float | None] = []

    def launch(self, s: Settings, cancel: threading.Event) -> LaunchOutcome:
        self.now += 10.0
        self.current = s
        self.launched.append(s.spec_draft_p_min)
        return LaunchOutcome(True, url="http://fake")

    def measure(self, out: LaunchOutcome, wl: Any, n: int) -> Samples:
        assert self.current is not None
        pos = DraftPositions(100 * n, 300 * n, tuple(a * n for a in self.accepted))
        return self.passes(self.seconds[self.current.spec_draft_p_min], n, Samples(positions=pos.to_json()))

    def machine(self) -> Machine:
        return Machine(self, self.measure, None, None, lambda: self.now)


def test_the_search_walks_p_min_when_the_last_position_is_rarely_accepted() -> None:
    fake = PMinMachine({None: 1.0, 0.5: 0.9, 0.75: 0.8, 0.9: 0.85}, (80, 40, 10))
    space = build_space(FIXED, WL, has_mtp=True)
    assert space.axes == ()  # nothing to search until the figures say so
    res = tune(space, WL, fake.machine(), TuneOptions())
    assert fake.launched == [None, 0.5, 0.75, 0.9]  # the ordered walk, up while each step leads
    assert res.best is not None and res.best.settings["spec_draft_p_min"] == 0.75, res.message
    assert res.best.samples is not None and DraftPositions.from_json(res.best.samples.positions) is not None


def test_the_search_leaves_p_min_alone_when_late_positions_are_accepted() -> None:
    fake = PMinMachine({None: 1.0, 0.5: 0.5, 0.75: 0.5, 0.9: 0.5}, (95, 90, 80))
    res = tune(build_space(FIXED, WL, has_mtp=True), WL, fake.machine(), TuneOptions())
    assert fake.launched == [None] and res.best is not None


def test_the_report_gives_the_best_mtp_trials_positions_and_advice() -> None:
    fake = PMinMachine({None: 1.0, 0.5: 0.9, 0.75: 0.8, 0.9: 0.85}, (80, 40, 10))
    res = tune(build_space(FIXED, WL, has_mtp=True), WL, fake.machine(), TuneOptions())
    assert res.best_mtp_on is not None
    lines = position_lines(res.best_mtp_on, None)
    assert lines[0].startswith(f"Acceptance by draft position (#{res.best_mtp_on.number}, ")
    assert "1: 80 %  2: 40 %  3: 10 %" in lines[0] and "assumed" in lines[0]  # no MTP-off trial: the cost is assumed
    assert position_lines(leader(None), None) == [] and position_lines(None, None) == []
    assert settings_text(res.best_mtp_on) == "p-min=0.75"
