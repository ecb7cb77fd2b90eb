"""The tune's noise rule: which measured candidate leads, which are the same within the noise, and
which one wins a tie; and when a running candidate has been measured enough.

Every comparison is `probes.stats.verdict` on per-pass end-to-end seconds (lower is better), the
rule every comparison in mtp-tune uses. On top of it:

* The leader of a side (MTP on or off) is its measured candidate with the lowest median, preferring
  those measured to the last rung (a 2-pass median is a weaker claim than a 4-pass one).
* The best is the cheapest candidate tied with the leader (the leader included): MTP off before on,
  then the smaller micro-batch, then less VRAM, then the shorter draft, then the lower median. A tie
  is a range that overlaps the leader's, not the verdict's wider "change below the two ranges laid
  end to end": with that, one slow pass of the leader tied a candidate 11 % slower in median with no
  pass as fast as the leader's slowest (bench/RESULTS.md, tune against the grid). Choosing among
  the candidates tied with the fastest, rather than chaining "same as the last winner", keeps a run
  of small losses from adding up to a real one.
* `next_step` is the racing schedule inside one launch: a candidate first gets `rungs[0]` passes; if
  the verdict already calls it slower than the leader, it stops there (`eliminated`); if it is the
  same within the noise but neither faster nor cheaper, it cannot win and stops too; otherwise (it
  leads, or it may win the tie, or the noise is unknown) it gets the next rung's passes, while the
  server is still up. Extra passes cost seconds; only a relaunch costs a restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tui.core.probes.stats import BETTER, INCONCLUSIVE, SAME, WORSE, Verdict, verdict
from tui.core.tuning.trials import TrialRecord

#: Passes per rung, cumulative: a short probe for everyone, the second rung for contenders.
RUNGS = (2, 4)


def versus(ref: TrialRecord, cand: TrialRecord) -> Verdict:
    """`cand` judged against `ref` on end-to-end seconds (better = faster)."""
    return verdict(ref.e2e(), cand.e2e(), higher_is_better=False)


def cost_key(r: TrialRecord) -> tuple[Any, ...]:
    """Cheaper and more robust first: MTP off, smaller micro-batch, less VRAM, shorter draft."""
    ub = r.settings.get("ubatch_size") or 512
    vram = round(r.vram_mib / 64) if r.vram_mib is not None else 0
    n_max = (r.settings.get("spec_draft_n_max") or 0) if r.mtp else 0
    return (r.mtp, ub, vram, n_max, r.median() if r.median() is not None else float("inf"), r.number)


def leader(records: Iterable[TrialRecord], rungs: Sequence[int] = RUNGS) -> TrialRecord | None:
    """The measured candidate with the lowest median e2e, preferring those at the last rung."""
    measured = [r for r in records if r.measured and r.status == "ok"]
    full = [r for r in measured if r.samples is not None and r.samples.n >= rungs[-1]]
    pool = full or measured
    return min(pool, key=lambda r: (r.median(), r.number)) if pool else None  # type: ignore[arg-type, return-value]


def overlaps(a: TrialRecord, b: TrialRecord) -> bool:
    """Whether the per-pass e2e ranges of `a` and `b` (two passes or more each) overlap."""
    ea, eb = a.e2e(), b.e2e()
    if ea is None or eb is None or ea.n < 2 or eb.n < 2:
        return False
    return eb.min <= ea.max and eb.max >= ea.min


def ties(records: Sequence[TrialRecord], lead: TrialRecord) -> list[TrialRecord]:
    """The measured candidates whose range overlaps the leader's (`lead` included)."""
    return [lead, *(r for r in records if r is not lead and r.measured and r.status == "ok" and overlaps(lead, r))]


def choose(records: Sequence[TrialRecord], rungs: Sequence[int] = RUNGS) -> tuple[TrialRecord | None, list[TrialRecord]]:
    """(the best, the others within the noise of the fastest): the cheapest of the tied wins."""
    lead = leader(records, rungs)
    if lead is None:
        return None, []
    tied = ties(records, lead)
    best = min(tied, key=cost_key)
    return best, [r for r in tied if r is not best]


def next_step(ref: TrialRecord | None, cand: TrialRecord, rungs: Sequence[int] = RUNGS) -> tuple[int, str]:
    """(passes to add now, why): 0 means the candidate has been measured enough."""
    n = cand.samples.n if cand.samples else 0
    nxt = next((r for r in rungs if r > n), None)
    if nxt is None:
        return 0, "measured to the last rung"
    if n == 0:
        return nxt, "short probe"
    if ref is None or ref is cand:
        return nxt - n, "it leads its side: confirm"
    v = versus(ref, cand)
    if v.label == WORSE:
        return 0, f"slower than #{ref.number}: {v.reason}"
    if v.label == BETTER:
        return nxt - n, f"faster than #{ref.number}: confirm"
    if v.label == INCONCLUSIVE:
        return nxt - n, "noise unknown"
    slower = (cand.median() or 0) >= (ref.median() or 0)
    if slower and not overlaps(ref, cand):
        return 0, f"slower than #{ref.number} with no pass as fast as its slowest: it cannot tie"
    if slower and cost_key(cand)[:4] >= cost_key(ref)[:4]:
        return 0, f"same as #{ref.number} within the noise and not cheaper: it cannot win"
    return nxt - n, f"same as #{ref.number} within the noise: it may win the tie"


def verdict_json(ref: TrialRecord | None, cand: TrialRecord) -> dict[str, Any] | None:
    """The record's verdict against its side's leader, for the report."""
    if ref is None or ref is cand:
        return {"against": None, "label": "leader"}
    v = versus(ref, cand)
    return {"against": ref.number, **v.to_json()}


def pareto(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """Measured candidates no other beats on both PP and TG medians (the PP-vs-TG front), by PP."""
    pts = [(r, r.median("pp_tps"), r.median("tg_tps")) for r in records if r.measured]
    pts = [(r, p, t) for r, p, t in pts if p is not None and t is not None]
    front = [r for r, p, t in pts
             if not any((p2 >= p and t2 >= t) and (p2 > p or t2 > t) for _, p2, t2 in pts)]
    return sorted(front, key=lambda r: r.median("pp_tps") or 0.0)


__all__ = ["RUNGS", "choose", "cost_key", "leader", "next_step", "overlaps", "pareto", "ties", "verdict_json", "versus",
           "BETTER", "SAME", "WORSE"]
