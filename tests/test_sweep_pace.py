"""The experiments' ETA and budget check (`lab.events.Pace`): measured launch and generation rates, pure arithmetic,
and what the lab feeds it."""

from __future__ import annotations

import threading
import time

import pytest

from tui.core.lab.candidate import Candidate
from tui.core.lab.events import Pace, Progress, weight
from tui.core.lab.launcher import LaunchOutcome
from tui.core.lab.runner import Attempt, Lab, Step
from tui.core.options.settings import Settings


def row(key: str, launch_key: str, n_predict: int | None = 100) -> Candidate:
    return Candidate(Settings(model="m.gguf"), key, launch_key, key, n_predict=n_predict)


def test_nothing_measured_means_no_eta_and_nothing_left_means_zero() -> None:
    assert Pace().eta([row("a", "L1")], None) is None
    assert Pace().eta([], None) == 0.0
    assert weight(row("a", "L1", None)) == 512.0  # the probe's default n_predict


def test_eta_is_launches_left_plus_work_left_at_the_measured_rate() -> None:
    p = Pace()
    p.launched(10.0)
    p.launched(20.0)  # 15 s per launch
    p.worked(5.0, row("done", "L0", 100))  # 0.05 s per unit of n_predict
    left = [row("a", "L1", 100), row("b", "L1", 300), row("c", "L2", 100)]
    assert p.eta(left, None) == pytest.approx(2 * 15.0 + 500 * 0.05)


def test_the_running_probe_gives_the_rate_before_any_row_finished() -> None:
    p = Pace()
    cur = row("a", "L1", 100)
    started = time.monotonic() - 4.0  # 4 s for 2 of 4 requests
    eta = p.eta([cur, row("b", "L1", 100)], (cur, started, 2, 4))
    assert eta is not None and eta == pytest.approx(4.0 + 8.0, abs=0.5)  # its rest, then b at 8 s per 100


def test_the_budget_check_predicts_whether_the_next_group_fits() -> None:
    p = Pace()
    group = [row("a", "L1", 100)]
    assert not p.over_budget(group, 1e9, None)  # no budget
    assert p.over_budget(group, 60.0, 60.0)  # spent
    assert not p.over_budget(group, 30.0, 60.0)  # nothing measured yet: try it
    p.launched(20.0)
    p.worked(10.0, row("done", "L0", 100))
    assert p.over_budget(group, 31.0, 60.0)  # 31 + 20 + 10 > 60
    assert not p.over_budget(group, 29.0, 60.0)


def test_the_lab_paces_a_launch_group_once_with_its_fit_search_and_counts_every_launch() -> None:
    """A tune's candidate searches its fit-target (two launches) before its own launch: the pace's
    launch time is the whole group (30 s on the fake clock), not each launch again beside it (the
    counting launcher used to add 10 s entries too, so a group with a search read as 10 s)."""
    now = [0.0]

    class TenSecondLauncher:
        def launch(self, settings: Settings, cancel: threading.Event) -> LaunchOutcome:
            now[0] += 10.0
            return LaunchOutcome(False, failure=None)  # failed: nothing to measure, the group is what counts

        def stop(self) -> None: ...

        def close(self) -> None: ...

        def failure(self) -> None:
            return None

    cancel = threading.Event()
    lab = Lab(TenSecondLauncher(), cancel=cancel, progress=Progress(1, None), clock=lambda: now[0])

    def fit_search(a: Attempt) -> bool:  # two launches through the lab's launcher, as a tune's prepare makes
        lab.launcher.launch(a.settings, cancel)
        lab.launcher.launch(a.settings, cancel)
        return True

    step: Step[str] = Step(measure=None, passes=lambda a: 0, record=lambda a: a.status, prepare=fit_search,
                           recover=False, work=[row("a", "L1")])
    assert lab.trial(row("a", "L1"), step) == "failed"
    assert lab.launches == 3
    assert lab.pace.eta([row("b", "L2", None)], None) == pytest.approx(30.0)  # one group left: 30 s
