"""The budget clock: every step of the check asks it for a timeout, so a hang never eats device time.

A device call is killed at its limit; the check stops starting steps while it can still write its
results (`reserve_s`), and a step that needs more than is left is skipped with a reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class BudgetClock:
    """Seconds left of `total_s`, counted from construction; `reserve_s` is kept for writing results."""

    total_s: float
    reserve_s: float = 20.0
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=-1.0)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    @property
    def left(self) -> float:
        """Seconds a step may still use (the reserve excluded); never negative."""
        return max(0.0, self.total_s - self.reserve_s - self.elapsed)

    def allows(self, estimate_s: float) -> bool:
        """True when a step expected to take `estimate_s` fits in what is left."""
        return estimate_s <= self.left

    def timeout(self, wanted_s: float) -> float:
        """The timeout to give a step: what it wants, cut to what is left (at least 1 s)."""
        return max(1.0, min(wanted_s, self.left))

    def skip(self, step: str, estimate_s: float) -> bool:
        """Record and return True when `step` does not fit; False when it may run."""
        if self.allows(estimate_s):
            return False
        self.skipped.append({"step": step, "reason": f"needs ~{estimate_s:.0f} s, {self.left:.0f} s left"})
        return True
