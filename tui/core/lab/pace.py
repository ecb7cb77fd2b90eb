"""The sweep's clock: the ETA and the time budget, from launch and generation times measured in this session.

A launch costs its mean measured time; generation costs seconds per unit of a row's weight (its
n_predict), so longer outputs count for more. Before any row finished, the running probe's own
progress gives the rate.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol


class Work(Protocol):
    """What the pace weighs of a candidate (a sweep's `candidate.Candidate`, a tune's passes)."""

    key: str
    launch_key: str
    n_predict: int | None


#: The row being probed: (configuration, monotonic start, requests done, requests in all).
Current = tuple[Work, float, int, int]


def weight(c: Work) -> float:
    """A row's generation work, in units the measured rate is per."""
    return float(c.n_predict or 512)


class Pace:
    """Measured launch and generation times; the ETA and the budget check read them."""

    def __init__(self) -> None:
        self._launch_s: list[float] = []
        self._work_s = 0.0
        self._work_done = 0.0

    def launched(self, seconds: float) -> None:
        self._launch_s.append(seconds)

    def worked(self, seconds: float, c: Work) -> None:
        self._work_s += seconds
        self._work_done += weight(c)

    def _mean_launch_s(self) -> float:
        return sum(self._launch_s) / len(self._launch_s) if self._launch_s else 0.0

    def eta(self, left: Sequence[Work], cur: Current | None) -> float | None:
        """Seconds left: mean launch time per launch left, plus generation work left at the
        measured seconds per token of n_predict (from finished rows, or the running probe)."""
        if not left:
            return 0.0
        per_w = self._work_s / self._work_done if self._work_done else None
        cur_left = 0.0
        if cur is not None:
            c, t0, done, total = cur
            if done and total:
                spent = time.monotonic() - t0
                if per_w is None:
                    per_w = spent / done * total / weight(c)
                cur_left = max(0.0, spent / done * (total - done))
        if per_w is None and not self._launch_s:
            return None
        others = [x for x in left if cur is None or x.key != cur[0].key]
        groups = len({x.launch_key for x in others if cur is None or x.launch_key != cur[0].launch_key})
        return round(groups * self._mean_launch_s() + sum(weight(x) for x in others) * (per_w or 0.0) + cur_left, 1)

    def over_budget(self, group: Sequence[Work], elapsed: float, budget: float | None) -> bool:
        """True when the budget is spent, or when this launch group would not finish inside it."""
        if budget is None:
            return False
        if elapsed >= budget:
            return True
        if self._launch_s or self._work_done:
            per_w = self._work_s / self._work_done if self._work_done else 0.0
            need = self._mean_launch_s() + sum(weight(c) for c in group) * per_w
            return elapsed + need > budget
        return False
