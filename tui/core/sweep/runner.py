"""Run a sweep: the grid strategy on the lab's one trial loop (`lab.runner.Lab`), unattended.

Every configuration is a candidate of the loop, in grid order, measured with a fixed number of
passes (`repeat`); configurations that differ only in generation length share one launch key, so
one server serves them all. The loop plans, budgets, launches, recovers from a memory failure (the
answer is recorded as a finding and the row measured with it) and classifies any other failure;
the sweep goes on.

What is the sweep's own: its journal (`lab.journal`, saved after every row, so an interrupted sweep
resumes where it stopped; a sweep's trials are never in the user's launch history), the rows
skipped before anything runs (invalid, duplicate), the ETA from `lab.events.Pace`, and its record
step (`_record`: an attempt as a `lab.trial.Trial`).

`Sweep.run()` blocks; call it from a worker thread and `Sweep.cancel()` from anywhere. Progress
events (`lab.events.LabEvent`, with an ETA) go to the `on_event` callback, on the sweep's thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core.lab.candidate import Candidate
from tui.core.lab.events import Current, EventFn, LabError, Progress
from tui.core.lab.launcher import DEFAULT_READY_TIMEOUT, LaunchOutcome, Launcher, aim_first_decode, equipped
from tui.core.lab.runner import Attempt, Lab, Launched, Prober, Step, default_prober
from tui.core.probes.suites import Suite, SuiteError, get_suite
from tui.core.lab.journal import Journal, JournalLock, open_journal
from tui.core.lab.trial import Samples, Trial
from tui.core.sweep.definition import SweepDefinition
from tui.core.options.settings import settings_json
from tui.core.lab.planning import PlanCheck, plan_check

# --------------------------------------------------------------------------- the sweep


@dataclass
class SweepOutcome:
    """What `Sweep.run()` returns."""

    state: Journal
    stopped: str  # done | cancelled | budget
    seconds: float
    launches: int  # launches in this session
    ran: list[str]  # row keys run in this session


class Sweep:
    """One sweep run (resumes the saved state of the same definition unless `fresh`).

    `store`: a results store (`tui.core.results.store.Store`) or anything with its run-writing methods;
    "default" opens `data_dir()/results.sqlite`; None records nothing there (state file only).
    """

    def __init__(
        self,
        definition: SweepDefinition,
        *,
        server_bin: str | Path | None = None,
        launcher: Launcher | None = None,
        prober: Prober | None = None,
        planner: PlanCheck | None | str = "default",
        store: Any = "default",
        state_root: Path | None = None,
        on_event: EventFn | None = None,
        fresh: bool = False,
        env: Mapping[str, str] | None = None,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
    ) -> None:
        self.definition = definition
        self.prober = prober or default_prober()
        self.planner: PlanCheck | None = plan_check() if planner == "default" else planner  # type: ignore[assignment]
        self._equipment = (launcher, server_bin, store, env, ready_timeout)  # what `run` launches with and records in
        self.launcher: Launcher | None = None  # the one `run` launches through
        self.store: Any = None
        self._state_root = state_root
        self._fresh = fresh
        self.state = open_journal("sweep", definition.sweep_id, definition.to_json(), state_root, fresh=fresh)
        self._cancel = threading.Event()
        self._ran: list[str] = []
        self._running = threading.Lock()
        self._pending: list[Candidate] = []
        self._current: Current | None = None  # the row being probed
        self._prog = Progress(0, on_event, eta=lambda: self.lab.pace.eta(self._pending, self._current),
                              launches=lambda: self.lab.launches)
        self._findings: dict[int, dict[str, Any]] = {}  # id(launch) -> its entry in state.findings

    # ---- public --------------------------------------------------------------------------

    @property
    def on_event(self) -> EventFn | None:
        return self._prog.on_event

    @on_event.setter
    def on_event(self, fn: EventFn | None) -> None:
        """Progress goes to `fn` from now on (a UI may attach after making the sweep)."""
        self._prog.on_event = fn

    def cancel(self) -> None:
        """Stop as soon as possible: the running probe is abandoned, the server stopped, and the
        rows finished so far are kept (re-running the same sweep continues from there)."""
        self._cancel.set()

    @property
    def sweep_id(self) -> str:
        return self.definition.sweep_id

    def run(self) -> SweepOutcome:
        """Run (or resume) the sweep to the end, the budget, or a cancel (LabError when it cannot)."""
        if not self._running.acquire(blocking=False):
            raise LabError("this sweep is already running.")
        d = self.definition
        launcher, server_bin, store, env, ready_timeout = self._equipment
        try:
            with JournalLock("sweep", d.sweep_id, self._state_root), \
                    equipped(launcher, server_bin, store, env=env, ready_timeout=ready_timeout) as (launcher, store):
                # Re-read: another process may have finished rows since this object was made.
                self.state = open_journal("sweep", d.sweep_id, d.to_json(), self._state_root, fresh=self._fresh)
                self._fresh = False
                self.launcher, self.store = launcher, store
                # The lab counts every launch through its launcher, the recovery's included.
                self.lab = Lab(launcher, cancel=self._cancel, progress=self._prog, planner=self.planner, store=store,
                               suite=d.suite, fit_step_mib=d.fit_step_mib, try_anyway=d.try_anyway,
                               budget_s=d.limits.budget_s, on_launch=self._counted)
                return self._run(launcher)
        finally:
            self._running.release()

    # ---- internals -----------------------------------------------------------------------

    def _run(self, launcher: Launcher) -> SweepOutcome:
        d = self.definition
        try:
            suite = get_suite(d.suite)
        except SuiteError as e:
            raise LabError(str(e)) from None
        aim_first_decode(launcher, suite.prompts[0])
        self.lab.restart_clock()
        configs = d.configurations()
        self._prog.total = len(configs)
        st = self.state
        session = {"started_at": time.time(), "finished_at": None, "launches": 0, "stopped": None}
        st.sessions.append(session)
        for c in configs:  # the rows skipped before anything runs
            if not c.runnable and not st.finished(c.key, try_anyway=d.try_anyway):
                status, why = ("invalid", c.invalid) if c.invalid is not None else ("duplicate", c.duplicate_reason)
                st.record(Trial(c.key, status, reason=why, settings=settings_json(c.settings.redacted()),
                                n_predict=c.n_predict, finished_at=time.time()))
        self._pending = [c for c in configs if not st.finished(c.key, try_anyway=d.try_anyway)]
        self._prog.done = self._prog.total - len(self._pending)
        st.save()
        self._prog.emit("started", f"sweep {d.sweep_id}: {self._prog.total} configurations, {self._prog.done} already done, "
                              f"{len({c.launch_key for c in self._pending})} launches to go")
        stopped = "done"
        for c in list(self._pending):
            if self._cancel.is_set():
                stopped = "cancelled"
                break
            row = self.lab.trial(c, self._step(c, suite, self._group(c)))
            if row is None:
                stopped = self.lab.stopped or "cancelled"
                if stopped == "budget":
                    self._prog.emit("stopped", "time budget reached; re-run the same sweep to continue")
                break
        self.lab.stop()
        session["finished_at"] = time.time()
        session["launches"] = self.lab.launches
        session["stopped"] = stopped
        st.save()
        self._prog.emit("finished", stopped)
        return SweepOutcome(st, stopped, self.lab.elapsed(), self.lab.launches, list(self._ran))

    def _group(self, c: Candidate) -> list[Candidate]:
        """`c` and the pending rows after it that share its launch (what the budget weighs)."""
        i = next(j for j, p in enumerate(self._pending) if p.key == c.key)
        group = [c]
        for p in self._pending[i + 1:]:
            if p.launch_key != c.launch_key:
                break
            group.append(p)
        return group

    def _step(self, c: Candidate, suite: Suite, group: list[Candidate]) -> Step[Trial]:
        """The grid's way through the loop: fixed passes (`repeat`, one probe run), recorded as a row."""
        repeat = self.definition.repeat
        return Step(measure=lambda up, a, n: self._probe(c, up, a, suite, n),
                    passes=lambda a: 0 if a.runs else repeat,
                    record=self._record, label=self._label(c), work=group,
                    store_config={"sweep": self.sweep_id, "row": c.key, "n_predict": c.n_predict})

    def _record(self, a: Attempt) -> Trial:
        """The record step: the attempt as the sweep's row (its status, reason and failure kind as the
        lab's loop found them), saved in the journal."""
        c, up, run = a.candidate, a.launched, a.run
        row = Trial(c.key, a.status, reason=a.reason, failure_kind=a.failure_kind,  # type: ignore[arg-type]
                    settings=settings_json(a.settings.redacted()), n_predict=c.n_predict, plan=a.plan)
        if a.status == "predicted_oom":
            row.reason = f"{a.reason} (use --try-anyway to launch it anyway)"
        if up is None:  # refused by the planner: nothing launched
            return self._finish_row(c, row)
        self._note_finding(c, up)
        row.memory, row.warnings = memory_summary(up.out), list(a.warnings)
        row.launch, row.log_path = self.state.launches, up.out.log_path
        if run is None:  # the launch failed, or its server died with an earlier row
            if not up.out.ok:
                row.finding, row.run_id = up.finding.to_json() if up.finding else None, up.run_id
                row.started_at = a.started_at
            return self._finish_row(c, row)
        mem = row.memory
        if mem and mem.get("n_ctx") and a.settings.ctx_size and mem["n_ctx"] < a.settings.ctx_size:
            row.warnings.append(f"the server runs with a context of {mem['n_ctx']} tokens, not the "
                                f"{a.settings.ctx_size} asked for")
        row.warnings += [w.message for w in (run.warnings or []) if getattr(w, "severity", "warn") == "warn"]
        f = up.finding
        if f is not None and f.converged:
            row.warnings.insert(0, f"{f.flag} set to {f.value} {f.unit} after a memory allocation failure ({f.message})")
        # The passes the probe's medians are taken over: the complete ones, or all when none completed.
        s = run.summary or {}
        passes = [p for p in s.get("passes") or [] if p.get("complete", True)] or s.get("passes") or []
        row.samples = Samples.of_passes(passes) if passes else None
        row.mtp, row.acceptance, row.mean_accept_len = a.settings.mtp_enabled, s.get("acceptance"), s.get("mean_accept_len")
        row.finding, row.run_id, row.started_at = f.to_json() if f else None, run.run_id, a.started_at
        return self._finish_row(c, row)

    def _note_finding(self, c: Candidate, up: Launched) -> None:
        """The recovery's finding of a launch, in the state's findings (updated when it stepped safer)."""
        if up.finding is None:
            return
        entry = self._findings.get(id(up))
        if entry is None:
            entry = self._findings[id(up)] = {"row": c.key, "launch_key": c.launch_key, "label": c.label}
            self.state.findings.append(entry)
        entry.update(up.finding.to_json())

    def _finish_row(self, c: Candidate, row: Trial) -> Trial:
        row.finished_at = time.time()
        self.state.record(row)
        self.state.save()
        self._ran.append(c.key)
        self._pending = [p for p in self._pending if p.key != c.key]
        self._prog.step()
        self._prog.emit("row_done", f"{c.label}: {row.status}", candidate=c, trial=row)
        return row

    def _label(self, c: Candidate) -> str:
        return f"sweep {self.sweep_id[:8]} #{c.index + 1} {c.label}"

    def _counted(self, settings: Any) -> None:
        """Every launch of the sweep, the recovery's included, counts in its state."""
        self.state.launches += 1

    def _probe(self, c: Candidate, up: Launched, a: Attempt, suite: Suite, repeat: int) -> Any:
        started = time.monotonic()
        self._current = (c, started, 0, 0)

        def progress(p: Any) -> None:
            self._current = (c, started, int(getattr(p, "done", 0) or 0), int(getattr(p, "total", 0) or 0))
            self._prog.emit("probe", f"{getattr(p, 'done', 0)}/{getattr(p, 'total', 0)} requests", candidate=c, probe=p)

        self._prog.emit("probe", f"probing {c.label}", candidate=c)
        try:
            return self.prober(up.out.url or "", suite, repeat=repeat, n_predict=c.n_predict, label=self._label(c),
                               settings=up.settings, memory=up.out.memory, plan=a.plan, cancel=self._cancel,
                               progress=progress, sink=self.store)
        finally:
            self._current = None


# --------------------------------------------------------------------------- a row's record


def memory_summary(out: LaunchOutcome) -> dict[str, Any] | None:
    """What a row keeps of the server's memory report: MiB per device and in all, the context it runs."""
    m = out.memory
    if not m:
        return None
    devices = {dev: round(sum(float(v) for v in comps.values()), 1) for dev, comps in (m.get("devices") or {}).items()}
    total = round(sum(devices.values()), 1)
    n_ctx = None
    with contextlib.suppress(Exception):
        n_ctx = int(m["target"]["params"]["n_ctx"])
    return {"total_mib": total, "devices": devices, "totals": m.get("totals"), "n_ctx": n_ctx,
            "device_free_mib": {d.get("name"): d.get("free_mib") for d in out.devices} or None}
