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


@dataclass(frozen=True)
class CompareView:
    """Run B judged against run A: the metric rows, the settings that differ and the notes under them.

    `changes`: each differing option as llama-server spells it (`--spec-type (not given) → draft-mtp`),
    defaults resolved, so `()` means the two ran the same server; None when not known (a fixed preview).
    """

    rows: tuple[CompareRow, ...]
    changes: tuple[str, ...] | None
    note: str


@dataclass(frozen=True)
class RunDetail:
    """One stored run opened from the runs table: what ran, what it measured, and every note in full."""

    run_id: int | str
    title: str
    facts: tuple[str, ...]
    command: str
    measurements: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]
    #: Acceptance by draft position, the advised n-max and the advice (`core.probes.draft_advice`);
    #: empty for a run without drafts or /metrics, or stored before positions were recorded.
    positions: tuple[float, ...] = ()
    advised_n_max: int | None = None
    advice: str = ""
