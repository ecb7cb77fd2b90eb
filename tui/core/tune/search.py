"""The unattended search behind `mtp-tune tune`: the best configuration of a `Space` for a workload,
in far fewer launches than the grid, over injected callables so it runs on fakes as on a server.

Why a search and not a grid: every axis needs a restart (`space` says why), and a restart is the
cost. So the tune

1. prunes before launching: the one validator (in the space), an earlier out-of-memory failure of
   the same or a smaller memory footprint (`space.needs_at_least`), then the planner (exact mode in
   the real tune) for every candidate that gets this far; nothing predicted not to fit is launched;
2. on a GPU, runs the smallest-fit-target search once per memory key, seeded with the answer of the
   nearest memory key already known (two launches instead of a gallop from 1024 MiB);
3. races inside each launch (`ranking.next_step`): a short probe for all, more passes only for
   candidates that can still win, judged by the noise rule against their side's leader;
4. walks the axes one at a time from each side's leader (coordinate descent: ordered axes step
   while they improve, in the better direction only; the others try each value), cycling until
   every axis has been walked under the current leader without a change. MTP off and MTP on are
   two sides with a leader each, so the MTP-off best is known beside the overall best; the side
   that leads after the two starting points is walked first and seeds the other with its values.

Every candidate that gets past the pruning is one trial of the lab's one loop with the tune's hooks
(`trial.CandidateTrial`); the strategy here only proposes candidates and reads their records. An
out-of-memory failure kills its memory key and everything at or above it; the budget is checked
before each candidate, so the result is the best so far. `GridReference` runs every candidate
through the same trials to the last rung: the reference.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from tui.core.lab import ranking
from tui.core.lab.candidate import Axis, Candidate
from tui.core.lab.events import EventFn, Progress, new_cancel
from tui.core.lab.knob import FIT_STEP_MIB
from tui.core.lab.runner import Lab
from tui.core.lab.trial import Trial
from tui.core.options.settings import settings_json
from tui.core.tune.space import Space
from tui.core.tune.result import TuneResult, build_result
from tui.core.tune.machine import Machine
from tui.core.tune.trial import CandidateTrial, MemoryBook, TuneLab
from tui.core.tune.workload import Workload

#: Tied steps in a row an ordered axis' walk steps over before it gives up on a direction.
PLATEAU_STEPS = 1


@dataclass(frozen=True)
class TuneOptions:
    rungs: tuple[int, ...] = ranking.RUNGS
    budget_s: float | None = None
    max_cycles: int = 3  # walks of each axis per side, at most
    fit_step_mib: int = FIT_STEP_MIB
    start_tries: int = 6  # launches spent looking for a side's first runnable candidate

    def __post_init__(self) -> None:
        if not self.rungs or self.rungs[0] < 2 or list(self.rungs) != sorted(set(self.rungs)):
            raise ValueError(f"rungs {self.rungs}: give rising pass counts from 2 (the noise needs two passes).")


class _Stop(Exception):
    """The budget is spent or the tune was cancelled: keep what was measured."""


@dataclass
class Tuner:
    space: Space
    workload: Workload
    machine: Machine
    options: TuneOptions = field(default_factory=TuneOptions)
    previous: Iterable[Trial] = ()
    on_event: EventFn | None = None
    cancel: threading.Event | None = None

    #: Every candidate to the last rung, nothing eliminated (`GridReference`); the search races.
    full: ClassVar[bool] = False
    #: How a run that neither ran out of budget nor was cancelled ends.
    done: ClassVar[str] = "converged"

    def __post_init__(self) -> None:
        self._cancel = new_cancel(self.cancel)
        self.records: list[Trial] = []
        self._by_key: dict[str, Trial] = {}
        self._known = {r.key: r for r in self.previous}
        self._mem = MemoryBook()
        self._prog = Progress(0, self.on_event)
        m = self.machine
        self.lab = Lab(m.launcher, cancel=self._cancel, progress=self._prog, planner=m.plan,
                       fit_step_mib=self.options.fit_step_mib, budget_s=self.options.budget_s, clock=m.clock,
                       on_launch=m.on_launch)
        self._shared = TuneLab(self.lab, m, self.workload, self._mem, self.options.rungs,
                               m.fit_search is not None and not self.space.fit_fixed)
        for r in self._known.values():
            self._mem.learn(self.space.of(r), r)

    # ------------------------------------------------------------------ public

    @property
    def launches(self) -> int:
        """Server launches this run, fit-target searches included (resumed records cost none)."""
        return self.lab.launches

    def run(self) -> TuneResult:
        self.lab.restart_clock()
        stopped = self.done
        try:
            self._search()
        except _Stop as why:
            stopped = str(why)
        finally:
            self.lab.stop()
        res = build_result(self.records, self.options.rungs, self.launches, len(self.space.grid()), stopped,
                           self.lab.elapsed(), self.workload)
        self._prog.emit("finished", res.message)
        return res

    # ------------------------------------------------------------------ the search

    def _search(self) -> None:
        sides = self.space.branches
        for mtp in sides:
            self._establish(mtp, self.space.start(mtp))
        order = sorted(sides, key=lambda m: (self._median(m) is None, self._median(m) or 0.0, m))
        first = order[0]
        self._descend(first)
        for other in order[1:]:
            top, own = self._leader(first), self._leader(other)
            if top is not None:
                shared = {a.name for a in self.space.axes_for(other) if not a.mtp_only}
                seed = {**(own.values if own else self.space.start(other)),
                        **{k: v for k, v in top.values.items() if k in shared}}
                self._evaluate(self.space.point(seed, other), "seeded from the other side's leader")
            self._descend(other)

    def _establish(self, mtp: bool, values: dict[str, Any]) -> None:
        """Measure a side's start point, or the nearest candidate that runs when it cannot."""
        if self._evaluate(self.space.point(values, mtp), "start").measured:
            return
        launched = considered = 0
        for c in self.space.near(values, mtp):
            if c.key in self._by_key:
                continue
            rec = self._evaluate(c, "start: the nearest candidate that runs")
            considered += 1
            launched += 1 if rec.launches else 0
            if rec.measured or launched >= self.options.start_tries or considered >= 8 * self.options.start_tries:
                return

    def _descend(self, mtp: bool) -> None:
        """Walk each axis from the side's leader until a whole cycle changes nothing."""
        axes = self.space.axes_for(mtp)
        walked: dict[str, tuple[Any, ...]] = {}
        unchanged = i = 0
        while axes and unchanged < len(axes) and i < self.options.max_cycles * len(axes):
            ax = axes[i % len(axes)]
            i += 1
            lead = self._leader(mtp)
            if lead is None:
                return
            ctx = tuple(lead.values.get(a.name) for a in axes if a is not ax)
            if walked.get(ax.name) == ctx:
                unchanged += 1
                continue
            walked[ax.name] = ctx
            self._walk(ax, lead, mtp)
            unchanged = unchanged + 1 if self._leader(mtp) is lead else 0
        if mtp and self.space.add_p_min(self._leader(mtp)):  # late positions rarely accepted (`space`)
            self._descend(mtp)  # walks the new axis; the other axes' candidates are known records

    def _walk(self, ax: Axis, lead: Trial, mtp: bool) -> None:
        """Ordered axes step from the leader's value while each step leads, in the first direction
        that improves; the others try every value. A step tied with the leader (overlapping ranges)
        is a plateau, not a wall: up to `PLATEAU_STEPS` of them in a row are stepped over (draft
        n-max 1 and 2 often measure the same and 3 is faster); a slower step ends the direction."""
        base = {k: v for k, v in lead.values.items() if k != "mtp"}
        stage = f"walk {ax.name}"

        def at(v: Any) -> Trial:
            return self._evaluate(self.space.point({**base, ax.name: v}, mtp), stage)

        cur = base.get(ax.name, ax.start)
        if not ax.ordered:
            for v in ax.values:
                if v != cur:
                    at(v)
            return
        i0 = ax.values.index(cur)
        for d in (1, -1):
            j, improved, flat = i0 + d, False, 0
            while 0 <= j < len(ax.values):
                rec = at(ax.values[j])
                j += d
                if not rec.measured:
                    continue  # pruned (free) or failed: the next value may still run
                now = self._leader(mtp)
                if now is rec:
                    improved, flat = True, 0
                    continue
                if now is not None and flat < PLATEAU_STEPS and ranking.versus(now, rec).label == ranking.SAME:
                    flat += 1
                    continue
                break
            if improved:
                return

    # ------------------------------------------------------------------ one candidate

    def _evaluate(self, c: Candidate, stage: str) -> Trial:
        """`c`'s record: known already, pruned without a launch (invalid, dominated), or a trial of
        the lab's loop (`trial.CandidateTrial`: plan, budget, fit-target, launch, race)."""
        hit = self._by_key.get(c.key)
        if hit is not None:
            return hit
        if self._cancel.is_set():
            raise _Stop("cancelled")
        rec = Trial(c.key, number=len(self.records) + 1, memory_key=c.memory_key, values=dict(c.values),
                    settings=settings_json(c.settings.redacted()), mtp=c.mtp, stage=stage)
        known = self._known.get(c.key)
        if known is not None:
            rec = replace(known, number=rec.number, stage=stage, resumed=True)
        elif c.invalid:
            rec.status, rec.reason = "invalid", c.invalid
        elif (why := self._mem.pruned(c)) is not None:
            rec.status, rec.reason = "dominated", why
        else:
            trial = CandidateTrial(self._shared, c, rec, self._leader(c.mtp), full=self.full)
            got = self.lab.trial(c, trial.step())
            if got is None or trial.cancelled:
                raise _Stop(self.lab.stopped or "cancelled")
        self.records.append(rec)
        self._by_key[c.key] = rec
        self._mem.learn(c, rec)
        self._prog.step()
        self._prog.emit("trial", f"#{rec.number} {c.label}: {rec.status}" + (f" ({rec.reason})" if rec.reason else ""),
                        trial=rec)
        return rec

    def _leader(self, mtp: bool) -> Trial | None:
        return ranking.leader([r for r in self.records if r.mtp == mtp], self.options.rungs)

    def _median(self, mtp: bool) -> float | None:
        lead = self._leader(mtp)
        return lead.median() if lead else None


class GridReference(Tuner):
    """Every candidate of the space, in grid order, measured to the last rung on the same lab and
    trial as the search (nothing eliminated): the reference a search is judged against (the tests'
    and `bench/bench_tune.py`'s), not a way to tune."""

    full = True
    done = "complete"

    def _search(self) -> None:
        for c in self.space.grid():
            self._evaluate(c, "grid")


def tune(space: Space, workload: Workload, machine: Machine, options: TuneOptions | None = None,
         **kw: Any) -> TuneResult:
    """Run one tune (see `Tuner`); `kw`: previous, on_event, cancel."""
    return Tuner(space, workload, machine, options or TuneOptions(), **kw).run()
