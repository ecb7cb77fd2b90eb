"""THE ranking rule of mtp-tune: "better/worse", "the same within the noise", "best" and "cheaper",
used by the sweep table, the tuner's race, the tune's result and (through the same primitive) the
MTP on/off verdict.

Why one rule: the sweep, the race, the tune result and the A/B verdict each had their own, and users
saw them disagree (a tune's JSON said MTP on and off were "the same within the noise" while its own
final A/B said "MTP loses, +88 % time"). Now:

* **better / worse / same / inconclusive** is `probes.stats.verdict`, the one primitive, in three
  zones: ranges overlap -> `same`; ranges apart and the change beyond the noise -> `better`/`worse`;
  ranges apart but the change within the noise -> `inconclusive`; fewer than 2 samples -> `inconclusive`.
  The race used to depart from the verdict on purpose, because the verdict's old `same` also covered
  "ranges apart but the change is within the noise": one slow pass of the leader then tied a
  candidate 11 % slower in median with no pass as fast as the leader's slowest (bench/RESULTS.md).
  Calling that middle zone `inconclusive` keeps the verdict's strictness for `better`/`worse` and
  makes `same` exactly the race's tie (overlapping ranges), so one rule serves both.
* **the leader** of a set is its candidate with the best median (lowest time, highest speed),
  preferring those measured fully (a 2-pass median is a weaker claim than a 4-pass one).
* **ties** of the leader are the candidates `same` as it (the leader included).
* **cheaper** is `cost_order`: MTP off before on, the smaller micro-batch, less VRAM, the shorter
  draft, then the better median.
* **best** is the cheapest of the leader's ties. Choosing among those tied with the fastest, rather
  than chaining "same as the last winner", keeps a run of small losses from adding up to a real one.

`next_step` is the tuner's racing schedule inside one launch: a candidate first gets `rungs[0]`
passes; if it is already worse than the leader, or its range lies wholly above the leader's, or it is
the same but neither faster nor cheaper, it cannot win and stops; otherwise (it leads, may win the
tie, or the noise is unknown) it gets the next rung's passes while the server is still up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from tui.core.probes.stats import BETTER, INCONCLUSIVE, SAME, WORSE, Summary, Verdict, verdict
from tui.core.lab.trial import Trial

T = TypeVar("T")

#: Passes per rung, cumulative: a short probe for everyone, the second rung for contenders.
RUNGS = (2, 4)


# --------------------------------------------------------------------------- the rule, for any candidate


def cost_order(*, mtp: bool, ubatch: int | None, vram_mib: float | None, draft_n_max: int | None,
               then: float | None) -> tuple[Any, ...]:
    """Cheaper and more robust first: MTP off, smaller micro-batch, less VRAM (64 MiB steps), shorter
    draft, then `then` (lower first: the time, or minus a speed)."""
    vram = round(vram_mib / 64) if vram_mib is not None else 0
    return (mtp, ubatch or 512, vram, (draft_n_max or 0) if mtp else 0, float("inf") if then is None else then)


def leader_of(cands: Iterable[T], score: Callable[[T], Summary | None], *, higher_is_better: bool,
              full: int | None = None) -> T | None:
    """The candidate with the best median score, preferring those with at least `full` samples; the
    first in order wins an exact tie."""
    pool = [(c, s) for c in cands if (s := score(c)) is not None]
    pool = [(c, s) for c, s in pool if full is not None and s.n >= full] or pool
    sign = -1.0 if higher_is_better else 1.0
    return min(pool, key=lambda cs: sign * cs[1].median)[0] if pool else None


def tied_with(cands: Iterable[T], lead: T, score: Callable[[T], Summary | None], *, higher_is_better: bool) -> list[T]:
    """The candidates the same as `lead` within the noise, `lead` first."""
    ref = score(lead)
    return [lead, *(c for c in cands if c is not lead and verdict(ref, score(c), higher_is_better).label == SAME)]


def best_of(cands: Sequence[T], score: Callable[[T], Summary | None], cost: Callable[[T], tuple[Any, ...]], *,
            higher_is_better: bool, full: int | None = None) -> tuple[T | None, T | None, list[T]]:
    """(best, leader, the others within the noise of the leader): the cheapest of the leader's ties wins."""
    lead = leader_of(cands, score, higher_is_better=higher_is_better, full=full)
    if lead is None:
        return None, None, []
    tied = tied_with(cands, lead, score, higher_is_better=higher_is_better)
    best = min(tied, key=cost)
    return best, lead, [c for c in tied if c is not best]


