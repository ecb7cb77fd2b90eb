"""One candidate of the tune on the lab's one trial loop (`lab.runner.Lab.trial`): the tune's `Step`
over the `machine.Machine` it drives, and what the tune's launches taught about memory (`MemoryBook`).

What is the tune's own in a trial, as the loop's hooks:

* `prepare` (before the launch, no server of ours running): the machine's hygiene, then on a GPU
  the smallest fit-target of the candidate's memory key: remembered, or searched once per key
  (`lab.knobs.smallest_fit_target`, seeded with the nearest known answer) through the lab's launcher,
  so its launches count and pace like any other. No fit-target that works fails the candidate
  without a launch;
* `safer` (a memory failure at that fit-target, at launch or in the probe before any pass: the bound
  did not hold): step to the safe side with the lab's recovery (`Recovery.relaunch`),
  `RELAUNCH_TRIES` steps above the found value at most;
* `passes`: the race (`ranking.next_step` against the side's leader): a short probe for all, more
  passes only while the candidate can still win; `full` measures every candidate to the last rung
  (the grid reference);
* `record`: the attempt as the candidate's `Trial` (its launches and seconds, the verdict against
  the leader, `eliminated` when clearly slower, the failure's class).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tui.core.lab import ranking
from tui.core.lab.candidate import Candidate
from tui.core.lab.failures import FailureClass, failure_class, probe_failure_class, search_failure_class
from tui.core.lab.launcher import LaunchOutcome
from tui.core.lab.recovery import RELAUNCH_TRIES
from tui.core.lab.runner import Attempt, Lab, Launched, Step
from tui.core.lab.trial import Samples, Trial
from tui.core.options.settings import Settings, settings_json
from tui.core.tune.machine import Machine
from tui.core.tune.space import needs_at_least
from tui.core.tune.workload import Workload


WHERE = {"oom_load": "ran out of memory at load", "oom_decode": "ran out of memory at the first decode"}


class MemoryBook:
    """What a tune's launches taught about memory, so no allocation is tried twice: per memory key
    (`space.memory_key`) the smallest fit-target that survived a first decode (or that none did),
    and the footprints that ran out of memory. A new memory key's fit-target search starts from the
    answer of the nearest known key (fewest memory axes apart): from a working value the search needs
    two launches to confirm the bound, against a gallop down from 1024 MiB."""

    def __init__(self) -> None:
        self.fit: dict[str, int | None] = {}  # memory key -> smallest fit-target (None: none works)
        self._owner: dict[str, Candidate] = {}
        self._dead: dict[str, Trial] = {}  # memory key -> the record that ran out of memory
        self._ooms: list[tuple[Candidate, Trial]] = []

    def remember_fit(self, c: Candidate, value: int | None) -> None:
        self.fit[c.memory_key] = value
        self._owner.setdefault(c.memory_key, c)

    def seed(self, c: Candidate) -> int | None:
        """The fit-target of the nearest known memory key, or None when none is known."""
        known = [(o, v) for k, v in self.fit.items() if v is not None and (o := self._owner.get(k)) is not None]
        if not known:
            return None
        mine = dict(c.memory_ranks)

        def distance(o: Candidate) -> tuple[bool, int, int]:
            theirs = dict(o.memory_ranks)
            apart = sum(1 for n in {*mine, *theirs} if mine.get(n) != theirs.get(n))
            return (o.memory_base != c.memory_base, apart, abs(o.ubatch - c.ubatch))

        return min(known, key=lambda ov: distance(ov[0]))[1]

    def pruned(self, c: Candidate) -> str | None:
        """Why `c` cannot fit, from earlier failures: the same memory key, or at least its footprint."""
        dead = self._dead.get(c.memory_key)
        if dead is not None:
            return f"the same memory settings as #{dead.number}, which {WHERE[dead.failure or 'oom_load']}"
        for fc, fr in self._ooms:
            if needs_at_least(c, fc):
                return f"needs at least the memory of #{fr.number} ({fc.label}), which {WHERE[fr.failure or 'oom_load']}"
        return None

    def learn(self, c: Candidate | None, r: Trial) -> None:
        """A fit-target that works, or a footprint that does not."""
        if c is None:
            return
        if r.measured and r.fit_target is not None and c.memory_key not in self.fit:
            self.remember_fit(c, r.fit_target)
        if r.status == "failed" and r.failure in WHERE and c.memory_key not in self._dead:
            self._dead[c.memory_key] = r
            self._ooms.append((c, r))


@dataclass
class PaceWork:
    """What `lab.events.Pace` weighs for a tune: one unit per pass (it reads key, launch_key, n_predict)."""

    n_predict: int
    key: str = "next"
    launch_key: str = "next"


@dataclass
class TuneLab:
    """What every candidate's trial shares: the lab, the machine, the workload and what memory taught."""

    lab: Lab
    machine: Machine
    workload: Workload
    mem: MemoryBook
    rungs: tuple[int, ...]
    fit_applies: bool  # a GPU with a fit-target to search (not fixed by the user)


