"""What a tune answers: the best configuration, the best with MTP off beside it, the ones within the
noise of the best, and the evidence (every record), with one paragraph that says it.

Kept apart from the loop so a report (CLI, TUI, `--json`) and a resume rebuild it from records
alone: `build_result(records, ...)` is pure. "Best" and "within the noise" are `lab.ranking`'s.

MTP on against off: when the tune ran its final interleaved A/B, the answer reports that verdict
(stronger evidence: both sides measured in turn on one machine state) instead of the trials' own
on/off comparison, so the message, `mtp_vs_off` and the A/B can never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tui.core.probes.stats import Summary, fmt_rel, fmt_summary
from tui.core.lab import ranking
from tui.core.lab.candidate import values_label
from tui.core.lab.trial import MEASURED, PRUNED, Trial
from tui.core.lab.verdict import MtpVerdict
from tui.core.tune.workload import Workload


@dataclass
class TuneResult:
    best: Trial | None
    best_mtp_off: Trial | None
    best_mtp_on: Trial | None
    same_as_best: list[Trial]
    records: list[Trial]
    launches: int  # server launches this run (fit-target searches included; resumed records cost none)
    grid_size: int  # valid candidates of the space: what a grid would launch at least once each
    stopped: str  # converged | complete (grid) | budget | cancelled
    elapsed_s: float
    message: str
    mtp_vs_off: dict[str, Any] | None = None  # the best MTP-on against the best MTP-off (stats verdict; "source": ab | trials)
    pareto: list[Trial] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.records:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        def num(r: Trial | None) -> int | None:
            return r.number if r else None

        return {"best": num(self.best), "best_mtp_off": num(self.best_mtp_off), "best_mtp_on": num(self.best_mtp_on),
                "same_as_best": [r.number for r in self.same_as_best], "launches": self.launches,
                "grid_size": self.grid_size, "stopped": self.stopped, "elapsed_s": round(self.elapsed_s, 3),
                "message": self.message, "mtp_vs_off": self.mtp_vs_off, "counts": self.counts(),
                "pareto": [r.number for r in self.pareto], "records": [r.to_json() for r in self.records]}


def fmt_seconds(s: Summary | None) -> str:
    """Seconds per request with three significant digits (`0.0123 [0.0120-0.0131]`), `-` when missing."""
    if s is None:
        return "-"
    m = abs(s.median)
    digits = 1 if m >= 10 else 2 if m >= 1 or m == 0 else min(6, 2 - math.floor(math.log10(m)))
    return fmt_summary(s, digits)


def _describe(r: Trial) -> str:
    fit = f" fit-target={r.fit_target}" if r.fit_target is not None else ""
    return f"#{r.number} ({values_label(r.values.items())}{fit}) at {fmt_seconds(r.e2e())} s per request"


def build_result(records: Sequence[Trial], rungs: Sequence[int], launches: int, grid_size: int, stopped: str,
                 elapsed_s: float, workload: Workload, ab: MtpVerdict | None = None) -> TuneResult:
    """The answer from the records (pure: a resume or a report calls it again); `ab`, the final
    interleaved A/B when there is one, decides "MTP on against off"."""
    best, same = ranking.choose(records, rungs)
    off, _ = ranking.choose([r for r in records if not r.mtp], rungs)
    on, _ = ranking.choose([r for r in records if r.mtp], rungs)
    vs = _mtp_vs_off(on, off, ab)
    parts: list[str] = []
    if best is None:
        parts.append(f"No configuration could be measured for {workload.label}.")
    else:
        parts.append(f"Best for {workload.label}: {_describe(best)}.")
        if same:
            parts.append("Within the noise of the fastest: " + ", ".join(f"#{r.number}" for r in same)
                         + "; the cheapest of them is chosen (MTP off, smaller micro-batch, less VRAM first).")
        if off is not None and off is not best:
            parts.append(f"Best with MTP off: {_describe(off)}.")
        if vs is not None:
            parts.append(_mtp_sentence(vs, ab))
    measured = sum(1 for r in records if r.status in MEASURED)
    pruned = sum(1 for r in records if r.status in PRUNED)
    failed = sum(1 for r in records if r.status == "failed")
    parts.append(f"{launches} launches; {measured} measured, {pruned} pruned without a launch, {failed} failed, "
                 f"of {grid_size} configurations.")
    if stopped == "budget":
        parts.append("The budget ran out: this is the best so far; run again to continue.")
    elif stopped == "cancelled":
        parts.append("Cancelled: this is the best so far.")
    return TuneResult(best, off, on, same, list(records), launches, grid_size, stopped, elapsed_s, " ".join(parts), vs,
                      ranking.pareto(records))


def _mtp_vs_off(on: Trial | None, off: Trial | None, ab: MtpVerdict | None) -> dict[str, Any] | None:
    """MTP on judged against off on seconds per request: the A/B's verdict when it ran, else the trials'."""
    if off is None or on is None:
        return None
    if ab is not None:
        return {"on": on.number, "off": off.number, "source": "ab", **ab.e2e.to_json()}
    return {"on": on.number, "off": off.number, "source": "trials", **ranking.versus(off, on).to_json()}


def _mtp_sentence(vs: dict[str, Any], ab: MtpVerdict | None) -> str:
    label = vs["label"]
    src = "" if ab is None else f" (interleaved A/B, {min(ab.off.passes, ab.on.passes)} passes each" + \
        ("" if ab.status == "complete" else f", {ab.status}") + ")"
    if label == ranking.SAME:
        said = "the same within the noise."
    elif label == ranking.INCONCLUSIVE:
        said = f"inconclusive ({vs['reason']})."
    else:
        said = ("MTP wins" if label == ranking.BETTER else "MTP loses") + f", {fmt_rel(vs['rel_change'])} time."
    return f"MTP on against off{src}: {said}"