# --------------------------------------------------------------------------- the tune's trials


def versus(ref: Trial, cand: Trial) -> Verdict:
    """`cand` judged against `ref` on end-to-end seconds (better = faster)."""
    return verdict(ref.e2e(), cand.e2e(), higher_is_better=False)


def cost_key(r: Trial) -> tuple[Any, ...]:
    """`cost_order` of a trial, its number last (a stable order)."""
    return (*cost_order(mtp=r.mtp, ubatch=r.settings.get("ubatch_size"), vram_mib=r.vram_mib,
                        draft_n_max=r.settings.get("spec_draft_n_max"), then=r.median()), r.number)


def _racing(records: Iterable[Trial]) -> list[Trial]:
    return [r for r in records if r.measured and r.status == "ok"]


def leader(records: Iterable[Trial], rungs: Sequence[int] = RUNGS) -> Trial | None:
    """The measured candidate with the lowest median e2e, preferring those at the last rung."""
    return leader_of(_racing(records), Trial.e2e, higher_is_better=False, full=rungs[-1])


def choose(records: Sequence[Trial], rungs: Sequence[int] = RUNGS) -> tuple[Trial | None, list[Trial]]:
    """(the best, the others within the noise of the fastest): the cheapest of the tied wins."""
    best, _, same = best_of(_racing(records), Trial.e2e, cost_key, higher_is_better=False, full=rungs[-1])
    return best, same


def next_step(ref: Trial | None, cand: Trial, rungs: Sequence[int] = RUNGS) -> tuple[int, str]:
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
    if v.label == INCONCLUSIVE and v.noise is None:
        return nxt - n, "noise unknown"
    slower = (cand.median() or 0) >= (ref.median() or 0)
    if v.label == INCONCLUSIVE:  # ranges apart, the change within the noise
        if slower:
            return 0, f"slower than #{ref.number} with no pass as fast as its slowest: it cannot tie"
        return nxt - n, f"faster than #{ref.number} within the noise: confirm"
    if slower and cost_key(cand)[:4] >= cost_key(ref)[:4]:
        return 0, f"same as #{ref.number} within the noise and not cheaper: it cannot win"
    return nxt - n, f"same as #{ref.number} within the noise: it may win the tie"


def verdict_json(ref: Trial | None, cand: Trial) -> dict[str, Any] | None:
    """The record's verdict against its side's leader, for the report."""
    if ref is None or ref is cand:
        return {"against": None, "label": "leader"}
    v = versus(ref, cand)
    return {"against": ref.number, **v.to_json()}


def pareto(records: Iterable[Trial]) -> list[Trial]:
    """Measured candidates no other beats on both PP and TG medians (the PP-vs-TG front), by PP."""
    pts = [(r, r.median("pp_tps"), r.median("tg_tps")) for r in records if r.measured]
    pts = [(r, p, t) for r, p, t in pts if p is not None and t is not None]
    front = [r for r, p, t in pts
             if not any((p2 >= p and t2 >= t) and (p2 > p or t2 > t) for _, p2, t2 in pts)]
    return sorted(front, key=lambda r: r.median("pp_tps") or 0.0)


__all__ = ["BETTER", "INCONCLUSIVE", "RUNGS", "SAME", "WORSE", "best_of", "choose", "cost_key", "cost_order", "leader",
           "leader_of", "next_step", "pareto", "tied_with", "verdict_json", "versus"]
