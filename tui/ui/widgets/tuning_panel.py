"""The tuning actions' owner and their line on the main screen.

A sweep, an MTP on/off A/B or a search runs in a worker of this widget, which lives on the main
screen: the user can leave the sweep screen (or the verdict) and the work goes on, its progress on
this line. Workers post messages (`tui.ui.messages`); the handlers here own the state and hand it
down to the tuning screens on the stack (`tuning_changed`). One action at a time: each launches its
own llama-server, and two would compete for the same memory and CPU.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from textual import on
from textual.content import Content
from textual.message import Message
from textual.widgets import Static

from tui.core.options.settings import Settings
from tui.ui.adapters import tuning
from tui.ui.messages import (
    AbFinished, AbProgressed, SearchFinished, SearchProgressed, ServerActionDone, SweepFinished, SweepProgressed,
)
from tui.ui.tuning_view import SearchView, SweepView, VerdictView, clock

#: How long shutdown waits for a cancelled action to stop its server (the supervisor's grace is 5 s).
STOP_WAIT_S = 8.0
NAMES = {"sweep": "a sweep", "ab": "the MTP on/off run", "search": "a search"}


class TuningPanel(Static):
    """One line: what runs in the background; hidden while nothing has run."""

    DEFAULT_CSS = """
    TuningPanel { height: 1; padding: 0 1; background: $panel; color: $foreground; display: none; }
    TuningPanel.-active { display: block; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self.running: str | None = None  # sweep | ab | search
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
        self._sweep: Any = None
        self._cancel = threading.Event()
        self._idle = threading.Event()
        self._idle.set()

    # --- starting --------------------------------------------------------------------------------

    def blocked(self) -> str | None:
        """Why no tuning action can start now (None: it can)."""
        app: Any = self.app
        if self.running:
            return f"{NAMES[self.running]} is running; let it finish or cancel it (x) first"
        return app._blocked("launch")

    def _start(self, kind: str, body: Callable[[threading.Event], Message]) -> None:
        """Run `body(cancel)` in a worker (after stopping the main screen's server: it holds the
        memory the action needs) and post the message it returns."""
        app: Any = self.app
        self.running = kind
        self._cancel = cancel = threading.Event()
        self._idle.clear()
        stop_first = bool(app.server.alive)

        def work() -> None:
            try:
                if stop_first:
                    err = app.backend.server_action("stop", None)
                    app.post_message(ServerActionDone("stop", err))
                self.post_message(body(cancel))
            finally:
                self._idle.set()

        self.run_worker(work, thread=True, exclusive=True, exit_on_error=False, group="tuning", name=kind)
        self._refresh()

    def start_sweep(self, defn: Any, plans: dict[str, Any]) -> str | None:
        """Run (or resume) `defn`; returns why it cannot start."""
        reason = self.blocked()
        if reason:
            return reason
        self.sweep_defn, self.sweep_plans = defn, plans
        tracker = tuning.SweepTracker(defn, plans, lambda v: self.post_message(SweepProgressed(v)))
        self.sweep_view = tracker.view
        server_bin, simulate = self.app.options.server_bin, tuning.simulated(self.app.options)  # type: ignore[attr-defined]

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
        """MTP on vs off with the settings on screen; returns why it cannot start."""
        reason = self.blocked()
        if reason:
            return reason
        workload = self.ab_workload
        self.verdict = None
        self.verdict_view = VerdictView(running=True, total=2 * passes, workload=workload,
                                        message=f"MTP on vs off: {passes} passes each, interleaved")
        server_bin = self.app.options.server_bin  # type: ignore[attr-defined]

        def body(cancel: threading.Event) -> Message:
            v, error = tuning.run_ab(settings, suite=suite, workload=workload, passes=passes, n_predict=n_predict,
                                     server_bin=server_bin, on_event=lambda e: self.post_message(AbProgressed(e)),
                                     cancel=cancel)
            return AbFinished(v, error)

        self._start("ab", body)
        return None

    def start_ab_on_screen(self) -> str | None:
        """MTP on vs off with what the main screen shows: its settings, the probe panel's suite, and the
        probe options (repeats become passes per side)."""
        app: Any = self.app
        return self.start_ab(app.settings, suite=app.probe_panel.suite, passes=max(1, app.options.probe_repeat),
                             n_predict=app.options.probe_n_predict)

    def start_search(self, knob: str, settings: Settings) -> str | None:
        """The largest context or the smallest fit-target; returns why it cannot start."""
        reason = self.blocked()
        if reason:
            return reason
        self.search_view = tuning.search_view(knob)
        server_bin, simulate = self.app.options.server_bin, tuning.simulated(self.app.options)  # type: ignore[attr-defined]

        def body(cancel: threading.Event) -> Message:
            result, error = tuning.run_search(knob, settings, server_bin=server_bin, simulate=simulate,
                                              on_event=lambda e: self.post_message(SearchProgressed(knob, e)),
                                              cancel=cancel)
            return SearchFinished(knob, result, error)

        self._start("search", body)
        return None

    def cancel(self) -> bool:
        """Cancel the running action (its server is stopped; a sweep keeps its finished rows)."""
        if not self.running:
            return False
        self._cancel.set()
        if self._sweep is not None:
            self._sweep.cancel()
        self._refresh(extra="cancelling…")
        return True

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

    # --- handlers: the state changes here --------------------------------------------------------

    @on(SweepProgressed)
    def _sweep_progressed(self, message: SweepProgressed) -> None:
        if self.running == "sweep":
            self.sweep_view = message.view
            self._refresh()

    @on(SweepFinished)
    def _sweep_finished(self, message: SweepFinished) -> None:
        self.running, self._sweep = None, None
        self.sweep_view = message.view
        self.sweeps_finished += 1
        if message.error:
            self.app.notify(message.error, title="Sweep failed", severity="error", timeout=12)
        else:
            best = next((r for r in message.view.rows if r.number == message.view.best), None)
            what = f"best #{best.number} ({' '.join(best.values)})" if best else "nothing measured"
            self.app.notify(f"{message.view.message}: {what}; w shows the table", title="Sweep")
        self._refresh()

    @on(AbProgressed)
    def _ab_progressed(self, message: AbProgressed) -> None:
        if self.running == "ab" and self.verdict_view is not None:
            self.verdict_view = tuning.progress_view(message.event, self.verdict_view)
            self._refresh()

    @on(AbFinished)
    def _ab_finished(self, message: AbFinished) -> None:
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
        if message.error:
            self.app.notify(message.error, title="MTP on/off", severity="error", timeout=12)
        self._refresh()

    @on(SearchProgressed)
    def _search_progressed(self, message: SearchProgressed) -> None:
        if self.running == "search":
            self.search_view = tuning.search_view(message.knob, self.search_view, ev=message.event)
            self._refresh()

    @on(SearchFinished)
    def _search_finished(self, message: SearchFinished) -> None:
        self.running = None
        self.searches_finished += 1
        self.search_view = tuning.search_view(message.knob, self.search_view, result=message.result,
                                              error=message.error)
        self._refresh()

    # --- showing ---------------------------------------------------------------------------------

    def line(self) -> str:
        """What the main screen says about the tuning actions."""
        if self.running == "sweep" and self.sweep_view is not None:
            v = self.sweep_view
            return f"◆ sweep {v.progress_text()} · {v.message} · w shows it, x cancels in there"
        if self.running == "ab" and self.verdict_view is not None:
            v2 = self.verdict_view
            eta = f" · ETA {clock(v2.eta_s)}" if v2.eta_s is not None else ""
            return f"◆ MTP on/off pass {v2.done:.0f}/{v2.total}{eta} · {v2.message} · a shows it"
        if self.running == "search" and self.search_view is not None:
            return f"◆ {self.search_view.title.lower()}: {self.search_view.message}"
        if self.sweep_view is not None and self.sweeps_finished:
            v = self.sweep_view
            return f"◆ last sweep: {v.message} · best #{v.best} · w shows it" if v.best else f"◆ last sweep: {v.message}"
        return ""

    def _refresh(self, extra: str = "") -> None:
        text = self.line()
        if extra:
            text = f"{text} · {extra}" if text else extra
        self.update(Content(text))
        self.set_class(bool(text), "-active")
        for screen in self.app.screen_stack:
            changed = getattr(screen, "tuning_changed", None)
            if changed is not None:
                changed(self)

    def on_unmount(self) -> None:
        """Quitting: cancel what runs and give it a bounded time to stop its server."""
        if self.running:
            self._cancel.set()
            if self._sweep is not None:
                self._sweep.cancel()
            self._idle.wait(STOP_WAIT_S)
