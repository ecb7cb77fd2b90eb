"""The server's lifecycle from the main screen: launch, restart, stop, reconcile, and quitting's stop.

Blocking calls run in thread workers on the host (group "server", "reconcile", "quit"); each posts a
`ServerActionDone`, and the supervisor's own news arrives as `ServerUpdated`. The controller owns the
`ServerStatus` the server panel shows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from tui.core.options.settings import Settings
from tui.ui.cockpit.backend import Backend
from tui.ui.host import Host, Notice
from tui.ui.cockpit.messages import ServerActionDone, ServerUpdated
from tui.ui.options import AppOptions
from tui.core.gpu.simulated import SIMULATED_LAUNCHES
from tui.ui.cockpit.views import PlanView, ServerStatus
from tui.ui.cockpit.settings_form import FieldProblem
from tui.ui.widgets.question import Answer, Question

#: How long quitting waits for a cancelled probe to close its request before stopping the server anyway.
QUIT_CANCEL_WAIT_S = 2.0
#: The stop grace when quitting cancelled a request: llama-server notices a closed connection only at
#: its next 1 s HTTP poll (HTTP_POLLING_SECONDS) and sits out SIGTERM until then; what it was
#: computing is being thrown away, so it gets half a second before SIGKILL.
QUIT_STOP_GRACE_S = 0.5


class ServerController:
    """llama-server as mtp-tune runs it (or watches it, attached)."""

    def __init__(self, backend: Backend, options: AppOptions, host: Host) -> None:
        self.backend, self.options, self.host = backend, options, host
        self.status = ServerStatus(attached=bool(options.attach_url))
        self.quitting = False
        #: The last launch's seconds to ready (None before one): how long an experiment's launches take.
        self.launch_s: float | None = None
        self._launch_t0: float | None = None

    def watch(self) -> None:
        """Follow the supervisor (its callbacks only post) and read where it stands."""
        self.backend.on_server_change(lambda: self.host.post_message(ServerUpdated()))
        self.status = self.backend.status()

    @property
    def alive(self) -> bool:
        """The user's own server runs (starting, loading or ready)."""
        return self.status.alive

    def stop_now(self) -> None:
        """Stop the server and tell the cockpit (blocking: a lab worker calls it before its action)."""
        self.host.post_message(ServerActionDone("stop", self.backend.server_action("stop", None)))

    def running_settings(self) -> Settings | None:
        """What the server runs with, while one runs (the form marks what a restart would change)."""
        return self.backend.running_settings if self.status.alive else None

    def blocked(self, action: str, problems: Sequence[FieldProblem] = ()) -> str | None:
        """Why `action` ("launch", "restart", "stop") cannot run now (None: it can)."""
        if self.options.fixed is not None:
            return "this is a fixed preview; nothing runs"
        if self.options.attach_url:
            return f"attached to {self.options.attach_url}: mtp-tune does not {action} a server it did not start"
        errors = [p for p in problems if p.severity == "error"]
        if action in ("launch", "restart") and errors:
            first = errors[0]
            return f"fix the settings first: {first.field.replace('_', '-')}: {first.message}"
        if action in ("launch", "restart") and not self.backend.can_launch:
            return self.backend.cannot_launch_reason()
        return None

    def act(self, action: str, settings: Settings | None, problems: Sequence[FieldProblem],
            stand_ins: bool = False) -> Notice | None:
        """Start `action` in a worker, or say why not (`stand_ins`: on capped stand-ins of the
        simulated GPUs, where running out of memory is real)."""
        reason = self.blocked(action, problems)
        if reason:
            return Notice(reason, {"launch": "Cannot launch", "restart": "Cannot restart"}.get(action, ""))
        if action == "launch" and self.status.alive:
            return Notice("the server is already running; press r to restart it with these settings", severity="information")
        self._launch_t0 = time.monotonic() if action in ("launch", "restart") else None
        self.host.run_worker(lambda: self._act(action, settings, stand_ins), thread=True, exclusive=True,
                             exit_on_error=False, group="server")
        return None

    def launch_question(self, action: str, plan: PlanView | None,
                        problems: Sequence[FieldProblem] = ()) -> Question | None:
        """The question to ask before `action` ("launch"/"restart") with `plan` on screen, or None when
        it can go at once (no doubt, or the action is refused anyway: `act` says why)."""
        if action not in ("launch", "restart") or plan is None or plan.error or self.blocked(action, problems):
            return None
        if action == "launch" and self.status.alive:
            return None
        doubts = list(plan.launch_doubts())
        if not doubts:
            return None
        verb = "Launch" if action == "launch" else "Restart"
        answers = [Answer(action, f"{verb} anyway", variant="warning")]
        if self.options.simulate:
            why_not = self.backend.stand_ins.problem()
            doubts.append(f"These GPUs are simulated: {SIMULATED_LAUNCHES} "
                          + ("For a real out-of-memory, t launches on capped stand-ins instead: ggml-rpc servers "
                             "that can allocate each simulated GPU's free memory and no more (as `tune --stand-ins`)."
                             if why_not is None else f"(Capped stand-ins for a real out-of-memory: {why_not}.)"))
            if why_not is None:
                answers.append(Answer("stand-ins", "On capped stand-ins", key="t"))
        return Question(f"{verb} anyway?", doubts, answers)

    def _act(self, action: str, settings: Settings | None, stand_ins: bool = False) -> None:
        self.host.post_message(ServerActionDone(action, self.backend.server_action(action, settings,
                                                                                   stand_ins=stand_ins)))

    def updated(self) -> bool:
        """Re-read the status; True when the form's "running" marks need redrawing."""
        was_alive = self.status.alive
        self.status = self.backend.status()
        return self.status.alive != was_alive or self.status.state == "ready"

    def action_done(self, message: ServerActionDone) -> None:
        """A worker finished: re-read, and after a good launch compare memory with the plan."""
        self.status = self.backend.status()
        if not message.error and message.action in ("launch", "restart") and self.status.state == "ready":
            if self._launch_t0 is not None:
                self.launch_s = time.monotonic() - self._launch_t0
            self.host.run_worker(self.backend.reconcile_exact, thread=True, exclusive=True, exit_on_error=False,
                                 group="reconcile")  # notifies: the server panel re-reads its status

    def stop_for_quit(self, probe_idle: threading.Event) -> bool:
        """Quitting: stop the server mtp-tune started, after the cancelled probe closed its request
        (bounded); True when that stop is under way (the App exits on its `ServerActionDone`)."""
        if self.options.fixed is not None or not self.status.alive or self.options.attach_url:
            return False
        self.quitting = True
        busy = not probe_idle.is_set()

        def stop() -> None:
            probe_idle.wait(QUIT_CANCEL_WAIT_S)
            grace = QUIT_STOP_GRACE_S if busy else None  # None: the supervisor's own grace period
            self.host.post_message(ServerActionDone("stop", self.backend.server_action("stop", None, grace=grace)))

        self.host.run_worker(stop, thread=True, exclusive=True, exit_on_error=False, group="quit")
        return True
