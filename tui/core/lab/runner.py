"""The one trial loop every experiment runs on: `Lab.trial` takes one candidate through

1. plan: the planner's verdict (once per launch key); a certain refusal (`invalid`) or a predicted
   OOM is an attempt without a launch (a predicted OOM launches anyway with `try_anyway`);
2. budget: a candidate that needs a launch is not started when its work would not finish inside
   the budget (`events.Pace`, measured in this session);
3. launch through the one launcher (`launcher.CountingLauncher`: counted; the pace weighs the group), with the one
   recovery policy (`recovery.Recovery`) after a memory failure. A server stays up across
   consecutive candidates that share a launch key (a sweep's n_predict rows); another key, or a
   strategy that relaunches every visit (A/B), stops it and launches again. A launch that failed
   (or a server that died) fails the rest of its key without another launch;
4. measure while the strategy's pass policy asks for more passes; a searched answer that runs out
   of memory in the probe steps to the safe side (`Recovery.step_safer`) and is measured again;
5. record: the strategy's `record` step turns the `Attempt` into its record (the journal's), and
   a failed launch is written to the results store once (`results.failed.store_failure`).

Progress is one `events.LabEvent` stream (`events.Progress`). Strategies (the sweep's grid, the
tune's search, the A/B, the knob searches) only choose candidates (the one `candidate.Candidate`) and read
what was recorded.

The one prober (`default_prober`): every experiment measures a ready server through it. Why one: the
sweep and the tune (with `ignore_eos` and an optional warm-up) each wrapped
`probes.runner.run_probe_sync`. A run is `repeat` passes of a suite, recorded in the results store
(`sink`) with the settings, memory report and plan it ran with; `samples_of` reads its complete
passes as per-pass samples.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from tui.core.lab.candidate import Candidate
from tui.core.lab.events import Pace, Progress
from tui.core.lab.failures import failure_kind, probe_failure_class
from tui.core.lab.knob import FIT_STEP_MIB, KnobFinding, KnobTry
from tui.core.lab.launcher import CountingLauncher, LaunchOutcome, Launcher
from tui.core.results.failed import store_failure
from tui.core.lab.recovery import RELAUNCH_TRIES, Recovery, choose_knob
from tui.core.options.settings import Settings, settings_json
from tui.core.server.failures import Failure
from tui.core.lab.planning import PlanCheck, PlanVerdict
from tui.core.probes.hygiene import check_memory_report
from tui.core.probes.run_types import RunConfig, RunContext
from tui.core.probes.suites import Suite
from tui.core.lab.trial import Samples

R = TypeVar("R")


@dataclass
class Launched:
    """The launch of one launch key: a running server (`out.ok`), or why it failed or died."""

    key: str
    settings: Settings  # as launched (a recovery's answer applied)
    out: LaunchOutcome
    finding: KnobFinding | None = None  # the recovery's search, when one ran
    dead: Failure | None = None  # how the server ended while a candidate was measured
    run_id: int | None = None  # the results store's record of a failed launch
    started_at: float = 0.0


@dataclass
class Attempt:
    """One candidate taken through the loop, for the strategy's `record` step.

    `status`: ok | failed (launch, probe or a dead server) | invalid | predicted_oom. `runs` are
    the measurements in order (the last is `run`); `dead` the server's end when a probe failed."""

    candidate: Candidate
    status: str
    settings: Settings
    reason: str | None = None
    failure_kind: str | None = None
    plan: dict[str, Any] | None = None
    verdict: PlanVerdict | None = None
    warnings: list[str] = field(default_factory=list)
    launched: Launched | None = None
    runs: list[Any] = field(default_factory=list)
    dead: Failure | None = None
    started_at: float = 0.0

    @property
    def run(self) -> Any:
        return self.runs[-1] if self.runs else None


