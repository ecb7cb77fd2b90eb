"""Medians, ranges and a verdict that only calls a difference when it is bigger than the measured noise.

The rule (documented here because every comparison in mtp-tune uses it):

* Each side is a list of repeated measurements of the same thing (e.g. TG t/s of one suite pass, repeated).
* `spread` of a side is its relative range, (max - min) / median. The *noise* of a comparison is the
  combined range of both sides relative to A's median: ((max_a - min_a) + (max_b - min_b)) / median_a.
* The verdict has three zones:
  1. the two ranges [min, max] overlap -> `same` ("within the noise");
  2. the ranges are apart AND the relative difference of the medians, (median_b - median_a) / median_a,
     exceeds the noise (the medians are further apart than the two ranges laid end to end) ->
     `better` / `worse`;
  3. the ranges are apart but the change is not beyond the noise -> `inconclusive` ("ranges apart but
     the change is within the noise"): neither a real difference nor a tie.
  All conditions are symmetric, so swapping A and B swaps better and worse and never changes the rest.
* With fewer than 2 samples on either side the noise cannot be measured and the verdict is
  `inconclusive`, whatever the numbers say: a single run has crowned the wrong setting often enough.

Why the middle zone is not `same`: one slow pass widens the noise so far that two settings whose
ranges do not even touch (one 11 % slower in median, no pass of it as fast as the other's slowest)
were called the same, and a tune then said "the same within the noise" beside an A/B that said "MTP
loses". `same` is kept for ranges that overlap, which is also what ranking ties on
(`lab.ranking`, the one place that says "best" and "cheaper").

Why this strict: with 3 repeats per side and no real change, non-overlapping ranges happen by chance
1 time in 10; with the second condition, about 1.4 times in 100 (5 repeats: well under 1 in 1000), while a
shift of 5 standard deviations is still called 85 % of the time with 3 repeats and always with 5.
Deterministic quantities (acceptance under greedy sampling) have zero spread, so any change in them is
called, which is right.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import median as _median
from typing import Any

#: Verdict labels.
BETTER = "better"
WORSE = "worse"
SAME = "same"
INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Summary:
    """Median, range and relative spread of repeated measurements."""

    n: int
    median: float
    min: float
    max: float

    @property
    def spread(self) -> float:
        """(max - min) / median; 0 for a single sample, inf when the median is 0 but values differ."""
        if self.n < 2 or self.max == self.min:
            return 0.0
        if self.median == 0:
            return math.inf
        return (self.max - self.min) / abs(self.median)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["spread"] = None if math.isinf(self.spread) else self.spread
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> Summary | None:
        if not d:
            return None
        return cls(n=int(d["n"]), median=float(d["median"]), min=float(d["min"]), max=float(d["max"]))


def summarize(values: Sequence[float | None]) -> Summary | None:
    """Summary of the finite values, or None when there are none."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return None
    return Summary(n=len(vals), median=float(_median(vals)), min=min(vals), max=max(vals))


@dataclass(frozen=True)
class Verdict:
    """The outcome of comparing side A (baseline) with side B (candidate) for one metric."""

    label: str  # better | worse | same | inconclusive, from B's point of view
    rel_change: float | None  # (median_b - median_a) / median_a
    noise: float | None  # mean relative spread of both sides
    reason: str

    @property
    def is_real(self) -> bool:
        return self.label in (BETTER, WORSE)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if d["noise"] is not None and math.isinf(d["noise"]):
            d["noise"] = None
        return d


def verdict(a: Summary | None, b: Summary | None, higher_is_better: bool = True) -> Verdict:
    """Judge B against A with the rule in the module docstring."""
    if a is None or b is None:
        return Verdict(INCONCLUSIVE, None, None, "no data on one side")
    rel = (b.median - a.median) / abs(a.median) if a.median else None
    if a.n < 2 or b.n < 2:
        return Verdict(INCONCLUSIVE, rel, None, f"noise unknown: {min(a.n, b.n)} sample(s) on one side; repeat >= 3")
    if rel is None:
        return Verdict(INCONCLUSIVE, None, None, "baseline median is 0")
    noise = ((a.max - a.min) + (b.max - b.min)) / abs(a.median)
    overlap = not (b.min > a.max or b.max < a.min)
    if overlap:
        return Verdict(SAME, rel, noise, "ranges overlap")
    if abs(rel) <= noise:
        return Verdict(INCONCLUSIVE, rel, noise,
                       f"ranges apart but the change {abs(rel):.1%} is within the noise {noise:.1%}")
    up = rel > 0
    label = BETTER if up == higher_is_better else WORSE
    return Verdict(label, rel, noise, f"ranges apart and change {abs(rel):.1%} > noise {noise:.1%}")


def fmt_summary(s: Summary | None, digits: int = 1) -> str:
    """`123.4 [120.1-125.0]` for tables; `-` when missing."""
    if s is None:
        return "-"
    if s.n < 2:
        return f"{s.median:.{digits}f}"
    return f"{s.median:.{digits}f} [{s.min:.{digits}f}-{s.max:.{digits}f}]"


def fmt_rel(x: float | None) -> str:
    """`+12.3%` / `-4.0%` / `-`."""
    return "-" if x is None else f"{x:+.1%}"
