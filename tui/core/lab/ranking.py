"""THE ranking rule of mtp-tune: "better/worse", "the same within the noise", "best" and "cheaper",
used by the sweep table, the tuner's race, the tune's result and (through the same primitive) the
A/B verdict (MTP on/off, or any two configurations or builds).

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

The A/B verdict (`decide`, `AbVerdict`) is built on the same primitive, from the per-pass samples
of an A/B run. Pure: `decide(samples, workload)` gives it, so a UI recomputes it for new input/output
lengths without running anything again. Each side's samples are its passes (one probe run per pass,
interleaved A B A B by `lab.ab.run_ab`); per pass the end-to-end time of one request is prompt / PP +
output / TG (`probes.compare.workload_view`), and B is called faster or slower only when the difference
is beyond the measured noise. Its label is the rule's own zone: `b_wins`, `b_loses`, `same` (the
ranges overlap: "the same within the noise", an answer) or `inconclusive` (ranges apart within the
noise, or too few passes). `Pair` names the sides: MTP off/on (`MTP`, where B winning reads "MTP
wins") or A/B (`AB`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

from tui.core.lab.trial import Trial
from tui.core.probes.breakeven import BreakEven, break_even
from tui.core.probes.compare import RunView, workload_view
from tui.core.probes.records import PassStats
from tui.core.probes.stats import (BETTER, INCONCLUSIVE, SAME, WORSE, Summary, Verdict, fmt_rel, fmt_summary, summarize,
                                   verdict)

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


# --------------------------------------------------------------------------- the A/B verdict


#: The verdict's label: B faster, B slower, the same within the noise, or neither said.
Label = Literal["b_wins", "b_loses", "same", "inconclusive"]
#: The workload a verdict starts with: a task-sized request (the TUI lets the user edit it).
DEFAULT_WORKLOAD = (1000, 500)


@dataclass(frozen=True)
class Pair:
    """What the two sides of an A/B are called: `a`/`b` their keys in the samples (stored in journals),
    `a_name`/`b_name` in words, `subject` what "wins" when B is faster ("MTP wins", "B wins")."""

    a: str
    b: str
    a_name: str
    b_name: str
    subject: str

    def name(self, side: str) -> str:
        return self.a_name if side == self.a else self.b_name

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Any) -> Pair:
        """A stored pair; a verdict stored before pairs existed is MTP off/on."""
        return cls(**{k: str(d[k]) for k in ("a", "b", "a_name", "b_name", "subject")}) if d else MTP


MTP = Pair("off", "on", "MTP off", "MTP on", "MTP")
AB = Pair("A", "B", "A", "B", "B")


@dataclass(frozen=True)
class PassSample:
    """One pass of one side (its `Pair` key): its PP, TG and acceptance (None when the pass measured none)."""

    side: str
    index: int  # the pass number of this side, from 0
    order: int  # its position in the interleaved sequence, from 0
    pp_tps: float | None
    tg_tps: float | None
    acceptance: float | None
    run_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PassSample:
        return cls(d["side"], int(d["index"]), int(d["order"]), d.get("pp_tps"), d.get("tg_tps"), d.get("acceptance"),
                   d.get("run_id"))


@dataclass(frozen=True)
class SideResult:
    """One side's numbers over its passes: median and range of each."""

    side: str
    name: str
    passes: int
    pp_tps: Summary | None
    tg_tps: Summary | None
    acceptance: Summary | None
    e2e_s: Summary | None  # seconds per request of the workload

    def to_json(self) -> dict[str, Any]:
        return {"side": self.side, "name": self.name, "passes": self.passes,
                **{k: (getattr(self, k).to_json() if getattr(self, k) else None)
                   for k in ("pp_tps", "tg_tps", "acceptance", "e2e_s")}}