class CandidateTrial:
    """The tune's `Step` for candidate `c`, filling `rec`; `ref`: its side's leader when it starts;
    `full`: every pass to the last rung and nothing eliminated (the grid reference)."""

    def __init__(self, t: TuneLab, c: Candidate, rec: Trial, ref: Trial | None, *, full: bool = False) -> None:
        self.t, self.c, self.rec, self.ref = t, c, rec, ref
        self.rungs = (t.rungs[-1],) if full else t.rungs
        self.full = full
        self.work = PaceWork(t.rungs[0])  # the budget weighs a short probe; then the passes measured
        self.why = ""
        self.error: str | None = None  # the last batch's probe error
        self.n0: int | None = None  # the lab's launches when prepared (None: never prepared)
        self.t0 = 0.0
        self.measured = 0  # passes asked for so far (what the pace weighs)
        self.cancelled = False  # the fit-target search was cancelled: the tune stops, nothing recorded

    def step(self) -> Step[Trial]:
        return Step(self.measure, self.passes, self.record, label=self.c.label, work=[self.work], recover=False,
                    prepare=self.prepare, safer=self.safer)

    # ------------------------------------------------------------------ before the launch

    def prepare(self, a: Attempt) -> bool:
        self.n0, self.t0 = self.t.lab.launches, self.t.machine.clock()
        self._planned(a)  # the race's cost order reads the planned memory
        self._hygiene()
        if not self.t.fit_applies:
            return True
        value = self._fit_target()
        if value is None:
            return False
        a.settings = replace(self.c.settings, fit_target=[value])
        self.rec.fit_target, self.rec.settings = value, settings_json(a.settings.redacted())
        return True

    def _hygiene(self) -> None:
        """Before a launch (so before the first and between all): what would make its numbers lie."""
        hygiene = self.t.machine.hygiene
        if hygiene is None:
            return
        rec = self.rec
        try:
            rec.warnings = list(hygiene())
        except Exception as e:  # noqa: BLE001 - telemetry trouble must not stop the tune
            rec.warnings = [f"the machine's hygiene could not be checked: {e}"]
        for w in rec.warnings:
            self.t.lab.progress.emit("hygiene", f"before #{rec.number}: {w}", trial=rec)

    def _fit_target(self) -> int | None:
        """The smallest fit-target of the candidate's memory key: remembered, or searched (seeded)."""
        c, mem, be = self.c, self.t.mem, self.t.lab.launcher
        if c.memory_key in mem.fit:
            known = mem.fit[c.memory_key]
            if known is None:  # a failure the fit-target does not explain, with the same memory settings
                self._fail("other", "no --fit-target worked for the same memory settings earlier")
            return known
        seed = mem.seed(c)
        search = self.t.machine.fit_search
        assert search is not None
        res = search(replace(c.settings, fit_target=[seed]) if seed is not None else c.settings, be, self.t.lab.cancel)
        be.stop()
        self.rec.finding = res.to_json()
        if res.cancelled:
            self.cancelled = True
            return None
        value = res.value if res.found else None
        mem.remember_fit(c, value)
        if value is None:
            self._fail(search_failure_class(res.trials), res.message)
        return value

    # ------------------------------------------------------------------ a memory failure at the found value

    def safer(self, a: Attempt, failed: Any) -> tuple[Settings, LaunchOutcome] | None:
        rec = self.rec
        if rec.fit_target is None or self.t.lab.cancel.is_set():
            return None
        if isinstance(failed, LaunchOutcome):
            where = WHERE[failure_class(failed)]
        elif rec.samples is not None and rec.samples.n == 0 and probe_failure_class(failed.error) != "other":
            where = "ran out of memory in the probe"
        else:
            return None
        moved = self._step_up(where)
        if moved is not None and moved[1].ok:  # measured again from nothing, one step safer
            rec.samples, self.error = Samples(), None
        return moved

    def _step_up(self, where: str) -> tuple[Settings, LaunchOutcome] | None:
        """Step the fit-target to the safe side and launch again, `RELAUNCH_TRIES` steps above the
        found value at most. None when they are spent."""
        rec, step = self.rec, self.t.lab.recovery.fit_step_mib
        first = found = int(rec.fit_target or 0)
        found = int((rec.finding or {}).get("value") or found)
        left = RELAUNCH_TRIES - (first - found) // step
        if left <= 0:
            return None
        self.t.lab.launcher.stop()
        r = self.t.lab.recovery.relaunch("fit_target", self.c.settings, first + step, tries=left)
        if r.out.cancelled:
            return r.settings, r.out
        self.t.mem.remember_fit(self.c, r.value)
        steps = (r.value - found) // step
        rec.fit_target, rec.settings = r.value, settings_json(r.settings.redacted())
        rec.reason = f"--fit-target {found} {where}; " + ("one step up" if steps == 1 else f"{steps} steps up")
        return r.settings, r.out

    # ------------------------------------------------------------------ the race

    def passes(self, a: Attempt) -> int:
        if self.rec.samples is None:
            self.rec.samples = Samples()
        add, self.why = ranking.next_step(self.ref, self.rec, self.rungs)
        return add

    def measure(self, up: Launched, a: Attempt, n: int) -> Samples:
        more = self.t.machine.measure(up.out, self.t.workload, n)
        more.fill_e2e(self.t.workload)
        assert self.rec.samples is not None
        self.rec.samples.extend(more)
        self.measured += n
        self.work.n_predict = self.measured
        self.error = more.error
        return more

    # ------------------------------------------------------------------ the record

    def record(self, a: Attempt) -> Trial:
        rec = self.rec
        if self.cancelled:
            return rec  # not kept: the tune stops
        if self.n0 is not None:
            rec.launches = self.t.lab.launches - self.n0
            rec.seconds = self.t.machine.clock() - self.t0
        self._planned(a)
        if a.status in ("invalid", "predicted_oom"):
            rec.status, rec.reason = a.status, a.reason  # type: ignore[assignment]
        elif rec.status == "failed":
            pass  # no fit-target works for its memory: nothing launched for it
        elif a.launched is not None and not a.launched.out.ok:
            self._fail(failure_class(a.launched.out), a.launched.out.reason)
        elif self.error is not None and (rec.samples is None or rec.samples.n == 0):
            self._fail(probe_failure_class(self.error), f"the probe failed: {self.error}")
        else:
            self._raced()
        return rec

    def _planned(self, a: Attempt) -> None:
        v = a.verdict
        if v is not None:
            self.rec.plan = {"risk": v.risk, "message": v.message}
            self.rec.vram_mib = _device_mib(v.details)

    def _raced(self) -> None:
        rec, ref = self.rec, self.ref
        assert rec.samples is not None
        why = f"the probe failed after {rec.samples.n} passes: {self.error}" if self.error else self.why
        rec.verdict = ranking.verdict_json(ref, rec)
        if ref is not None and not self.full and ranking.versus(ref, rec).label == ranking.WORSE:
            rec.status = "eliminated"
        if rec.status == "eliminated" or rec.samples.n < self.rungs[-1] or rec.samples.error:
            rec.reason = why if not rec.reason else f"{rec.reason}; {why}"

    def _fail(self, cls: FailureClass, reason: str) -> None:
        rec = self.rec
        rec.status, rec.failure = "failed", cls
        rec.reason = reason if not rec.reason else f"{rec.reason}; then {reason}"


def _device_mib(details: dict[str, Any] | None) -> float | None:
    """The planner's total need on GPUs and RPC devices (the host left out)."""
    devs = ((details or {}).get("prediction") or {}).get("devices") or []
    vals = [float(d.get("needed_mib") or 0) for d in devs if not str(d.get("name", "")).startswith("Host")]
    return round(sum(vals), 1) if vals else None