@dataclass
class Step(Generic[R]):
    """How a strategy takes a candidate through `Lab.trial`.

    `measure(launched, attempt, passes)` runs that many passes and returns the run; `passes(attempt)`
    says how many to add now (0: measured enough); `record(attempt)` makes and saves the record;
    `label`: the candidate's label in the results store; `work`: what the budget weighs if a launch
    is needed (`events.Pace`); `relaunch`: launch even when the key is up (A/B's visits); `recover`:
    search a memory failure's knob (`recovery`), or record the failure as it is (A/B: a side that
    does not start ends the run); `prepare(attempt)`: before the launch (the last server stopped, the
    budget checked; a tune's hygiene and fit-target search), may set `attempt.settings` (what
    launches), False records the attempt as `prepare` left it, launching nothing; `safer(attempt,
    failed)`: the strategy's own step to the safe side after a memory failure at a value `prepare`
    searched (`failed`: the launch's outcome or the failed run), through the lab's launcher and
    recovery: the relaunch's settings and outcome, None where it does not apply or is spent."""

    measure: Callable[[Launched, Attempt, int], Any] | None
    passes: Callable[[Attempt], int]
    record: Callable[[Attempt], R]
    label: str = ""
    work: Sequence[Any] = ()
    relaunch: bool = False
    recover: bool = True
    store_config: dict[str, Any] = field(default_factory=dict)
    prepare: Callable[[Attempt], bool] | None = None
    safer: Callable[[Attempt, Any], tuple[Settings, LaunchOutcome] | None] | None = None


