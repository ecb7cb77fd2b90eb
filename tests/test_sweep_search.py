"""The knob search (galloping, then bisection to one step) against scripted outcomes."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tui.core.lab.knob import KnobFinding, KnobTry, ctx_start, fit_target_limit, search_knob


def fit_world(bound: int, overshoot_from: int | None = None) -> tuple[list[int], object]:
    """fit-target v works when bound <= v (< overshoot_from, where fit gives up)."""
    tried: list[int] = []

    def attempt(v: int) -> KnobTry:
        tried.append(v)
        if overshoot_from is not None and v >= overshoot_from:
            return KnobTry(v, "overshoot", "fit cannot keep that much free")
        return KnobTry(v, "ok" if v >= bound else "oom")

    return tried, attempt


@given(bound_steps=st.integers(min_value=1, max_value=300))
@settings(max_examples=60, deadline=None)
def test_finds_the_smallest_working_fit_target_to_one_step(bound_steps: int) -> None:
    start, step = 1024, 64
    bound = start + bound_steps * step - 10  # somewhere inside a step
    tried, attempt = fit_world(bound)
    f = search_knob("fit_target", attempt, start=start, step=step, limit=start + 400 * step)  # type: ignore[arg-type]
    assert f.converged and f.value is not None
    assert f.value >= bound and f.value - step < bound  # one step resolution
    assert len(tried) == len(set(tried))  # no value launched twice
    assert len(tried) <= 2 * 9 + 2  # gallop + bisection: logarithmic, not one launch per step
    assert f.to_json()["unit"] == "MiB" and f.flag == "--fit-target"
    assert KnobFinding.from_json(f.to_json()).to_json() == f.to_json()


def test_small_bound_is_found_by_plain_64_mib_steps() -> None:
    tried, attempt = fit_world(1024 + 64 * 2)
    f = search_knob("fit_target", attempt, start=1024, step=64, limit=8192)  # type: ignore[arg-type]
    assert f.value == 1152 and tried == [1088, 1152]
    assert "smallest --fit-target" in f.message and "1088 fails" in f.message


def test_overshoot_narrows_but_is_never_the_answer() -> None:
    # Works in [3000, 3500): above, fit cannot meet the target and gives up.
    tried, attempt = fit_world(3000, overshoot_from=3500)
    f = search_knob("fit_target", attempt, start=1024, step=64, limit=20000)  # type: ignore[arg-type]
    assert f.converged and 3000 <= f.value < 3064  # type: ignore[operator]
    tried2, attempt2 = fit_world(3490, overshoot_from=3400)  # empty window
    f2 = search_knob("fit_target", attempt2, start=1024, step=64, limit=20000)  # type: ignore[arg-type]
    assert not f2.converged and f2.value is None and "no value works" in f2.message


def test_nothing_in_range_works() -> None:
    tried, attempt = fit_world(10**9)
    f = search_knob("fit_target", attempt, start=1024, step=64, limit=2048)  # type: ignore[arg-type]
    assert not f.converged and "still out of memory" in f.message
    assert max(tried) == 2048


def test_other_failures_stop_the_search() -> None:
    def attempt(v: int) -> KnobTry:
        return KnobTry(v, "failed", "unknown option --foo") if v > 1100 else KnobTry(v, "oom")

    f = search_knob("fit_target", attempt, start=1024, step=64, limit=8192)  # type: ignore[arg-type]
    assert not f.converged and "unknown option --foo" in f.message and "does not fix" in f.message


def test_ctx_search_goes_down_and_finds_the_largest_context() -> None:
    fits = 100_000

    def attempt(v: int) -> KnobTry:
        return KnobTry(v, "ok" if v <= fits else "oom")

    start = ctx_start(262144, None)
    f = search_knob("ctx_size", attempt, start=start, step=256, limit=256)  # type: ignore[arg-type]
    assert f.converged and f.value is not None
    assert f.value <= fits < f.value + 256 and f.value % 256 == 0
    assert "largest --ctx-size" in f.message and f.unit == "tokens"


def test_cancel_and_trial_budget() -> None:
    cancel = threading.Event()

    def attempt(v: int) -> KnobTry:
        if v >= 1216:
            cancel.set()
        return KnobTry(v, "oom")

    f = search_knob("fit_target", attempt, start=1024, step=64, limit=8192, cancel=cancel)  # type: ignore[arg-type]
    assert not f.converged and f.message == "search cancelled." and [t.value for t in f.trials] == [1088, 1152, 1280]
    seen: list[KnobTry] = []
    f2 = search_knob("fit_target", lambda v: KnobTry(v, "oom" if v < 5000 else "ok"), start=1024, step=1, limit=10**6,
                     max_trials=5, on_trial=seen.append)  # type: ignore[arg-type]
    assert not f2.converged and "after 5 launches" in f2.message and len(seen) == 5


def test_no_room() -> None:
    f = search_knob("fit_target", lambda v: KnobTry(v, "ok"), start=4096, step=64, limit=4100)  # type: ignore[arg-type]
    assert not f.converged and "no room" in f.message and f.trials == []
    with pytest.raises(ValueError):
        search_knob("fit_target", lambda v: KnobTry(v, "ok"), start=0, step=0, limit=10)  # type: ignore[arg-type]


def test_helpers() -> None:
    assert fit_target_limit([8000, 24000]) == 24000 and fit_target_limit([]) == 65536
    assert ctx_start(None, 4100) == 4096 and ctx_start(None, 4000) == 3840 and ctx_start(8192, 4096) == 8192 and ctx_start(None, None) == 4096


def test_a_context_search_starts_at_half_the_context() -> None:
    tried: list[int] = []

    def attempt(v: int) -> KnobTry:
        tried.append(v)
        return KnobTry(v, "ok" if v <= 200_000 else "oom")

    f = search_knob("ctx_size", attempt, start=262144, step=256, limit=256, first_jump=511)  # type: ignore[arg-type]
    assert tried[0] == 262144 - 511 * 256 and f.converged and f.value == 199936
    assert len(tried) <= 11
