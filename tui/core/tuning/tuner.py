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

A failed launch is classified (`lab.failures`) and never retried blindly: an out-of-memory
failure kills its memory key and everything at or above it; on a GPU one right after a fit search
steps the fit-target to the safe side (`lab.recovery`: the bound did not hold), which is a
different allocation, a few steps at most.
The budget is checked before each candidate (`lab.pace.Pace`): the result is the best so far.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tui.core.lab.failures import FailureClass, failure_class, probe_failure_class, search_failure_class
from tui.core.lab.knob import FIT_STEP_MIB
from tui.core.lab.launcher import CountingLauncher, LaunchOutcome
from tui.core.lab.recovery import RELAUNCH_TRIES, Recovery
from tui.core.options.settings import Settings
from tui.core.options.settings import settings_json
from tui.core.lab.pace import Pace
from tui.core.lab import ranking
from tui.core.lab.axis import Axis
from tui.core.tuning.machine import Machine, PaceWork
from tui.core.tuning.memory import WHERE, MemoryBook
from tui.core.lab.events import EventFn, Progress, new_cancel
from tui.core.tuning.space import Candidate, Space
from tui.core.lab.trial import Samples, Trial
from tui.core.tuning.tune_result import TuneResult, build_result
from tui.core.tuning.workload import Workload

__all__ = ["Machine", "PLATEAU_STEPS", "TuneOptions", "TuneResult", "Tuner", "tune"]

#: Tied steps in a row an ordered axis' walk steps over before it gives up on a direction.
PLATEAU_STEPS = 1