@dataclass
class AbVerdict:
    """B against A for one workload. `label` is the answer; `answer` says it in words, with what differs."""

    workload: tuple[int, int]  # (input tokens, output tokens) per request
    samples: list[PassSample]
    a: SideResult
    b: SideResult
    pp: Verdict  # B judged against A, per metric
    tg: Verdict
    e2e: Verdict  # lower is better
    break_even: BreakEven
    label: Label
    answer: str
    status: str = "complete"  # complete | cancelled | failed
    error: str | None = None
    settings: dict[str, Any] | None = None  # each side's settings, {"a": ..., "b": ...} (redacted)
    run_ids: list[int] = field(default_factory=list)
    pair: Pair = MTP
    differs: tuple[str, ...] = ()  # what differs between the sides: flags in llama-server's spelling, builds

    @property
    def conclusive(self) -> bool:
        """An answer was reached: B wins, B loses, or the two are the same within the noise."""
        return self.label != "inconclusive"

    @property
    def headline(self) -> str:
        """The label in words: `MTP wins`, `B loses`, `the same within the noise`, `inconclusive`."""
        return {"b_wins": f"{self.pair.subject} wins", "b_loses": f"{self.pair.subject} loses",
                "same": "the same within the noise"}.get(self.label, "inconclusive")

    def for_workload(self, prompt_tokens: int, output_tokens: int) -> AbVerdict:
        """The same samples judged for another request shape (nothing is run)."""
        return decide(self.samples, (prompt_tokens, output_tokens), status=self.status, error=self.error,
                      settings=self.settings, run_ids=self.run_ids, pair=self.pair, differs=self.differs)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": {"prompt_tokens": self.workload[0], "output_tokens": self.workload[1]},
            "label": self.label, "headline": self.headline, "answer": self.answer, "status": self.status,
            "error": self.error, "pair": self.pair.to_json(), "differs": list(self.differs),
            "a": self.a.to_json(), "b": self.b.to_json(),
            "pp": self.pp.to_json(), "tg": self.tg.to_json(), "e2e": self.e2e.to_json(),
            "break_even": self.break_even.to_json(), "samples": [s.to_json() for s in self.samples],
            "settings": self.settings, "run_ids": list(self.run_ids),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AbVerdict:
        w = d.get("workload") or {}
        return decide([PassSample.from_json(s) for s in d.get("samples") or []],
                      (int(w.get("prompt_tokens", DEFAULT_WORKLOAD[0])), int(w.get("output_tokens", DEFAULT_WORKLOAD[1]))),
                      status=d.get("status", "complete"), error=d.get("error"), settings=d.get("settings"),
                      run_ids=list(d.get("run_ids") or []), pair=Pair.from_json(d.get("pair")),
                      differs=tuple(str(x) for x in d.get("differs") or ()))


def _view(samples: list[PassSample], side: str, pair: Pair) -> RunView:
    mine = [s for s in samples if s.side == side]
    passes = [PassStats(s.index, True, s.tg_tps, s.pp_tps, s.acceptance) for s in mine]
    mtp = side == MTP.b if pair == MTP else None
    return RunView(None, pair.name(side), mtp, "ok", None, None, None, None, passes, [])


def decide(samples: list[PassSample], workload: tuple[int, int] = DEFAULT_WORKLOAD, *, status: str = "complete",
           error: str | None = None, settings: dict[str, Any] | None = None,
           run_ids: list[int] | None = None, pair: Pair = MTP, differs: Sequence[str] = ()) -> AbVerdict:
    """The verdict for `workload` = (input tokens, output tokens) from the passes of both sides of `pair`."""
    n_in, n_out = int(workload[0]), int(workload[1])
    if n_in < 0 or n_out < 0:
        raise ValueError(f"workload: token counts must be >= 0, not {n_in} in / {n_out} out")
    a_v, b_v = _view(samples, pair.a, pair), _view(samples, pair.b, pair)
    wl = workload_view(a_v, b_v, n_in, n_out)
    a, b = (SideResult(side, pair.name(side), len(v.passes), summarize(v.samples("pp_tps")),
                       summarize(v.samples("tg_tps")), summarize(v.samples("acceptance")), e2e)
            for side, v, e2e in ((pair.a, a_v, wl.a), (pair.b, b_v, wl.b)))
    pp = verdict(a.pp_tps, b.pp_tps)
    tg = verdict(a.tg_tps, b.tg_tps)
    be = break_even(n_in, _med(a.pp_tps), _med(a.tg_tps), _med(b.pp_tps), _med(b.tg_tps))
    e2e = wl.verdict  # lower seconds are better
    label: Label = {BETTER: "b_wins", WORSE: "b_loses", SAME: "same"}.get(e2e.label, "inconclusive")  # type: ignore[assignment]
    v = AbVerdict((n_in, n_out), list(samples), a, b, pp, tg, e2e, be, label, "", status, error, settings,
                  list(run_ids or []), pair, tuple(differs))
    v.answer = _answer(v)
    return v