class Lab:
    """The trial loop of one experiment (see the module docstring). `store`: a results store or None;
    `budget_s`: the time budget; `suite`: the suite name a failed launch is stored under."""

    def __init__(self, launcher: Launcher, *, cancel: threading.Event, progress: Progress,
                 planner: PlanCheck | None = None, store: Any = None, suite: str = "",
                 fit_step_mib: int = FIT_STEP_MIB, try_anyway: bool = False, budget_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic, on_launch: Callable[[Settings], None] | None = None) -> None:
        self.pace = Pace()
        self.cancel, self.progress, self.planner, self.store, self.suite = cancel, progress, planner, store, suite
        self.try_anyway, self.budget_s, self.clock = try_anyway, budget_s, clock
        self.launcher = CountingLauncher(launcher, on_launch=on_launch)
        self.recovery = Recovery(self.launcher, cancel, fit_step_mib)
        self.up: Launched | None = None  # the last launch (running, failed or dead)
        self.stopped: str | None = None  # why the last `trial` returned None: cancelled | budget
        self._plans: dict[str, PlanVerdict | None] = {}
        self._t0 = clock()

    @property
    def launches(self) -> int:
        return self.launcher.n

    def elapsed(self) -> float:
        return self.clock() - self._t0

    def restart_clock(self) -> None:
        self._t0 = self.clock()
        self.progress.restart()

    # ------------------------------------------------------------------ the loop

    def trial(self, c: Candidate, step: Step[R]) -> R | None:
        """Take `c` (launched as its `launch_key`) through plan, budget, launch, measure and record.
        None when the budget or a cancel stopped it before its record (`stopped` says which)."""
        self.stopped = None
        if self.cancel.is_set():
            return self._stop("cancelled")
        self.progress.emit("row_started", c.label, **about(c))
        key = c.launch_key
        reuse = self.up is not None and self.up.key == key and not step.relaunch
        verdict = self._plan(key, c.settings)
        a = Attempt(c, "ok", c.settings, started_at=time.time(), verdict=verdict, plan=plan_json(verdict))
        if verdict is not None and verdict.risk == "invalid":
            a.status, a.reason, a.failure_kind = "invalid", verdict.message, "planner"
            return step.record(a)
        if verdict is not None and verdict.risk == "oom":
            if not self.try_anyway:
                a.status, a.reason = "predicted_oom", f"the planner predicts an OOM: {verdict.message}"
                return step.record(a)
            a.warnings.append(f"launched although the planner predicts an OOM: {verdict.message}")
        elif verdict is not None and verdict.risk == "tight":
            a.warnings.append(f"memory is tight: {verdict.message}")
        if not reuse:
            self.stop()
            if self.pace.over_budget(step.work, self.elapsed(), self.budget_s):
                return self._stop("budget")
            t0 = self.clock()  # the pace weighs the whole group: the prepare's fit search, the launch, the recovery
            if step.prepare is not None and not step.prepare(a):
                self.pace.launched(self.clock() - t0)
                return step.record(a)
            launched = self._launch(c, step, a)
            if launched is None:
                return self._stop("cancelled")
            self.pace.launched(self.clock() - t0)
            self.up = launched
        up = self.up
        assert up is not None
        a.launched, a.settings = up, up.settings
        if not up.out.ok:
            a.status, a.reason, a.failure_kind = "failed", launch_reason(up), failure_kind(up.out)
            a.started_at = up.started_at
            self.launcher.stop()  # nothing runs, but the key stays failed: its other candidates launch nothing
            return step.record(a)
        if up.dead is not None:
            a.status, a.reason, a.failure_kind = "failed", up.dead.explain(), up.dead.kind.value
            return step.record(a)
        if not self._measure(c, up, a, step):
            return self._stop("cancelled")
        return step.record(a)

    def _stop(self, why: str) -> None:
        self.stopped = why
        return None

    def _plan(self, key: str, settings: Settings) -> PlanVerdict | None:
        if self.planner is None:
            return None
        if key not in self._plans:
            try:
                self._plans[key] = self.planner(settings)
            except Exception as e:  # a planner that cannot read the model must not stop the experiment
                self._plans[key] = PlanVerdict("unknown", f"the planner could not plan this configuration: {e}")
        return self._plans[key]

    def _launch(self, c: Candidate, step: Step[Any], a: Attempt) -> Launched | None:
        """Launch `c`; after a memory failure, the recovery's search. None when cancelled."""
        settings = a.settings
        self.progress.emit("launching", f"launching {c.label}", **about(c))
        started = time.time()
        out = self.launcher.launch(settings, self.cancel)
        if out.cancelled:
            return None
        finding: KnobFinding | None = None
        if not out.ok and out.memory_failure and step.safer is not None:
            moved = step.safer(a, out)
            if moved is not None:
                settings, out = moved
                if out.cancelled:
                    return None
        elif not out.ok and out.memory_failure and step.recover:
            flag = choose_knob(settings, out).replace("_", "-")

            def on_try(t: KnobTry) -> None:
                self.progress.emit("search_trial", f"{flag} {t.value}: {t.outcome}", **about(c), trial=t)

            finding, out, settings = self.recovery.search(settings, out, on_try=on_try)
            if self.cancel.is_set():
                self.launcher.stop()
                return None
            self.progress.emit("search_done", finding.message, **about(c))
        up = Launched(c.launch_key, settings, out, finding, started_at=started)
        if not out.ok:  # written to the results store once per failed launch: a record, not a reason to stop
            up.run_id = store_failure(self.store, suite=self.suite, label=step.label, settings=settings,
                                      error=launch_reason(up), plan=a.plan, config=step.store_config)
        else:
            self.progress.emit("ready", f"ready in {out.seconds:.1f} s", **about(c))
        return up

    def _measure(self, c: Candidate, up: Launched, a: Attempt, step: Step[Any]) -> bool:
        """Measure while the pass policy asks; False when cancelled."""
        if step.measure is None:
            return True
        t1 = self.clock()
        tries = 0
        while (n := step.passes(a)) > 0:
            run = step.measure(up, a, n)
            if run is None or getattr(run, "status", "") == "cancelled" or self.cancel.is_set():
                return False
            a.runs.append(run)
            if run.status == "ok":
                continue
            finding = up.finding
            if finding is not None and finding.converged and tries < RELAUNCH_TRIES and self._ran_out_of_memory(run):
                # The search's answer loaded and decoded a few tokens, but the probe ran out of
                # memory: the bound is too close. Step to the safe side and measure again.
                tries += 1
                moved = self.recovery.step_safer(finding, up.settings, run.error or "")
                if moved is not None:
                    up.settings, up.out = moved
                    a.settings, a.runs = up.settings, []
                    continue
            elif step.safer is not None and (moved := step.safer(a, run)) is not None:
                up.settings, up.out = moved
                a.settings = up.settings
                if up.out.cancelled:
                    return False
                if up.out.ok:  # measure again, one step safer
                    a.runs = []
                    continue
                a.status, a.reason, a.failure_kind = "failed", up.out.reason, failure_kind(up.out)
                a.runs = []  # a failed launch, not a failed probe
            break
        if step.work:  # the candidate's generation work, first in what the budget weighs
            self.pace.worked(self.clock() - t1, step.work[0])
        run = a.run
        if run is not None and run.status != "ok":
            a.status, a.reason, a.failure_kind = "failed", run.error, "probe_failed"
            f = self.launcher.failure()
            if f is not None:
                up.dead = a.dead = f
                a.reason, a.failure_kind = f"{f.explain()} (during the probe: {run.error})", f.kind.value
        return True

    def _ran_out_of_memory(self, run: Any) -> bool:
        """The searched answer's probe failed for memory: an allocation error in any reply, or the
        server ended by one (only the knob changed, so a crash or a kill counts too)."""
        texts = [run.error or ""] + [getattr(r, "error", None) or "" for r in (run.requests or [])]
        return probe_failure_class(texts, self.launcher.failure(), knob_changed=True) == "oom_decode"

    def stop(self) -> None:
        """Stop the running server (the next candidate launches)."""
        if self.up is not None:
            self.launcher.stop()
        self.up = None


