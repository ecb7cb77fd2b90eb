"""Run a sweep: plan, launch, check a first decode, probe and record every configuration, unattended.

For each launch group (configurations that differ only in generation length share one server):

1. plan first: a predicted OOM is recorded as `predicted_oom` and skipped, unless `try_anyway`;
2. launch the real llama-server and wait until it is ready, then decode a few tokens, because MTP
   OOMs often come at the first decode rather than at load;
3. a memory allocation failure at either point starts the lab's recovery (`lab.recovery`): the
   smallest `--fit-target` that works on GPU/RPC devices, the largest `--ctx-size` on the CPU
   backend. The answer is recorded as a finding and the row is measured with it; a probe that runs
   out of memory with it steps to the safe side, a few times at most;
4. probe every configuration of the group and record the run in the results store;
5. any other failure is classified (`lab.failures`), recorded, and the sweep goes on.

Launches go through the lab's one launcher (`lab.launcher.open_launcher`), counted by a
`CountingLauncher`: a sweep's trials are kept in its state and the results store, never in the
user's launch history.

State is saved after every row (`state.py`), so an interrupted sweep resumes where it stopped.
`Sweep.run()` blocks; call it from a worker thread and `Sweep.cancel()` from anywhere. Progress
events (with an ETA) go to the `on_event` callback, on the sweep's thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tui.core.options.settings import Settings
from tui.core.probes.suites import Suite, SuiteError, get_suite
from tui.core.lab.failures import failure_kind, probe_failure_class
from tui.core.lab.knob import KnobFinding, KnobTry
from tui.core.lab.launcher import (DEFAULT_READY_TIMEOUT, CountingLauncher, LaunchOutcome, Launcher, aim_first_decode,
                                   open_launcher)
from tui.core.lab.recovery import RELAUNCH_TRIES, Recovery, choose_knob
from tui.core.server.failures import Failure
from tui.core.sweep.definition import Configuration, SweepDefinition, settings_json
from tui.core.lab.events import EventFn, LabEvent
from tui.core.lab.measure import Prober, default_prober
from tui.core.lab.pace import Current, Pace
from tui.core.sweep.events import SweepError, SweepOutcome
from tui.core.sweep.planning import PlanCheck, PlanVerdict, default_planner
from tui.core.sweep.rows import ctx_warning, memory_summary, row_from_run
from tui.core.sweep.state import RowResult, StateError, SweepLock, open_state

# --------------------------------------------------------------------------- the sweep


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
        if launcher is None:
            if server_bin is None:
                raise SweepError("no llama-server binary given: pass server_bin (mtp-tune finds or builds one with "
                                 "`mtp-tune doctor`, or set $MTP_TUNE_LLAMA_SERVER).")
            launcher = open_launcher(server_bin, env=env, ready_timeout=ready_timeout)
        self.launcher = CountingLauncher(launcher, on_launch=self._counted)
        self.prober = prober or default_prober()
        self.planner: PlanCheck | None = default_planner() if planner == "default" else planner  # type: ignore[assignment]
        self._store_arg = store
        self.store: Any = None
        self.on_event = on_event
        self._state_root = state_root
        self._fresh = fresh
        self.state = open_state(definition.sweep_id, definition.to_json(), state_root, fresh=fresh)
        self._cancel = threading.Event()
        self._recovery = Recovery(self.launcher, self._cancel, definition.fit_step_mib)
        self._t0 = time.monotonic()
        self._ran: list[str] = []
        self._done = 0
        self._total = 0
        self._pace = Pace()  # the ETA and the budget check
        self._running = threading.Lock()
        self._pending: list[Configuration] = []
        self._current: Current | None = None  # the row being probed

    # ---- public --------------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop as soon as possible: the running probe is abandoned, the server stopped, and the
        rows finished so far are kept (re-running the same sweep continues from there)."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def sweep_id(self) -> str:
        return self.definition.sweep_id

    def run(self) -> SweepOutcome:
        """Run (or resume) the sweep to the end, the budget, or a cancel."""
        if not self._running.acquire(blocking=False):
            raise SweepError("this sweep is already running.")
        lock = SweepLock(self.definition.sweep_id, self._state_root)
        try:
            lock.acquire()
        except StateError as e:
            self._running.release()
            raise SweepError(str(e)) from None
        try:
            # Re-read: another process may have finished rows since this object was made.
            self.state = open_state(self.definition.sweep_id, self.definition.to_json(), self._state_root,
                                    fresh=self._fresh)
            self._fresh = False
            return self._run()
        finally:
            self.launcher.close()
            if self._store_arg == "default" and self.store is not None:
                with contextlib.suppress(Exception):
                    self.store.close()
            lock.release()
            self._running.release()

    # ---- internals -----------------------------------------------------------------------

    def _open_store(self) -> None:
        if self._store_arg == "default":
            from tui.core.results.store import open_store

            self.store = open_store()
        else:
            self.store = self._store_arg

    def _elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _emit(self, kind: str, **kw: Any) -> None:
        if self.on_event is None:
            return
        ev = LabEvent(kind, self._done, self._total, round(self._elapsed(), 3),
                        self._pace.eta(self._pending, self._current), kw.pop("message", ""), launches=self.launcher.n, **kw)
        try:
            self.on_event(ev)
        except Exception:  # a broken UI callback must not stop the sweep
            pass

    def _run(self) -> SweepOutcome:
        d = self.definition
        try:
            suite = get_suite(d.suite)
        except SuiteError as e:
            raise SweepError(str(e)) from None
        self._open_store()
        aim_first_decode(self.launcher, suite.prompts[0])
        self._t0 = time.monotonic()
        configs = d.configurations()
        self._total = len(configs)
        st = self.state
        session = {"started_at": time.time(), "finished_at": None, "launches": 0, "stopped": None}
        st.sessions.append(session)
        for c in configs:
            if st.finished(c.key, try_anyway=d.try_anyway):
                continue
            if c.skip_reason is not None:
                st.record(RowResult(c.key, "invalid", reason=c.skip_reason, settings=settings_json(c.settings.redacted()),
                                    n_predict=c.n_predict, finished_at=time.time()))
            elif c.duplicate_of is not None:
                st.record(RowResult(c.key, "duplicate", reason=c.duplicate_reason, settings=settings_json(c.settings.redacted()),
                                    n_predict=c.n_predict, finished_at=time.time()))
        self._pending = [c for c in configs if not st.finished(c.key, try_anyway=d.try_anyway)]
        self._done = self._total - len(self._pending)
        st.save()
        self._emit("started", message=f"sweep {d.sweep_id}: {self._total} configurations, {self._done} already done, "
                                       f"{len({c.launch_key for c in self._pending})} launches to go")
        stopped = "done"
        groups: list[list[Configuration]] = []
        for c in self._pending:
            if groups and groups[-1][0].launch_key == c.launch_key:
                groups[-1].append(c)
            else:
                groups.append([c])
        for group in groups:
            if self._cancel.is_set():
                stopped = "cancelled"
                break
            if self._pace.over_budget(group, self._elapsed(), self.definition.limits.budget_s):
                stopped = "budget"
                self._emit("stopped", message="time budget reached; re-run the same sweep to continue")
                break
            self._run_group(group, suite)
            if self._cancel.is_set():
                stopped = "cancelled"
                break
        self.launcher.stop()
        session["finished_at"] = time.time()
        session["launches"] = self.launcher.n
        session["stopped"] = stopped
        st.save()
        self._emit("finished", message=stopped)
        return SweepOutcome(st, stopped, self._elapsed(), self.launcher.n, list(self._ran))

    def _finish_row(self, c: Configuration, row: RowResult) -> None:
        row.finished_at = time.time()
        self.state.record(row)
        self.state.save()
        self._ran.append(c.key)
        self._pending = [p for p in self._pending if p.key != c.key]
        self._done += 1
        self._emit("row_done", candidate=c, trial=row, message=f"{c.label()}: {row.status}")

    def _record_store_failure(self, c: Configuration, settings: Settings, reason: str, plan: dict[str, Any] | None) -> int | None:
        if self.store is None:
            return None
        try:
            rid = self.store.begin_run(suite=self.definition.suite, label=self._label(c), model=settings.model,
                                       mtp=settings.mtp_enabled, settings=settings_json(settings.redacted(), only_set=False),
                                       config={"sweep": self.sweep_id, "row": c.key, "n_predict": c.n_predict}, plan=plan)
            self.store.finish_run(rid, "failed", error=reason)
            return int(rid)
        except Exception:
            return None

    def _label(self, c: Configuration) -> str:
        return f"sweep {self.sweep_id[:8]} #{c.index + 1} {c.label()}"

    def _plan(self, settings: Settings) -> PlanVerdict | None:
        if self.planner is None:
            return None
        try:
            return self.planner(settings)
        except Exception as e:  # a planner that cannot read the model must not stop the sweep
            return PlanVerdict("unknown", f"the planner could not plan this configuration: {e}")

    def _counted(self, settings: Settings) -> None:
        """Every launch of the sweep, the recovery's included, counts in its state."""
        self.state.launches += 1

    def _run_group(self, group: list[Configuration], suite: Suite) -> None:
        d = self.definition
        first = group[0]
        settings = first.settings
        for c in group:
            self._emit("row_started", candidate=c, message=c.label())
        verdict = self._plan(settings)
        plan = {"risk": verdict.risk, "message": verdict.message, **({"details": verdict.details} if verdict.details else {})} if verdict else None
        warnings: list[str] = []
        if verdict is not None and verdict.risk == "invalid":
            for c in group:
                self._finish_row(c, RowResult(c.key, "invalid", reason=verdict.message, failure_kind="planner",
                                              settings=settings_json(settings.redacted()), n_predict=c.n_predict, plan=plan))
            return
        if verdict is not None and verdict.risk == "oom":
            if not d.try_anyway:
                for c in group:
                    self._finish_row(c, RowResult(c.key, "predicted_oom", reason=f"the planner predicts an OOM: {verdict.message} "
                                                  "(use --try-anyway to launch it anyway)", settings=settings_json(settings.redacted()),
                                                  n_predict=c.n_predict, plan=plan))
                return
            warnings.append(f"launched although the planner predicts an OOM: {verdict.message}")
        elif verdict is not None and verdict.risk == "tight":
            warnings.append(f"memory is tight: {verdict.message}")
        started = time.time()
        self._emit("launching", candidate=first, message=f"launching {first.label()}")
        t0 = time.monotonic()
        out = self.launcher.launch(settings, self._cancel)
        if out.cancelled:
            return
        finding: KnobFinding | None = None
        finding_entry: dict[str, Any] = {}
        if not out.ok and out.memory_failure:
            flag = choose_knob(settings, out).replace("_", "-")

            def on_try(t: KnobTry) -> None:
                self._emit("search_trial", candidate=first, trial=t, message=f"{flag} {t.value}: {t.outcome}")

            finding, out, settings = self._recovery.search(settings, out, on_try=on_try)
            if self._cancel.is_set():
                self.launcher.stop()
                return
            self._emit("search_done", candidate=first, message=finding.message)
            finding_entry = {"row": first.key, "launch_key": first.launch_key, "label": first.label(), **finding.to_json()}
            self.state.findings.append(finding_entry)
        self._pace.launched(time.monotonic() - t0)
        if not out.ok:
            reason = out.reason
            if finding is not None and not finding.converged:
                reason += f" Search for a working {finding.flag}: {finding.message}"
            kind = failure_kind(out)
            rid = self._record_store_failure(first, settings, reason, plan)
            for c in group:
                self._finish_row(c, RowResult(c.key, "failed", reason=reason, failure_kind=kind,
                                              settings=settings_json(settings.redacted()), n_predict=c.n_predict, plan=plan,
                                              memory=memory_summary(out), warnings=list(warnings),
                                              finding=finding.to_json() if finding else None, run_id=rid,
                                              launch=self.state.launches, log_path=out.log_path, started_at=started))
            self.launcher.stop()
            return
        mem = memory_summary(out)
        mem_warn = ctx_warning(settings, mem)
        if mem_warn:
            warnings.append(mem_warn)
        self._emit("ready", candidate=first, message=f"ready in {out.seconds:.1f} s")
        dead: Failure | None = None
        for c in group:
            if self._cancel.is_set():
                return
            if dead is not None:
                self._finish_row(c, RowResult(c.key, "failed", reason=dead.explain(), failure_kind=dead.kind.value,
                                              settings=settings_json(settings.redacted()), n_predict=c.n_predict, plan=plan,
                                              memory=mem, warnings=list(warnings), launch=self.state.launches,
                                              log_path=out.log_path))
                continue
            row_started = time.time()
            t1 = time.monotonic()
            run = self._probe(c, settings, out, plan, suite)
            if run is None or run.status == "cancelled" or self._cancel.is_set():
                return
            tries = 0
            while (run.status != "ok" and finding is not None and finding.converged and tries < RELAUNCH_TRIES
                   and self._probe_ran_out_of_memory(run)):
                # The search's answer loaded and decoded a few tokens, but the probe ran out of
                # memory: the bound is too close. Step to the safe side and measure again.
                tries += 1
                moved = self._recovery.step_safer(finding, settings, run.error or "")
                if moved is None:
                    break
                settings, out = moved
                mem = memory_summary(out)
                finding_entry.update(finding.to_json())
                run = self._probe(c, settings, out, plan, suite)
                if run is None or run.status == "cancelled" or self._cancel.is_set():
                    return
            self._pace.worked(time.monotonic() - t1, c)
            row = row_from_run(c, run, settings, mem, plan, warnings, finding, self.state.launches, out.log_path)
            row.started_at = row_started
            if run.status != "ok":
                f = self.launcher.failure()
                if f is not None:
                    dead = f
                    row.reason = f"{f.explain()} (during the probe: {run.error})"
                    row.failure_kind = f.kind.value
            self._finish_row(c, row)
        self.launcher.stop()

    def _probe_ran_out_of_memory(self, run: Any) -> bool:
        """The searched answer's probe failed for memory: an allocation error in any reply, or the
        server ended by one (only the knob changed, so a crash or a kill counts too)."""
        texts = [run.error or ""] + [getattr(r, "error", None) or "" for r in (run.requests or [])]
        return probe_failure_class(texts, self.launcher.failure(), knob_changed=True) == "oom_decode"

    def _probe(self, c: Configuration, settings: Settings, out: LaunchOutcome, plan: dict[str, Any] | None,
               suite: Suite) -> Any:
        started = time.monotonic()
        self._current = (c, started, 0, 0)

        def progress(p: Any) -> None:
            self._current = (c, started, int(getattr(p, "done", 0) or 0), int(getattr(p, "total", 0) or 0))
            self._emit("probe", candidate=c, probe=p, message=f"{getattr(p, 'done', 0)}/{getattr(p, 'total', 0)} requests")

        kw: dict[str, Any] = {}
        if self.store is not None:
            kw["sink"] = self.store
        self._emit("probe", candidate=c, message=f"probing {c.label()}")
        try:
            return self.prober(out.url or "", suite, repeat=self.definition.repeat, n_predict=c.n_predict,
                               label=self._label(c), settings=settings, memory=out.memory, plan=plan, cancel=self._cancel,
                               progress=progress, **kw)
        finally:
            self._current = None

