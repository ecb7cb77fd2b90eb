"""Probe runs from the main screen: one at a time, awaited on the backend's one probe thread.

The run is an async worker on the host that awaits the backend's future: no Textual thread per run
(a thread per run left its allocator arenas and stack behind, bench/bench_soak.py). Progress and the
end arrive as `ProbeUpdated` / `ProbeFinished`; the controller owns the `ProbeState` the panel shows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading

from tui.core.options.settings import Settings
from tui.ui.cockpit.backend import Backend
from tui.ui.host import Host, Notice
from tui.ui.cockpit.messages import ProbeFinished, ProbeUpdated
from tui.ui.cockpit.views import ProbeState, ServerStatus


class ProbeController:
    """The probe run in flight (if any), its cancel flag, and the last results."""

    def __init__(self, backend: Backend, host: Host, fixed: bool = False) -> None:
        self.backend, self.host, self.fixed = backend, host, fixed
        self.state = ProbeState(suites=backend.suites())
        self.runs_finished = 0
        self.cancel_event = threading.Event()
        self.idle = threading.Event()  # clear while a run is in flight (quitting waits for it)
        self.idle.set()

    def refused(self, server: ServerStatus) -> Notice | None:
        """Why a run cannot start now (None: it can)."""
        if self.fixed:
            return Notice("this is a fixed preview; nothing runs")
        if self.state.running:
            return Notice("a probe run is already going; x cancels it", severity="information")
        if server.state not in ("ready", "attached"):
            return Notice("launch the server first (l), or attach to one with --attach URL")
        return None

    def start(self, suite: str, settings: Settings, concurrency: int = 1) -> ProbeState:
        """Run `suite` against the server, `concurrency` requests at once; returns the state to show at once."""
        self.cancel_event = cancel = threading.Event()
        self.idle.clear()
        at_once = f", {concurrency} requests at once" if concurrency > 1 else ""
        self.state = dataclasses.replace(self.state, running=True, done=0, total=0,
                                         message=f"starting the {suite} suite{at_once}…")
        self.host.run_worker(self._run(suite, settings, cancel, concurrency), exclusive=True, exit_on_error=False,
                             group="probe")
        return self.state

    @staticmethod
    def too_few_slots(running: Settings | None, concurrency: int, fix: str) -> str | None:
        """Why the running server cannot take `concurrency` requests at once (the core's rule; `fix`
        says what to do in the caller's terms), or None. A server launched without -np has
        llama-server's automatic slots; one that only watches says its own (`running`)."""
        # lazy: the probe statistics load with the first probe run, not before the first frame
        from tui.core.probes.concurrency import slots_problem

        if running is None:
            return None
        return slots_problem(running.parallel if running.parallel is not None else -1, concurrency, fix)

    async def _run(self, suite: str, settings: Settings, cancel: threading.Event, concurrency: int) -> None:
        def progress(state: ProbeState) -> None:
            self.host.post_message(ProbeUpdated(state))

        try:
            future = self.backend.submit_probes(suite, settings, self.state, progress, cancel, concurrency)
        except Exception as exc:  # noqa: BLE001 - reported as a failed run, never a traceback
            self.idle.set()
            self.host.post_message(ProbeFinished(self.state, None, f"the probe run could not start: {exc}"))
            return
        future.add_done_callback(lambda _f: self.idle.set())
        try:
            state, run_id, error = await asyncio.wrap_future(future)
        except Exception as exc:  # noqa: BLE001
            state, run_id, error = self.state, None, f"the probe run failed: {exc}"
        self.host.post_message(ProbeFinished(state, run_id, error))

    def cancel(self) -> ProbeState | None:
        """Cancel the run (the request in flight finishes first); the state to show, None if none ran."""
        if not self.state.running:
            return None
        self.cancel_event.set()
        self.state = dataclasses.replace(self.state, message="cancelling after the current request…")
        return self.state

    def updated(self, state: ProbeState) -> ProbeState | None:
        """New progress; None when it is a late update after the run ended."""
        if not self.state.running:
            return None
        self.state = state
        return state

    def finished(self, message: ProbeFinished) -> ProbeState:
        self.runs_finished += 1
        self.state = dataclasses.replace(message.state, running=False)
        return self.state