@dataclass(frozen=True)
class TuneOptions:
    strategy: Literal["search", "grid"] = "search"  # grid: every candidate, to the last rung (the reference)
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

    def __post_init__(self) -> None:
        self._cancel = new_cancel(self.cancel)
        self.records: list[Trial] = []
        self._by_key: dict[str, Trial] = {}
        self._known = {r.key: r for r in self.previous}
        self._mem = MemoryBook()
        self._pace = Pace()
        self._be = CountingLauncher(self.machine.launcher, clock=self.machine.clock, on_launch=self.machine.on_launch,
                                    on_launched=self._pace.launched)
        self._recovery = Recovery(self._be, self._cancel, self.options.fit_step_mib)
        self._prog = Progress(0, self.on_event)
        self._t0 = 0.0
        for r in self._known.values():
            self._mem.learn(self._candidate(r), r)

    # ------------------------------------------------------------------ public

    @property
    def launches(self) -> int:
        """Server launches this run, fit-target searches included (resumed records cost none)."""
        return self._be.n

    def run(self) -> TuneResult:
        self._t0 = self.machine.clock()
        stopped = "converged" if self.options.strategy == "search" else "complete"
        try:
            if self.options.strategy == "grid":
                for c in self.space.grid():
                    self._evaluate(c, "grid")
            else:
                self._search()
        except _Stop as why:
            stopped = str(why)
        finally:
            self._be.stop()
        res = build_result(self.records, self.options.rungs, self.launches, len(self.space.grid()), stopped,
                           self.machine.clock() - self._t0, self.workload)
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
            self._plan(rec, c)
            if rec.status == "ok":
                self._budget()
                self._run(rec, c)
        self.records.append(rec)
        self._by_key[c.key] = rec
        self._mem.learn(c, rec)
        self._prog.step()
        self._prog.emit("trial", f"#{rec.number} {c.label()}: {rec.status}" + (f" ({rec.reason})" if rec.reason else ""),
                        trial=rec)
        return rec

    def _plan(self, rec: Trial, c: Candidate) -> None:
        if self.machine.plan is None:
            return
        v = self.machine.plan(c.settings)
        if v is None:
            return
        rec.plan = {"risk": v.risk, "message": v.message}
        rec.vram_mib = _device_mib(v.details)
        if v.risk == "oom":
            rec.status, rec.reason = "predicted_oom", f"the planner predicts an OOM: {v.message}"
        elif v.risk == "invalid":
            rec.status, rec.reason = "invalid", v.message

    def _run(self, rec: Trial, c: Candidate) -> None:
        self._check_hygiene(rec)
        settings = c.settings
        if self._fit_applies():
            value = self._fit_target(rec, c)
            if value is None:
                return
            settings = replace(settings, fit_target=[value])
            rec.fit_target = value
            rec.settings = settings_json(settings.redacted())
        out = self._launch(rec, settings)
        if not out.ok and out.memory_failure and rec.fit_target is not None:
            out = self._step_up(rec, c, WHERE[failure_class(out)]) or out
        try:
            if not out.ok:
                self._fail(rec, c, failure_class(out), out.reason)
            else:
                self._race(rec, c, out)
        finally:
            self._be.stop()

    def _launch(self, rec: Trial, settings: Settings) -> LaunchOutcome:
        t = self.machine.clock()
        out = self._be.launch(settings, self._cancel)
        rec.launches += 1
        rec.seconds += self.machine.clock() - t
        if out.cancelled:
            raise _Stop("cancelled")
        return out

    def _step_up(self, rec: Trial, c: Candidate, where: str) -> LaunchOutcome | None:
        """The fit-target found for this memory key ran out of memory (`where`: at launch or in the
        probe; the bound did not hold): step to the safe side and launch again (`lab.recovery`),
        `RELAUNCH_TRIES` steps above the found value at most. None when they are spent."""
        step = self.options.fit_step_mib
        first = found = int(rec.fit_target or 0)
        found = int((rec.finding or {}).get("value") or found)
        left = RELAUNCH_TRIES - (first - found) // step
        if left <= 0:
            return None
        self._be.stop()
        t, n = self.machine.clock(), self._be.n
        r = self._recovery.relaunch("fit_target", c.settings, first + step, tries=left)
        rec.launches += self._be.n - n
        rec.seconds += self.machine.clock() - t
        if r.out.cancelled:
            raise _Stop("cancelled")
        self._mem.remember_fit(c, r.value)
        steps = (r.value - found) // step
        rec.fit_target, rec.settings = r.value, settings_json(r.settings.redacted())
        rec.reason = f"--fit-target {found} {where}; " + ("one step up" if steps == 1 else f"{steps} steps up")
        return r.out

    def _race(self, rec: Trial, c: Candidate, out: LaunchOutcome) -> None:
        rec.samples = Samples()
        ref = self._leader(c.mtp)
        rungs = self.options.rungs if self.options.strategy == "search" else (self.options.rungs[-1],)
        why = ""
        while True:
            add, why = ranking.next_step(ref, rec, rungs)
            if add <= 0:
                break
            t = self.machine.clock()
            more = self.machine.measure(out, self.workload, add)
            spent = self.machine.clock() - t
            self._pace.worked(spent, PaceWork(add))  # type: ignore[arg-type]
            rec.seconds += spent
            more.fill_e2e(self.workload)
            rec.samples.extend(more)
            if more.error:
                cls = probe_failure_class(more.error)
                moved = None
                if rec.samples.n == 0 and cls != "other" and rec.fit_target is not None and not self._cancel.is_set():
                    moved = self._step_up(rec, c, "ran out of memory in the probe")
                if moved is not None and moved.ok:  # measure again, one step safer
                    out, rec.samples = moved, Samples()
                    continue
                if moved is not None:
                    self._fail(rec, c, failure_class(moved), moved.reason)
                    return
                if rec.samples.n == 0:
                    self._fail(rec, c, cls, f"the probe failed: {more.error}")
                    return
                why = f"the probe failed after {rec.samples.n} passes: {more.error}"
                break
            if self._cancel.is_set():
                break
        rec.verdict = ranking.verdict_json(ref, rec)
        if ref is not None and self.options.strategy == "search" and ranking.versus(ref, rec).label == ranking.WORSE:
            rec.status = "eliminated"
        if rec.status == "eliminated" or rec.samples.n < rungs[-1] or rec.samples.error:
            rec.reason = why if not rec.reason else f"{rec.reason}; {why}"

    def _fail(self, rec: Trial, c: Candidate, cls: FailureClass, reason: str) -> None:
        rec.status, rec.failure = "failed", cls
        rec.reason = reason if not rec.reason else f"{rec.reason}; then {reason}"

    # ------------------------------------------------------------------ fit-target

    def _fit_applies(self) -> bool:
        return self.machine.fit_search is not None and not self.space.fit_fixed

    def _fit_target(self, rec: Trial, c: Candidate) -> int | None:
        """The smallest fit-target of the candidate's memory key: remembered, or searched (seeded)."""
        if c.memory_key in self._mem.fit:
            known = self._mem.fit[c.memory_key]
            if known is None:  # a failure the fit-target does not explain, with the same memory settings
                self._fail(rec, c, "other", "no --fit-target worked for the same memory settings earlier")
            return known
        seed = self._mem.seed(c)
        t, n = self.machine.clock(), self._be.n
        assert self.machine.fit_search is not None
        res = self.machine.fit_search(replace(c.settings, fit_target=[seed]) if seed is not None else c.settings,
                                      self._be, self._cancel)  # type: ignore[arg-type]
        self._be.stop()
        rec.launches += self._be.n - n
        rec.seconds += self.machine.clock() - t
        rec.finding = res.to_json()
        if res.cancelled:
            raise _Stop("cancelled")
        value = res.value if res.found else None
        self._mem.remember_fit(c, value)
        if value is None:
            self._fail(rec, c, search_failure_class(res.trials), res.message)
        return value

    def _candidate(self, r: Trial) -> Candidate | None:
        vals = {k: v for k, v in r.values.items() if k != "mtp"}
        c = self.space.point(vals, bool(r.values.get("mtp", r.mtp)))
        return c if c.key == r.key else None

    # ------------------------------------------------------------------ helpers

    def _check_hygiene(self, rec: Trial) -> None:
        """Before a launch (so before the first and between all): what would make its numbers lie."""
        if self.machine.hygiene is None:
            return
        try:
            rec.warnings = list(self.machine.hygiene())
        except Exception as e:  # noqa: BLE001 - telemetry trouble must not stop the tune
            rec.warnings = [f"the machine's hygiene could not be checked: {e}"]
        for w in rec.warnings:
            self._prog.emit("hygiene", f"before #{rec.number}: {w}", trial=rec)

    def _leader(self, mtp: bool) -> Trial | None:
        return ranking.leader([r for r in self.records if r.mtp == mtp], self.options.rungs)

    def _median(self, mtp: bool) -> float | None:
        lead = self._leader(mtp)
        return lead.median() if lead else None

    def _budget(self) -> None:
        """Stop before a candidate that would not finish inside the budget."""
        if self._cancel.is_set():
            raise _Stop("cancelled")
        budget = self.options.budget_s
        if budget is not None and self._pace.over_budget([PaceWork(self.options.rungs[0])],  # type: ignore[list-item]
                                                         self.machine.clock() - self._t0, budget):
            raise _Stop("budget")


def _device_mib(details: dict[str, Any] | None) -> float | None:
    """The planner's total need on GPUs and RPC devices (the host left out)."""
    devs = ((details or {}).get("prediction") or {}).get("devices") or []
    vals = [float(d.get("needed_mib") or 0) for d in devs if not str(d.get("name", "")).startswith("Host")]
    return round(sum(vals), 1) if vals else None


def tune(space: Space, workload: Workload, machine: Machine, options: TuneOptions | None = None,
         **kw: Any) -> TuneResult:
    """Run one tune (see `Tuner`); `kw`: previous, on_event, cancel."""
    return Tuner(space, workload, machine, options or TuneOptions(), **kw).run()