def about(c: Candidate) -> dict[str, Any]:
    """What an event says it is about: the candidate, and an A/B visit's side."""
    return {"candidate": c, "side": c.side}


def launch_reason(up: Launched) -> str:
    """Why a launch failed, with the recovery's search when it found nothing."""
    reason = up.out.reason
    if up.finding is not None and not up.finding.converged:
        reason += f" Search for a working {up.finding.flag}: {up.finding.message}"
    return reason


def plan_json(v: PlanVerdict | None) -> dict[str, Any] | None:
    """The planner's verdict as a record keeps it."""
    if v is None:
        return None
    return {"risk": v.risk, "message": v.message, **({"details": v.details} if v.details else {})}


class Prober(Protocol):
    """Runs the probe suite against a ready server (`default_prober` is the real one)."""

    def __call__(self, url: str, suite: Suite, *, repeat: int, n_predict: int | None, label: str,
                 settings: Settings, memory: dict[str, Any] | None, plan: dict[str, Any] | None,
                 cancel: threading.Event, progress: Callable[[Any], None], sink: Any = None) -> Any:
        """Returns a run with `status` (ok | failed | cancelled), `summary` (probes.records.summarize_run),
        `warnings`, `error`, `run_id` and `requests`, like probes.run_types.ProbeRun."""
        ...


def default_prober(ignore_eos: bool = False, concurrency: int = 1) -> Prober:
    """The real probe runner, on its own event loop in the experiment's thread. `ignore_eos`: every
    request generates its full length (a tune's exact-output workload); `concurrency`: requests in
    flight at once (the server launched with that many slots); `warmup=False` on a call skips the
    warm-up (a launch's later passes need none)."""
    from tui.core.probes.runner import run_probe_sync  # the runner pulls in asyncio and httpx: lazy

    def probe(url: str, suite: Suite, *, repeat: int, n_predict: int | None, label: str, settings: Settings,
              memory: dict[str, Any] | None, plan: dict[str, Any] | None, cancel: threading.Event,
              progress: Callable[[Any], None], sink: Any = None, warmup: bool = True) -> Any:
        cfg = RunConfig(repeat=repeat, ignore_eos=ignore_eos, warmup=warmup, concurrency=concurrency,
                        **({"n_predict": n_predict} if n_predict is not None else {}))
        ctx = RunContext(url=url, label=label, model=settings.model, plan=plan, memory=memory,
                         settings=settings_json(settings.redacted(), only_set=False),
                         configured_parallel=settings.parallel, extra_warnings=check_memory_report(memory))
        return run_probe_sync(url, suite, cfg, api_key=settings.api_key, context=ctx, sink=sink, progress=progress,
                              cancel=cancel)

    return probe  # type: ignore[return-value]


def samples_of(run: Any) -> Samples:
    """A probe run's complete passes as per-pass samples (`error` when it failed), with its accepted
    tokens per draft position."""
    s = Samples.of_passes([p for p in (run.summary or {}).get("passes") or [] if p.get("complete", True)])
    s.positions = (run.summary or {}).get("positions")
    if run.status == "failed":
        s.error = run.error or "the probe failed"
    return s
