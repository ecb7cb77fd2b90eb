"""Settings -> validation -> plan: the instant estimate per change, then llama.cpp's exact figures.

The controller owns the settings on screen, their problems, the newest telemetry snapshot and which
plan the bars show (`PlanState`). Its methods return the plan to show now (None: nothing new yet);
answers that come later arrive as `Planned` / `ExactPlanned` messages on the host, whose handlers
hand them back here (`take_estimate`, `take_exact`) and show what comes out.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from tui.core.gpu.types import GpuSnapshot
from tui.core.options.settings import Settings
from tui.ui.cockpit.backend import Backend
from tui.ui.host import Host
from tui.ui.cockpit.server import ServerController
from tui.ui.cockpit.messages import ExactPlanned, Planned, RemoteReading
from tui.ui.options import AppOptions
from tui.ui.cockpit.plan_state import PlanState
from tui.ui.cockpit.views import PlanView
from tui.ui.cockpit.settings_fields import ALL_FIELDS
from tui.ui.cockpit.settings_form import FieldProblem
from tui.ui.cockpit.planning import plan_is_quick
from tui.ui.cockpit.remote import known_local, remote_label


#: how long a remote model's name must stay as typed before its header is read (on the worker)
REMOTE_SETTLE_S = 0.3


class PlanController:
    """The plan for the settings on screen, for the devices llama-server would use."""

    def __init__(self, backend: Backend, options: AppOptions, host: Host, server: ServerController) -> None:
        self.backend, self.options, self.host, self.server = backend, options, host, server
        self.settings: Settings = options.settings
        self.problems: tuple[FieldProblem, ...] = ()
        self.snapshot: GpuSnapshot | None = None
        self.view: PlanView | None = None  # what the bars show
        self.state = PlanState()  # the estimate per change, then llama.cpp's exact figures
        self._requested: tuple[Settings, GpuSnapshot | None] | None = None  # what the newest request planned
        backend.exact.on_view(lambda rid, view: host.post_message(ExactPlanned(rid, view)))

    @property
    def seq(self) -> int:
        """The newest settings change's number (a plan for an older one is not shown)."""
        return self.state.seq

    @property
    def has_errors(self) -> bool:
        return any(p.severity == "error" for p in self.problems)

    def validate(self, settings: Settings, parse_errors: list[FieldProblem]) -> tuple[FieldProblem, ...]:
        """The settings on screen changed: their problems (the form shows them)."""
        self.settings = settings
        self.problems = (*parse_errors, *self.backend.validate(settings, self.device_count()))
        return self.problems

    def device_count(self) -> int | None:
        """How many devices llama-server would offload to, as it counts them: the one device list's
        (`DeviceSet.count`), `--rpc` servers included; None while not known yet."""
        return self.backend.device_count(self.settings, self.snapshot)

    def replan(self) -> PlanView | None:
        """After a settings change: plan them, unless they have errors (the last plan stays, marked
        stale: it is for the last valid settings) or the devices are not known yet (the first sample
        brings them). The newest request's settings on its snapshot are no change (the form says
        Changed for each field mounted with a value): their plan is on screen or on its way, and a new
        number would make it stale and read a remote header again."""
        if self.has_errors:
            if self.state.exact_pending:  # still typing: the dry run waits for the settings to settle
                self.state.exact_rid = self.backend.exact.touch() or self.state.exact_rid
            return self._restale()
        if self.snapshot is None and not self.options.simulate:
            return self._restale()
        if self._requested == (self.settings, self.snapshot):
            return self._restale()
        return self.request(self.settings) or self._restale()

    def invalid_fields(self) -> str:
        """The fields in error, by the names users know ("ctx-size, ubatch-size"); "" when none."""
        names = (ALL_FIELDS[p.field].label if p.field in ALL_FIELDS else p.field
                 for p in self.problems if p.severity == "error")
        return ", ".join(dict.fromkeys(names))

    def _restale(self) -> PlanView | None:
        """The plan on screen marked stale (a field in error) or no longer: the view to show when that
        changed, None when it did not."""
        view = self.view
        if view is None or view.stale == (stale := self.invalid_fields()):
            return None
        self.view = replace(view, stale=stale)
        return self.view

    def request(self, settings: Settings, keep_exact: bool = False) -> PlanView | None:
        """The instant estimate, and llama.cpp's exact figures from the exact runner (debounced, the
        stale dry run stopped); only the newest request's answers are shown (`PlanState`).
        `keep_exact`: the exact request already made stands."""
        seq = self.state.next_seq()
        self._requested = (settings, self.snapshot)
        shown = None
        if plan_is_quick(settings):  # a millisecond: no thread hand-offs between key and bars
            shown = self.take_estimate(self.backend.plan(settings, self.snapshot, seq))
        else:  # the header is read (a big file takes a while), or RPC servers asked, in a worker
            snapshot, remote = self.snapshot, known_local(settings) is None

            def work() -> None:
                if remote and not self._settled(seq):
                    return  # still typing the repo or URL: only the settled name reads a header
                if remote:
                    self.host.post_message(RemoteReading(seq, remote_label(settings)))
                self.host.post_message(Planned(self.backend.plan(settings, snapshot, seq)))

            self.host.run_worker(work, thread=True, exclusive=True, exit_on_error=False, group="plan")
        asked = (settings, self.backend.exact.devices_key(settings, self.snapshot))
        if self.state.wants_exact(asked, keep_exact):
            rid, why = self.backend.exact.request(settings, self.snapshot, self.server.status.alive)  # at once
            self.state.exact_asked(asked, rid, why)
        return shown

    def _settled(self, seq: int) -> bool:
        """On a worker: wait `REMOTE_SETTLE_S`; is change `seq` still the newest? (A remote header is
        read over the network: typing `user/model` must not ask the Hub once per keystroke.)"""
        threading.Event().wait(REMOTE_SETTLE_S)
        return self.state.seq == seq

    def reading(self, seq: int) -> bool:
        """Is a header read for change `seq` worth saying (the newest change, no plan for it yet)?"""
        return seq == self.state.seq and (self.view is None or self.view.seq != seq)

    def take_estimate(self, plan: PlanView) -> PlanView | None:
        shown, cancel = self.state.take_estimate(plan)
        if cancel:
            self.backend.exact.cancel()  # nothing to make exact: the estimate could not plan them
        return self._shown(shown)

    def take_exact(self, rid: int, plan: PlanView) -> PlanView | None:
        return self._shown(self.state.take_exact(rid, plan))

    def _shown(self, plan: PlanView | None) -> PlanView | None:
        if plan is not None:  # None: stale, or the estimate for these settings is still on its way
            self.backend.latest_plan = plan
            if plan.stale != (stale := self.invalid_fields()):  # an answer that came after a typo
                plan = replace(plan, stale=stale)
            self.view = plan
        return plan

    def sampled(self, snapshot: GpuSnapshot) -> PlanView | None:
        """A new telemetry snapshot; the first one brings the devices, and so the first plan
        (simulated ones were known: the exact request stands)."""
        first = self.snapshot is None
        self.snapshot = snapshot
        if first and self.view is None and not self.has_errors:
            return self.request(self.settings, keep_exact=self.options.simulate)
        return None

    def recalibrated(self) -> PlanView | None:
        """The model's estimate is now calibrated: the estimate again (the exact request stands)."""
        if self.has_errors or (self.snapshot is None and not self.options.simulate):
            return None
        return self.request(self.settings, keep_exact=True)

    def after_server_action(self) -> PlanView | None:
        """Real GPUs: exact mode waits while our server runs there, so a launch or stop re-plans."""
        if not self.options.simulate and not self.has_errors and self.snapshot:
            return self.request(self.settings)
        return None
