"""The verdict rule on constructed data: it calls a difference only when it exceeds the measured noise."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tui.core.probes.stats import (
    BETTER,
    INCONCLUSIVE,
    SAME,
    WORSE,
    Summary,
    fmt_rel,
    fmt_summary,
    summarize,
    verdict,
)


def test_summarize_median_range_spread() -> None:
    s = summarize([10.0, 12.0, 11.0, None, float("nan")])
    assert s == Summary(n=3, median=11.0, min=10.0, max=12.0)
    assert s.spread == pytest.approx(2 / 11)
    assert summarize([]) is None and summarize([None]) is None
    assert Summary(1, 5.0, 5.0, 5.0).spread == 0.0
    assert Summary.from_json(s.to_json()) == s


def test_real_improvement_is_called_better() -> None:
    # MTP off vs on, 3 passes each, ~1 % noise, +30 % TG: a real difference.
    a = summarize([31.0, 31.2, 30.9])
    b = summarize([40.9, 41.3, 41.0])
    v = verdict(a, b)
    assert v.label == BETTER and v.is_real
    assert v.rel_change == pytest.approx(41.0 / 31.0 - 1)
    assert v.noise == pytest.approx((0.3 + 0.4) / 31.0)


def test_real_regression_is_called_worse_and_lower_is_better_flips() -> None:
    a, b = summarize([1461, 1450, 1470]), summarize([470, 480, 465])  # PP drops with MTP
    assert verdict(a, b).label == WORSE
    assert verdict(a, b, higher_is_better=False).label == BETTER  # e.g. seconds per request


def test_overlapping_ranges_are_within_noise() -> None:
    # Medians differ by 3 % but the runs overlap: the classic "single run crowned the wrong setting".
    a = summarize([49.4, 52.0, 47.5])
    b = summarize([50.9, 48.8, 53.1])
    v = verdict(a, b)
    assert v.label == SAME and not v.is_real and "overlap" in v.reason


def test_separated_but_smaller_than_spread_is_inconclusive() -> None:
    # Ranges do not touch, but together they span 41 % of A's median while the shift is 12 %: not a
    # real difference, and not a tie either (the ranges are apart), so neither is claimed.
    a = summarize([90.0, 100.0, 110.0])
    b = summarize([111.0, 112.0, 132.0])
    assert b is not None and a is not None and b.min > a.max
    v = verdict(a, b)
    assert v.label == INCONCLUSIVE and not v.is_real and "ranges apart but the change" in v.reason
    assert "within the noise" in v.reason and v.noise is not None


def test_single_runs_are_inconclusive_even_when_far_apart() -> None:
    v = verdict(summarize([30.0]), summarize([60.0]))
    assert v.label == INCONCLUSIVE and v.rel_change == pytest.approx(1.0) and v.noise is None
    assert verdict(None, summarize([1.0, 2.0])).label == INCONCLUSIVE


def test_deterministic_metrics_with_zero_spread_are_called() -> None:
    # Greedy acceptance is identical across repeats; any change in it is real.
    assert verdict(summarize([0.78] * 3), summarize([0.72] * 3)).label == WORSE
    assert verdict(summarize([0.78] * 3), summarize([0.78] * 3)).label == SAME


def test_same_distribution_is_rarely_called() -> None:
    """Without a real difference, random noise is called at most rarely (the rule's false-alarm rate)."""
    rng = random.Random(7)
    called = 0
    trials = 2000
    for _ in range(trials):
        a = summarize([rng.gauss(100, 3) for _ in range(3)])
        b = summarize([rng.gauss(100, 3) for _ in range(3)])
        called += verdict(a, b).is_real
    # Non-overlap alone happens 10 % of the time for 3 vs 3; the noise condition cuts that to ~1.4 %.
    assert called / trials < 0.03


def test_a_shift_of_many_sigmas_is_almost_always_called() -> None:
    rng = random.Random(11)
    trials = 500
    called = sum(
        verdict(
            summarize([rng.gauss(100, 1) for _ in range(5)]), summarize([rng.gauss(120, 1) for _ in range(5)])
        ).label
        == BETTER
        for _ in range(trials)
    )
    assert called / trials > 0.98


finite = st.floats(min_value=1.0, max_value=1e4, allow_nan=False, allow_infinity=False)


@given(st.lists(finite, min_size=2, max_size=6), st.lists(finite, min_size=2, max_size=6))
def test_verdict_is_antisymmetric(xs: list[float], ys: list[float]) -> None:
    a, b = summarize(xs), summarize(ys)
    fwd, back = verdict(a, b).label, verdict(b, a).label
    mirror = {BETTER: WORSE, WORSE: BETTER, SAME: SAME, INCONCLUSIVE: INCONCLUSIVE}
    assert back == mirror[fwd]


@given(st.lists(finite, min_size=2, max_size=6))
def test_a_run_is_never_different_from_itself(xs: list[float]) -> None:
    s = summarize(xs)
    assert verdict(s, s).label == SAME


@given(st.lists(finite, min_size=2, max_size=6), st.lists(finite, min_size=2, max_size=6))
def test_called_differences_exceed_the_noise(xs: list[float], ys: list[float]) -> None:
    a, b = summarize(xs), summarize(ys)
    v = verdict(a, b)
    if v.is_real:
        assert a is not None and b is not None
        assert b.min > a.max or b.max < a.min
        assert v.rel_change is not None and v.noise is not None and abs(v.rel_change) > v.noise


def test_formatting() -> None:
    assert fmt_summary(Summary(3, 41.25, 40.0, 42.5)) == "41.2 [40.0-42.5]"
    assert fmt_summary(Summary(1, 41.25, 41.25, 41.25)) == "41.2"
    assert fmt_summary(None) == "-"
    assert fmt_rel(0.123) == "+12.3%" and fmt_rel(None) == "-"
    assert not math.isinf(Summary(2, 0.0, -1.0, 1.0).to_json()["spread"] or 0.0)
