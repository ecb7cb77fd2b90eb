"""What the runs screen draws: stored runs and a two-run comparison, filled by the runs controller."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunRow:
    """One stored probe run in the runs view."""

    run_id: int | str
    when: str
    config: str
    tg_median: float | None
    pp_median: float | None
    acceptance: float | None
    n: int
    warnings: int = 0
    failed: bool = False


@dataclass(frozen=True)
class CompareRow:
    """One metric of a two-run comparison."""

    metric: str
    a: str
    b: str
    change: str
    verdict: str
