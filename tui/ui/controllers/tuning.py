"""The tuning actions' owner: a sweep, an MTP on/off A/B, a search or a tune, one at a time.

Each runs in a thread worker on the main screen, so the user can leave the sweep screen (or the
verdict) and the work goes on, its progress on the main screen's bottom line. Workers post messages
(`tui.ui.messages`) to the host; its handler hands them to `take`, which owns the state, and then
shows `line()` and tells the tuning screens on the stack (`tuning_changed`). One action at a time:
each launches its own llama-server, and two would compete for the same memory and CPU.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from textual.message import Message

from tui.core.options.settings import Settings
from tui.ui.adapters import tune as tune_adapter
from tui.ui.adapters import tuning
from tui.ui.backend import Backend
from tui.ui.controllers.host import Host, Notice
from tui.ui.controllers.plan import PlanController
from tui.ui.controllers.server import ServerController
from tui.ui.messages import (
    AbFinished, AbProgressed, SearchFinished, SearchProgressed, ServerActionDone, SweepFinished, SweepProgressed,
    TuneFinished, TuneProgressed, TuningChanged,
)
from tui.ui.options import AppOptions
from tui.ui.tune_view import TuneSetup, TuneView
from tui.ui.tuning_view import SearchView, SweepSetup, SweepView, VerdictView, clock

#: How long shutdown waits for a cancelled action to stop its server (the supervisor's grace is 5 s).
STOP_WAIT_S = 8.0
NAMES = {"sweep": "a sweep", "ab": "the MTP on/off run", "search": "a search", "tune": "a tune"}


class TuningController:
    """What runs in the background, and the last sweep, verdict and search."""

    def __init__(self, backend: Backend, options: AppOptions, host: Host, server: ServerController,
                 plan: PlanController) -> None:
        self.backend, self.options, self.host, self.server, self.plan = backend, options, host, server, plan
        self.running: str | None = None  # sweep | ab | search | tune
        self.sweep_setup: SweepSetup | None = None  # the sweep screen's last setup (kept while the App runs)
        self.sweep_defn: Any = None
        self.sweep_plans: dict[str, Any] = {}
        self.sweep_view: SweepView | None = None
        self.verdict: Any = None  # the core's MtpVerdict: re-judged for new workloads without running
        self.verdict_view: VerdictView | None = None
        self.ab_workload: tuple[int, int] = (1000, 500)
        self.search_view: SearchView | None = None
        self.sweeps_finished = 0
        self.abs_finished = 0
        self.searches_finished = 0
        self.tune_setup: TuneSetup | None = None  # the tune screen's last setup (kept while the App runs)
        self.tune_view: TuneView | None = None
        self.tune_outcome: Any = None  # the core's TuneOutcome of the last tune that ran
        self.tune_base: Settings | None = None  # its fixed flags (the report lists them)
        self.tunes_finished = 0
        self._sweep: Any = None
        self._tune: Any = None  # the running TuneRun
        self._cancel = threading.Event()
        self._idle = threading.Event()
        self._idle.set()

    # --- starting --------------------------------------------------------------------------------

    def blocked(self) -> str | None:
        """Why no tuning action can start now (None: it can)."""
        if self.running:
            return f"{NAMES[self.running]} is running; let it finish or cancel it (x) first"
        return self.server.blocked("launch", self.plan.problems)

    def _start(self, kind: str, body: Callable[[threading.Event], Message],
                check: Callable[[], Message | None] | None = None) -> None:
        """Run `body(cancel)` in a worker (after stopping the main screen's server: it holds the
        memory the action needs) and post the message it returns. `check()` runs first in the worker:
        a message from it is posted instead, and the server is left running."""
        self.running = kind
        self._cancel = cancel = threading.Event()
        self._idle.clear()
        stop_first = self.server.status.alive

        def work() -> None:
            try:
                refused = check() if check is not None else None
                if refused is not None:
                    self.host.post_message(refused)
                    return
                if stop_first:
                    self.host.post_message(ServerActionDone("stop", self.backend.server_action("stop", None)))
                self.host.post_message(body(cancel))
            finally:
                self._idle.set()

        self.host.run_worker(work, thread=True, exclusive=True, exit_on_error=False, group="tuning", name=kind)
        self.changed()

    def start_sweep(self, defn: Any, plans: dict[str, Any]) -> str | None:
        """Run (or resume) `defn`; returns why it cannot start."""
        reason = self.blocked()
        if reason:
            return reason
        self.sweep_defn, self.sweep_plans = defn, plans
        tracker = tuning.SweepTracker(defn, plans, lambda v: self.host.post_message(SweepProgressed(v)))
        self.sweep_view = tracker.view
        server_bin, simulate = self.options.server_bin, tuning.simulated(self.options)

        def body(cancel: threading.Event) -> Message:
            if cancel.is_set():
                return SweepFinished(replace(tracker.view, running=False, message="sweep cancelled"))
            view, error = tuning.run_sweep(defn, server_bin=server_bin, simulate=simulate, tracker=tracker,
                                           started=self._sweep_started)
            return SweepFinished(view, error)

        self._start("sweep", body)
        return None

    def _sweep_started(self, sweep: Any) -> None:
        self._sweep = sweep
        if self._cancel.is_set():
            sweep.cancel()

    def start_ab(self, settings: Settings, *, suite: str, passes: int, n_predict: int | None) -> str | None:
        """MTP on vs off with `settings`; returns why it cannot start."""
        reason = self.blocked()
        if reason:
            return reason
        workload = self.ab_workload
        self.verdict = None
        self.verdict_view = VerdictView(running=True, total=2 * passes, workload=workload,
                                        message=f"MTP on vs off: {passes} passes each, interleaved")
        server_bin = self.options.server_bin

        def body(cancel: threading.Event) -> Message:
            v, error = tuning.run_ab(settings, suite=suite, workload=workload, passes=passes, n_predict=n_predict,
                                     server_bin=server_bin, on_event=lambda e: self.host.post_message(AbProgressed(e)),
                                     cancel=cancel)
            return AbFinished(v, error)

        self._start("ab", body)
        return None

    def start_search(self, knob: str, settings: Settings) -> str | None:
        """The largest context or the smallest fit-target; returns why it cannot start."""
        reason = self.blocked()
        if reason:
            return reason
        self.search_view = tuning.search_view(knob)
        server_bin, simulate = self.options.server_bin, tuning.simulated(self.options)

        def body(cancel: threading.Event) -> Message:
            result, error = tuning.run_search(knob, settings, server_bin=server_bin, simulate=simulate,
                                              on_event=lambda e: self.host.post_message(SearchProgressed(knob, e)),
                                              cancel=cancel)
            return SearchFinished(knob, result, error)

        self._start("search", body)
        return None

    def start_tune(self, settings: Settings, setup: TuneSetup) -> str | None:
        """Run (or continue) a tune of `settings` (the fixed flags) as `setup` says; returns why it
        cannot start. The setup is checked in the worker before the main screen's server is stopped."""
        reason = self.blocked()
        if reason:
            return reason
        self.tune_setup = setup
        self.tune_view = TuneView(running=True, message="checking the setup…", budget_s=None)
        options, backend = self.options, self.backend
        box: dict[str, Any] = {}

        def check() -> Message | None:
            prepared = tune_adapter.prepare(settings, setup, options)
            if isinstance(prepared, str):
                return TuneFinished(TuneView(stopped="failed", message=prepared, error=prepared), error=prepared)
            box["prepared"] = prepared
            return None

        def body(cancel: threading.Event) -> Message:
            prepared = box["prepared"]
            tracker = tune_adapter.TuneTracker(prepared, lambda v: self.host.post_message(TuneProgressed(v)))
            if cancel.is_set():
                return TuneFinished(TuneView(stopped="cancelled", message="tune cancelled before it began"))
            outcome, view, error = tune_adapter.run_tune(prepared, store=backend.store(), tracker=tracker,
                                                         started=self._tune_started)
            return TuneFinished(view, outcome, prepared.request.base, error)

        self._start("tune", body, check)
        return None

    def _tune_started(self, run: Any) -> None:
        self._tune = run
        if self._cancel.is_set():
            run.stop()

    def cancel(self) -> bool:
        """Cancel the running action (its server is stopped; a sweep or a tune keeps what it finished)."""
        if not self.running:
            return False
        self._stop_running()
        self.changed(extra="cancelling…")
        return True

    def _stop_running(self) -> None:
        self._cancel.set()
        if self._sweep is not None:
            self._sweep.cancel()
        if self._tune is not None:
            self._tune.stop()

    def rejudge(self, prompt_tokens: int, output_tokens: int) -> VerdictView | None:
        """The last verdict for another workload (instant: the same samples, nothing run)."""
        self.ab_workload = (prompt_tokens, output_tokens)
        if self.verdict is None:
            if self.verdict_view is not None:
                self.verdict_view = replace(self.verdict_view, workload=self.ab_workload)
            return self.verdict_view
        self.verdict = self.verdict.for_workload(prompt_tokens, output_tokens)
        old = self.verdict_view or VerdictView()
        self.verdict_view = tuning.verdict_view(self.verdict, running=old.running, done=old.done, total=old.total,
                                                message=old.message)
        return self.verdict_view

    def changed(self, extra: str = "") -> None:
        """The state changed outside a worker's message: the host redraws the line and the screens."""
        self.host.post_message(TuningChanged(extra))

    # --- news from the workers: the state changes here -------------------------------------------

    def take(self, message: Message) -> Notice | None:
        """A worker's message; returns what to tell the user, if anything."""
        if isinstance(message, SweepProgressed):
            if self.running == "sweep":
                self.sweep_view = message.view
        elif isinstance(message, SweepFinished):
            return self._sweep_finished(message)
        elif isinstance(message, AbProgressed):
            if self.running == "ab" and self.verdict_view is not None:
                self.verdict_view = tuning.progress_view(message.event, self.verdict_view)
        elif isinstance(message, AbFinished):
            return self._ab_finished(message)
        elif isinstance(message, SearchProgressed):
            if self.running == "search":
                self.search_view = tuning.search_view(message.knob, self.search_view, ev=message.event)
        elif isinstance(message, SearchFinished):
            self.running = None
            self.searches_finished += 1
            self.search_view = tuning.search_view(message.knob, self.search_view, result=message.result,
                                                  error=message.error)
        elif isinstance(message, TuneProgressed):
            if self.running == "tune":
                self.tune_view = message.view
        elif isinstance(message, TuneFinished):
            return self._tune_finished(message)
        return None

    def _tune_finished(self, message: TuneFinished) -> Notice:
        self.running, self._tune = None, None
        self.tune_view = message.view
        self.tunes_finished += 1
        if message.outcome is not None:
            self.tune_outcome, self.tune_base = message.outcome, message.base
        if message.error:
            return Notice(message.error, "Tune failed" if message.outcome is None else "Tune", "error", 12)
        v = message.view
        what = f"best {v.best_text}" if v.best_text else "nothing measured"
        return Notice(f"{v.message}: {what}; T shows the trials", "Tune", "information")

    def _sweep_finished(self, message: SweepFinished) -> Notice:
        self.running, self._sweep = None, None
        self.sweep_view = message.view
        self.sweeps_finished += 1
        if message.error:
            return Notice(message.error, "Sweep failed", "error", 12)
        best = next((r for r in message.view.rows if r.number == message.view.best), None)
        what = f"best #{best.number} ({' '.join(best.values)})" if best else "nothing measured"
        return Notice(f"{message.view.message}: {what}; w shows the table", "Sweep", "information")

    def _ab_finished(self, message: AbFinished) -> Notice | None:
        self.running = None
        self.abs_finished += 1
        old = self.verdict_view or VerdictView()
        if message.verdict is not None:
            self.verdict = message.verdict
            if self.verdict.workload != self.ab_workload:  # edited while it ran
                self.verdict = self.verdict.for_workload(*self.ab_workload)
            self.verdict_view = tuning.verdict_view(self.verdict, done=old.total, total=old.total,
                                                    message=f"MTP on vs off: {self.verdict.status}")
        else:
            self.verdict_view = replace(old, running=False, message=message.error or "failed", error=message.error)
        return Notice(message.error, "MTP on/off", "error", 12) if message.error else None

    # --- showing ---------------------------------------------------------------------------------

    def line(self, extra: str = "") -> str:
        """What the main screen's bottom line says about the tuning actions ("": nothing to say)."""
        text = self._line()
        if extra:
            text = f"{text} · {extra}" if text else extra
        return text

    def _line(self) -> str:
        if self.running == "sweep" and self.sweep_view is not None:
            v = self.sweep_view
            return f"◆ sweep {v.progress_text()} · {v.message} · w shows it, x cancels in there"
        if self.running == "ab" and self.verdict_view is not None:
            v2 = self.verdict_view
            eta = f" · ETA {clock(v2.eta_s)}" if v2.eta_s is not None else ""
            return f"◆ MTP on/off pass {v2.done:.0f}/{v2.total}{eta} · {v2.message} · a shows it"
        if self.running == "search" and self.search_view is not None:
            return f"◆ {self.search_view.title.lower()}: {self.search_view.message}"
        if self.running == "tune" and self.tune_view is not None:
            return f"◆ tune {self.tune_view.status_text()} · T shows it, x cancels in there"
        if self.sweep_view is not None and self.sweeps_finished:
            v = self.sweep_view
            return f"◆ last sweep: {v.message} · best #{v.best} · w shows it" if v.best else f"◆ last sweep: {v.message}"
        return ""

    def shutdown(self) -> None:
        """Quitting: cancel what runs and give it a bounded time to stop its server."""
        if self.running:
            self._stop_running()
            self._idle.wait(STOP_WAIT_S)