def _med(s: Summary | None) -> float | None:
    return s.median if s else None


def _break_even_text(v: AbVerdict, who: str) -> str:
    """The break-even, said as a lean of the medians when neither PP nor TG differs beyond the noise:
    otherwise "B wins for outputs longer than 666 tokens" would stand beside "the same within the noise"."""
    text = v.break_even.text(who)
    if v.break_even.wins == "unknown" or v.pp.label in (BETTER, WORSE) or v.tg.label in (BETTER, WORSE):
        return text
    return f"From the medians alone (PP and TG both within the noise): {text}"


def _answer(v: AbVerdict) -> str:
    """The verdict in words: the headline with both sides' times, PP and TG with each side's range and
    their own verdicts, the break-even, what differs, and how the run ended when it did not complete."""
    (n_in, n_out), a, b, e2e, who = v.workload, v.a, v.b, v.e2e, v.pair.subject
    shape = f"{n_in} tokens in, {n_out} out"
    if a.e2e_s is None or b.e2e_s is None:
        head = f"{shape}: not enough data (each side needs PP and TG from at least one pass)."
    else:
        times = f"{a.name} {fmt_summary(a.e2e_s, 2)} s, {b.name} {fmt_summary(b.e2e_s, 2)} s per request"
        if v.label == "same":
            head = f"{shape}: the same within the noise ({times}): {e2e.reason}."
        elif v.label == "inconclusive":
            head = f"{shape}: inconclusive ({times}): {e2e.reason}."
        elif v.label == "b_wins":
            head = f"{shape}: {who} wins ({times}, {fmt_rel(e2e.rel_change)} time, beyond the noise of {(e2e.noise or 0):.1%})."
        else:
            pp, tg = v.pp.rel_change or 0, v.tg.rel_change or 0
            why = ("the PP loss outweighs the TG gain" if tg > 0 and pp < 0 else "it is slower at generation" if tg < 0
                   else "it is slower")
            head = f"{shape}: {who} loses: {why} ({times}, {fmt_rel(e2e.rel_change)} time)."
    acc = f", acceptance {fmt_summary(a.acceptance, 2)} -> {fmt_summary(b.acceptance, 2)}" \
        if a.acceptance is not None and b.acceptance is not None else \
        "".join(f", {s.name} acceptance {fmt_summary(s.acceptance, 2)}" for s in (a, b) if s.acceptance is not None)
    parts = [head, f"PP {fmt_summary(a.pp_tps)} -> {fmt_summary(b.pp_tps)} t/s ({fmt_rel(v.pp.rel_change)}, {v.pp.label}), "
                   f"TG {fmt_summary(a.tg_tps)} -> {fmt_summary(b.tg_tps)} t/s ({fmt_rel(v.tg.rel_change)}, {v.tg.label}){acc}.",
             _break_even_text(v, who)]
    if v.differs:
        parts.append(f"{a.name} -> {b.name}: " + "; ".join(v.differs) + ".")
    if v.status != "complete":
        parts.append(f"The run {v.status}{': ' + v.error if v.error else ''}; only the passes done count.")
    return " ".join(parts)
