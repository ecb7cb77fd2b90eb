"""The cockpit's door to the core: telemetry, planning, the server, probes and the results store
(which the runs controller reads through `store`).

No Textual here. Every method that can block is called from a worker thread; the App never calls
them on its event loop. Core callbacks (sampler, supervisor) arrive on core threads and are passed
straight to the callables the App registered, which only post messages.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from tui.core.gpu import GpuSampler, Nvml, SimulatedGpus
from tui.core.gpu.types import GpuSnapshot, ServerView
from tui.core.options.settings import Settings
from tui.core.options.validate import validate
from tui.core.server.download import describe
from tui.core.server.handle import ServerHandle
from tui.ui.cockpit import planning, probing, reconciling, remote, server_view
from tui.ui.cockpit.stand_ins import StandInLaunches
from tui.ui.options import AppOptions
from tui.ui.cockpit.views import PlanView, ProbeState, ReconcileRow, ServerStatus
from tui.ui.cockpit.settings_form import FieldProblem

if TYPE_CHECKING:  # imported lazily at run time (a worker thread pays for it, not the first frame)
    from tui.core.server.attach import Attachment
    from tui.core.server.supervisor import Supervisor


def _expect_download(downloads: Any, settings: Settings) -> None:
    """The totals of a launch's download: the sizes the plan read from the remote header (if it did),
    and the `-hf` sidecars (projector, draft head) llama-server downloads with it, from the listing."""
    got = remote.fetched(settings) if downloads is not None else None
    if got is None:
        return
    side = {s.name: s.size for s in got.sidecars_for(settings)}
    if len(got.urls) == 1:
        downloads.expect({got.name.rsplit("/", 1)[-1]: got.size, **side})
    else:  # a split set: the plan knows the parts' sum
        downloads.expect(side, total=got.size + sum(side.values()))


class Backend:
    """Owns the sampler, the supervisor (or attachment), and the calls into the core."""

    def __init__(self, options: AppOptions, exact_fn: Callable[..., Any] | None = None) -> None:
        """`exact_fn`: exact mode's dry run (`planning.exact.exact_plan` unless a test counts them)."""
        self.options = options
        self._exact_fn = exact_fn
        self.exact = planning.ExactPlans(options, exact_fn)
        self.running_settings: Settings | None = None
        self.latest_plan: PlanView | None = None
        self._sampler: Any = None
        self._supervisor: Supervisor | None = None
        self._attachment: Attachment | None = None
        self._lock = threading.Lock()
        self._on_server_change: Callable[[], None] | None = None
        self._unsubscribe: list[Callable[[], None]] = []
        self._store: Any = None
        self._reconcile: tuple[ReconcileRow, ...] = ()
        self._reconcile_exact_reason = ""
        self._snapshot: GpuSnapshot | None = None
        self._attached_running: Any = None  # RunningSettings an attached server told (None: not yet)
        self._probe_pool: Any = None  # the one probe thread (a ThreadPoolExecutor of one)
        self.stand_ins = StandInLaunches(options)  # what a launch on capped stand-ins started

    # --- telemetry -------------------------------------------------------------------------------

    def start_sampler(self, on_snapshot: Callable[[GpuSnapshot], None]) -> None:
        """Start the core's sampler thread; `on_snapshot` runs on that thread (it only posts)."""
        if self.options.simulate:
            source: Any = SimulatedGpus(self.options.hardware, allocated_mib=self._simulated_allocation)
        else:
            source = Nvml()
        self._sampler = GpuSampler(source, interval_s=self.options.sample_interval_s, server=self._server_view)
        self._unsubscribe.append(self._sampler.subscribe(self._keep_snapshot))
        self._unsubscribe.append(self._sampler.subscribe(on_snapshot))
        self._sampler.start()

    def _keep_snapshot(self, snapshot: GpuSnapshot) -> None:
        self._snapshot = snapshot

    def _server_view(self) -> ServerView | None:
        sup = self._supervisor
        if sup is None or sup.pid is None:
            return None
        return server_view.for_sampler(sup.pid, sup.memory_snapshot(), self.latest_plan)

    def _simulated_allocation(self) -> dict[int, float] | None:
        sup = self._supervisor
        if sup is None or not sup.state.running:
            return None
        memory = self.stand_ins.as_simulated(sup.memory_snapshot())  # stand-in i plays simulated CUDA i
        return server_view.simulated_allocation(memory, self.latest_plan)

    def device_count(self, settings: Settings | None = None, snapshot: GpuSnapshot | None = None) -> int | None:
        """The validator's device count: the one device list's, `--rpc` servers of `settings` included
        (`planning.device_count`), over `snapshot` or the newest one; None while unknown."""
        return planning.device_count(settings or self.options.settings, snapshot or self._snapshot, self.options)

    # --- settings --------------------------------------------------------------------------------

    def validate(self, settings: Settings, device_count: int | None) -> list[FieldProblem]:
        problems = validate(settings, None, device_count, require_model=not self.options.attach_url)
        return [FieldProblem(p.field, p.severity, p.message) for p in problems]

    def plan(self, settings: Settings, snapshot: GpuSnapshot | None, seq: int) -> PlanView:
        """Plan `settings` for the devices on screen (a worker thread; reads the GGUF header)."""
        return planning.plan_view(settings, snapshot, self.options, seq)

    # --- the server ------------------------------------------------------------------------------

    def on_server_change(self, callback: Callable[[], None]) -> None:
        """`callback()` (from core threads) whenever the server's state or log changes."""
        self._on_server_change = callback
        if self.options.attach_url:
            # lazy: httpx loads when the App attaches to a server, not before the first frame
            from tui.core.server.attach import Attachment

            self._attachment = Attachment(self.options.attach_url, api_key=self.options.settings.api_key)
            self._watch(self._attachment)
            self._unsubscribe.append(self._attachment.add_state_listener(self._attached_state))
            self._attachment.start()

    def _attached_state(self, ev: Any) -> None:
        """Once the watched server answers, ask it what it runs (off the UI thread: it is HTTP)."""
        if ev.state.value == "ready" and ev.previous.value != "ready":
            threading.Thread(target=self.refresh_running, name="attach-running", daemon=True).start()

    def refresh_running(self) -> None:
        """Ask the attached server what it runs (blocking: a worker or core thread) and tell the App."""
        att = self._attachment
        if att is None:
            return
        try:
            running = att.running_settings()
        except Exception:  # noqa: BLE001 - a server that stops answering keeps the last answer
            return
        if running is not None:
            self._attached_running = running
            self._notify()

    def _watch(self, handle: ServerHandle) -> None:
        notify = self._notify
        self._unsubscribe.append(handle.add_state_listener(lambda _ev: notify()))
        self._unsubscribe.append(handle.add_log_listener(lambda _line: notify()))

    def _notify(self) -> None:
        cb = self._on_server_change
        if cb is not None:
            cb()

    @property
    def can_launch(self) -> bool:
        return self.options.server_bin is not None and not self.options.attach_url

    def cannot_launch_reason(self) -> str:
        if self.options.attach_url:
            return f"attached to {self.options.attach_url}; mtp-tune only watches and probes it"
        return ("no llama-server binary was found: give --server-bin PATH, set MTP_TUNE_LLAMA_SERVER, "
                "or run `mtp-tune doctor --build`")

    def _ensure_supervisor(self) -> Supervisor:
        # lazy: the server supervisor and httpx load with the first launch, not before the first frame
        from tui.core.server.supervisor import Supervisor

        with self._lock:
            if self._supervisor is None:
                assert self.options.server_bin is not None
                self._supervisor = Supervisor(
                    self.options.server_bin, ready_timeout=self.options.ready_timeout_s,
                    log_dir=self.options.server_log_dir,
                )
                self._watch(self._supervisor)
                notify = self._notify  # a download moves without a log line at -lv 4
                self._unsubscribe.append(self._supervisor.add_download_listener(lambda _dl: notify()))
            return self._supervisor

    def server_action(self, action: str, settings: Settings | None, grace: float | None = None,
                      stand_ins: bool = False) -> str | None:
        """launch / restart / stop, blocking until the server is ready, failed or stopped (`grace`:
        seconds between SIGTERM and SIGKILL for a stop, None for the supervisor's own).

        `stand_ins`: launch on capped stand-ins of the simulated GPUs (a real out-of-memory), kept out
        of the launch history the next start restores (their loopback ports die with the app).
        Returns a user-facing sentence when the action could not be done (a failed launch is not
        an error here: its explanation is in `status().failure`).
        """
        # lazy: the server supervisor and httpx load with the first launch, not before the first frame
        from tui.core.planning.standin import StandInError
        from tui.core.server.supervisor import SupervisorError

        try:
            if action == "stop":
                if self._supervisor is not None:
                    self._supervisor.stop(grace)
                self.stand_ins.close()
                self.running_settings = None
                return None
            assert settings is not None
            sup = self._ensure_supervisor()
            if stand_ins or self.stand_ins.active:  # new stand-ins after the old server is gone
                sup.stop()
                self.stand_ins.close()
                action = "launch"
            launched = self.stand_ins.open(settings, self._snapshot) if stand_ins else settings
            sup.record_history = not stand_ins
            # The supervisor carries the Settings (history, labels); what runs is the launch's copy.
            launch = sup.restart(launched) if action == "restart" else sup.start(launched)
            self.running_settings = (dataclasses.replace(launch.settings, rpc=list(settings.rpc),
                                                         fit_target=list(settings.fit_target))
                                     if stand_ins else launch.settings)
            _expect_download(launch.downloads, settings)
            self._reconcile, self._reconcile_exact_reason = (), ""
            self._notify()
            sup.wait_ready()
            if not sup.state.running:
                self.running_settings = None
            elif sup.state.value == "ready":
                self._reconcile = reconciling.rows(settings, sup.memory_snapshot(), self._snapshot, self.options)
            return None
        except SupervisorError as exc:
            return str(exc)
        except (StandInError, RuntimeError) as exc:
            self.stand_ins.close()
            return f"the capped stand-ins could not start: {exc}"
        except OSError as exc:
            self.running_settings = None
            return f"llama-server could not be started ({exc}); check --server-bin and its permissions"
        finally:
            self._notify()

    def reconcile_exact(self) -> None:
        """Add llama.cpp's exact figures to the ready launch's reconciliation (a worker: one dry run,
        or the cached one the screen already made for these settings)."""
        sup, settings = self._supervisor, self.running_settings
        if sup is None or settings is None or sup.state.value != "ready" or not self._reconcile:
            return
        memory = sup.memory_snapshot()
        exact, why = reconciling.exact_for_report(settings, memory, self._snapshot, self.options, self._exact_fn,
                                                  last=self.exact.last_for(settings))
        if sup.state.value != "ready" or self.running_settings is not settings:
            return  # restarted or stopped meanwhile: these rows are for another launch
        if exact is not None:
            self._reconcile = reconciling.rows(settings, memory, self._snapshot, self.options, exact=exact)
        self._reconcile_exact_reason = why
        self._notify()

    @property
    def handle(self) -> ServerHandle | None:
        """The server the App talks to: the one it watches, or the one it runs."""
        return self._attachment or self._supervisor

    def status(self) -> ServerStatus:
        handle = self.handle
        status = server_view.status_of(handle, attached=bool(self.options.attach_url), reconcile=self._reconcile,
                                       running=self._attached_running)
        if status.reconcile and self._reconcile_exact_reason:
            status = dataclasses.replace(status, reconcile_exact_reason=self._reconcile_exact_reason)
        sup = self._supervisor
        summary = sup.downloads.summary() if sup is not None and handle is sup and sup.downloads else None
        if summary is not None:
            status = dataclasses.replace(status, download=describe(summary), download_fraction=summary.fraction,
                                         downloading=summary.phase in ("pending", "downloading"))
        return status

    def full_log(self) -> tuple[list[str], str | None]:
        handle = self.handle
        if handle is None:
            return [], None
        path = handle.log_path
        return handle.tail(), str(path) if path else None

    @property
    def base_url(self) -> str | None:
        handle = self.handle
        return handle.base_url if handle is not None else None

    @property
    def api_key(self) -> str | None:
        return self.options.settings.api_key if self._attachment else (
            self.running_settings.api_key if self.running_settings else None
        )

    # --- probes and the store --------------------------------------------------------------------

    def suites(self) -> tuple[str, ...]:
        """The suites to choose from; the one asked for on the command line first."""
        names = probing.suite_names()
        wanted = self.options.probe_suite
        return (wanted, *[n for n in names if n != wanted]) if wanted else names

    def submit_probes(
        self, suite: str, settings: Settings, previous: ProbeState,
        progress: Callable[[ProbeState], None], cancel: threading.Event, concurrency: int = 1,
    ) -> Future[tuple[ProbeState, Any, str | None]]:
        """Start a run (`concurrency` requests at once) on the one probe thread; the future holds
        (state, run id, error)."""
        return self._probe_executor().submit(self._run_probes, suite, settings, previous, progress, cancel,
                                             concurrency)

    def run_probes(
        self, suite: str, settings: Settings, previous: ProbeState,
        progress: Callable[[ProbeState], None], cancel: threading.Event, concurrency: int = 1,
    ) -> tuple[ProbeState, Any, str | None]:
        """`submit_probes` and wait for it (for callers on a thread of their own)."""
        return self.submit_probes(suite, settings, previous, progress, cancel, concurrency).result()

    def _probe_executor(self) -> ThreadPoolExecutor:
        """Every probe run on one long-lived thread: a fresh thread per run (each with its own event
        loop, HTTP client and JSON) left about 80 KB per run behind in the allocator's per-thread
        arenas (tests/test_ui_bounded.py, bench/bench_soak.py)."""
        with self._lock:
            if self._probe_pool is None:
                self._probe_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mtp-tune-probe")
            return self._probe_pool

    def _run_probes(
        self, suite: str, settings: Settings, previous: ProbeState,
        progress: Callable[[ProbeState], None], cancel: threading.Event, concurrency: int = 1,
    ) -> tuple[ProbeState, Any, str | None]:
        handle = self.handle
        url = self.base_url
        if handle is None or url is None:
            return previous, None, "no server to probe"
        try:
            return probing.run(
                url=url, api_key=self.api_key, running=handle.running_settings, suite=suite, settings=settings,
                previous=previous, progress=progress, cancel=cancel, store=self.store(), hardware=self.options.hardware,
                plan=self.latest_plan, memory=self._memory_snapshot(),
                repeat=self.options.probe_repeat, n_predict=self.options.probe_n_predict, concurrency=concurrency,
            )
        finally:
            if self._attachment is not None and not cancel.is_set():
                self.refresh_running()  # the draft's n-max is told only after a speculative request

    def _memory_snapshot(self) -> dict[str, Any] | None:
        handle = self.handle
        return handle.memory_snapshot() if handle is not None else None

    def store(self) -> Any:
        """The results store (opened on first use, in a worker thread)."""
        with self._lock:
            if self._store is None:
                # lazy: sqlite3 and the results store load on first use (a worker), not before the first frame
                from tui.core.results.store import open_store

                self._store = open_store()
            return self._store

    # --- shutdown --------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop sampling and the server we started (bounded by the supervisor's grace period)."""
        for unsubscribe in self._unsubscribe:
            try:
                unsubscribe()
            except Exception:  # noqa: BLE001 - shutting down anyway
                pass
        self._unsubscribe.clear()
        self.exact.close()
        if self._sampler is not None:
            self._sampler.stop(timeout_s=2.0)
        if self._probe_pool is not None:
            self._probe_pool.shutdown(wait=False, cancel_futures=True)
        if self._attachment is not None:
            self._attachment.detach(timeout=2.0)
        if self._supervisor is not None:
            self._supervisor.close()
        self.stand_ins.close()
        if self._store is not None:
            try:
                self._store.close()
            except Exception:  # noqa: BLE001
                pass
