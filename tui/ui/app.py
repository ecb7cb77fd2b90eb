"""The mtp-tune App: one screen for the whole tuning loop.

Threading rule (Harlequin's): every blocking call (NVML sampling, HTTP, planning, server start and
stop, probes, the results store) runs in a `@work(thread=True, exclusive=True, exit_on_error=False,
group=...)` worker that never touches a widget; it posts a message, and the App's handlers own every
state change and hand the new state down to the widgets ("attributes down, messages up").
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterable
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header

from tui.core.gpu.types import GpuSnapshot
from tui.core.options.settings import Settings
from tui.ui import themes as theme_loader
from tui.ui import tuning_actions
from tui.ui.backend import Backend
from tui.ui.messages import (
    ExactPlanned, Planned, ProbeFinished, ProbeUpdated, Sampled, ServerActionDone, ServerUpdated,
)
from tui.ui.options import AppOptions, FixedScreen
from tui.ui.plan_state import PlanState
from tui.ui.view import PlanView, ProbeState, ServerStatus
from tui.ui.widgets.probe_panel import ProbePanel
from tui.ui.widgets.server_panel import ServerPanel
from tui.ui.widgets.settings_form import FieldProblem, SettingsForm
from tui.ui.widgets.tuning_panel import TuningPanel
from tui.ui.widgets.vram_bars import VramBars

NARROW_WIDTH = 110
#: How long quitting waits for a cancelled probe to close its request before stopping the server anyway.
QUIT_CANCEL_WAIT_S = 2.0
#: The stop grace when quitting cancelled a request: llama-server notices a closed connection only at
#: its next 1 s HTTP poll (HTTP_POLLING_SECONDS) and sits out SIGTERM until then; what it was
#: computing is being thrown away, so it gets half a second before SIGKILL.
QUIT_STOP_GRACE_S = 0.5
SHORT_HEIGHT = 34


class MtpTuneApp(App[int]):
    """Build it with `make_app()`; `run_app()` runs it for the CLI."""

    TITLE = "mtp-tune"
    CSS_PATH = "app.tcss"
    ENABLE_COMMAND_PALETTE = True
    AUTO_FOCUS = None  # keys act on the app at start; `e` (or Tab) enters the form
    BINDINGS = [
        Binding("l", "launch", "Launch"),
        Binding("r", "restart", "Restart"),
        Binding("s", "stop_server", "Stop"),
        Binding("p", "run_probes", "Probe"),
        Binding("x", "cancel_probes", "Cancel", show=False),
        Binding("o", "raw_log", "Log"),
        Binding("m", "memory", "Memory", show=False),
        Binding("h", "runs", "Runs"),
        Binding("w", "sweep", "Sweep"),
        Binding("a", "mtp_ab", "MTP on/off"),
        Binding("c", "search_ctx", "Largest ctx", show=False),
        Binding("F", "search_fit", "Smallest fit-target", show=False),
        Binding("f", "profiles", "Profiles"),
        Binding("e", "edit", "Edit"),
        Binding("t", "next_theme", "Theme"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
        # The same actions while typing in a field (letters go to the field there).
        Binding("f1", "help", "Help", show=False, priority=True),
        Binding("f5", "launch", "Launch", show=False, priority=True),
        Binding("f6", "restart", "Restart", show=False, priority=True),
        Binding("f7", "stop_server", "Stop", show=False, priority=True),
        Binding("f8", "run_probes", "Probe", show=False, priority=True),
        Binding("f9", "cancel_probes", "Cancel probes", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(self, options: AppOptions, backend: Backend | None = None) -> None:
        super().__init__()
        self.options = options
        self.fixed: FixedScreen | None = options.fixed
        self.backend = backend or Backend(options)
        self.settings: Settings = options.settings
        self.problems: tuple[FieldProblem, ...] = ()
        self.plan: PlanView | None = None
        self.snapshot: GpuSnapshot | None = None
        self.server: ServerStatus = ServerStatus(attached=bool(options.attach_url))
        self.probes: ProbeState = ProbeState(suites=self.backend.suites())
        self.plans = PlanState()  # the estimate per change, then llama.cpp's exact figures
        self.backend.exact.on_view(lambda rid, view: self.post_message(ExactPlanned(rid, view)))
        self.probe_runs_finished = 0
        self._probe_cancel = threading.Event()
        self._probe_idle = threading.Event()  # clear while a probe worker runs (quit waits for it)
        self._probe_idle.set()
        self._quitting = False
        self.title = options.title
        self.cursor_blink_enabled = options.cursor_blink
        loaded, problems = theme_loader.load_themes()
        for theme in loaded:
            self.register_theme(theme)
        self._own_themes = [t.name for t in loaded]  # bundled, then the user's: what `t` cycles through
        self._theme_problems = problems
        wanted = options.theme or theme_loader.DEFAULT_THEME
        self.theme = wanted if wanted in self.available_themes else theme_loader.DEFAULT_THEME

    # --- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        yield VramBars(id="vram")
        with Horizontal(id="main"):
            yield SettingsForm(self.settings, lazy=self.fixed is None, id="settings-form")
            with Vertical(id="right"):
                yield ServerPanel(id="server")
                yield ProbePanel(self.probes.suites, defer_plots=self.fixed is None, id="probes")
        yield TuningPanel(id="tuning")
        yield Footer(compact=True)

    #: Actions that only make sense on the main screen (hidden from the footer elsewhere).
    MAIN_ONLY = frozenset({"launch", "restart", "stop_server", "run_probes", "cancel_probes", "raw_log", "runs", "memory",
                           "profiles", "edit", "next_theme", "help", "sweep", "mtp_ab", "search_ctx", "search_fit"})

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.MAIN_ONLY and len(self.screen_stack) > 1:
            return False
        return True

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """Plan and series colours for themes that lack them (Textual's builtin ones)."""
        return theme_loader.derived_defaults(self.current_theme.to_color_system().generate())

    def on_mount(self) -> None:
        # The main screen's widgets, kept so handlers reach them while a dialog is on top.
        self.vram = self.query_one(VramBars)
        self.form = self.query_one(SettingsForm)
        self.server_panel = self.query_one(ServerPanel)
        self.probe_panel = self.query_one(ProbePanel)
        self.tuning = self.query_one(TuningPanel)
        for problem in self._theme_problems:
            self.notify(problem.message, title="Theme not loaded", severity="warning", timeout=10)
        self._apply_size_classes()
        if self.fixed is not None:
            self._show_fixed(self.fixed)
            return
        self.call_after_refresh(self._start_live)

    def _start_live(self) -> None:
        """Telemetry, the server watch and the autolaunch start after the first frame is on screen."""
        self.form.announce()  # validates the starting settings (and plans them)
        self.backend.on_server_change(lambda: self.post_message(ServerUpdated()))
        self.backend.start_sampler(lambda snap: self.post_message(Sampled(snap)))
        self.server = self.backend.status()
        self._show_server()
        if self.options.autolaunch and self.backend.can_launch:
            self.call_after_refresh(self.action_launch)

    def on_resize(self) -> None:
        self._apply_size_classes()

    def _apply_size_classes(self) -> None:
        self.screen.set_class(self.size.width < NARROW_WIDTH, "-narrow")
        self.screen.set_class(self.size.height < SHORT_HEIGHT, "-short")

    def _show_fixed(self, fixed: FixedScreen) -> None:
        self.snapshot = fixed.snapshot  # type: ignore[assignment]
        self.plan = fixed.plan
        self.server = fixed.server
        self.probes = dataclasses.replace(fixed.probes, suites=self.probes.suites)
        self.vram.show(self.plan, self.snapshot)
        self._show_server()
        self.probe_panel.show(self.probes)
        if self.server.state == "ready":
            self.form.mark_running(self.settings)

    # --- settings -> validation -> plan ----------------------------------------------------------

    @on(SettingsForm.Changed)
    def _settings_changed(self, event: SettingsForm.Changed) -> None:
        self.settings = event.settings
        problems = [*event.parse_errors, *self.backend.validate(event.settings, self._device_count())]
        self.problems = tuple(problems)
        form = self.form
        form.show_problems(problems)
        restart = form.mark_running(self.backend.running_settings if self.server.alive else None)
        self._show_server(restart_needed=restart)
        if self.fixed is not None:
            return
        if any(p.severity == "error" for p in problems):
            if self.plans.exact_pending:  # still typing: the dry run waits for the settings to settle
                self.plans.exact_rid = self.backend.exact.touch() or self.plans.exact_rid
            return  # keep the last plan: it is for the last valid settings
        if self.snapshot is None and not self.options.simulate:
            return  # real GPUs: the first sample brings the devices, and the first plan
        self._request_plan(event.settings)

    @property
    def _plan_seq(self) -> int:
        """The newest settings change's number (a plan for an older one is not shown)."""
        return self.plans.seq

    def _request_plan(self, settings: Settings, keep_exact: bool = False) -> None:
        """The instant estimate, and llama.cpp's exact figures from the exact runner (debounced, the
        stale dry run stopped); only the newest request's answers are shown (`PlanState`).
        `keep_exact`: the exact request already made stands."""
        from tui.ui.adapters.planning import plan_is_quick

        seq = self.plans.next_seq()
        if plan_is_quick(settings):  # a millisecond: no thread hand-offs between key and bars
            self._take_estimate(self.backend.plan(settings, self.snapshot, seq))
        else:  # the header is read (a big file takes a while), or RPC servers asked, in the worker
            self._plan_worker(settings, seq, self.snapshot)
        asked = (settings, self.backend.exact.devices_key(settings, self.snapshot))
        if self.plans.wants_exact(asked, keep_exact):
            rid, why = self.backend.exact.request(settings, self.snapshot, self.server.alive)  # returns at once
            self.plans.exact_asked(asked, rid, why)

    def _device_count(self) -> int | None:
        if self.snapshot is not None:
            return len(self.snapshot.devices) or None
        return self.backend.device_count()

    @work(thread=True, exclusive=True, exit_on_error=False, group="plan")
    def _plan_worker(self, settings: Settings, seq: int, snapshot: GpuSnapshot | None) -> None:
        self.post_message(Planned(self.backend.plan(settings, snapshot, seq)))

    @on(Planned)
    def _planned(self, message: Planned) -> None:
        self._take_estimate(message.plan)

    def _take_estimate(self, plan: PlanView) -> None:
        shown, cancel = self.plans.take_estimate(plan)
        if cancel:
            self.backend.exact.cancel()  # nothing to make exact: the estimate could not plan them
        self._show_plan(shown)

    @on(ExactPlanned)
    def _exact_planned(self, message: ExactPlanned) -> None:
        self._show_plan(self.plans.take_exact(message.rid, message.plan))

    def _show_plan(self, plan: PlanView | None) -> None:
        if plan is None:
            return  # stale, or the estimate for these settings is still on its way
        self.plan = plan
        self.backend.latest_plan = plan
        self.vram.show(self.plan, self.snapshot)

    @on(Sampled)
    def _sampled(self, message: Sampled) -> None:
        first = self.snapshot is None
        self.snapshot = message.snapshot
        self.vram.show(self.plan, self.snapshot)
        if first and self.plan is None and not any(p.severity == "error" for p in self.problems):
            # the first plan needs the devices (simulated ones were known: the exact request stands)
            self._request_plan(self.settings, keep_exact=self.options.simulate)

    # --- server ----------------------------------------------------------------------------------

    def _show_server(self, restart_needed: frozenset[str] | None = None) -> None:
        if restart_needed is None:
            restart_needed = self.form.restart_fields
        self.server_panel.show(self.server, restart_needed)

    def _blocked(self, action: str) -> str | None:
        if self.fixed is not None:
            return "this is a fixed preview; nothing runs"
        if self.options.attach_url:
            return f"attached to {self.options.attach_url}: mtp-tune does not {action} a server it did not start"
        errors = [p for p in self.problems if p.severity == "error"]
        if action in ("launch", "restart") and errors:
            first = errors[0]
            return f"fix the settings first: {first.field.replace('_', '-')}: {first.message}"
        if action in ("launch", "restart") and not self.backend.can_launch:
            return self.backend.cannot_launch_reason()
        return None

    def action_launch(self) -> None:
        """Start llama-server with the settings on screen."""
        reason = self._blocked("launch")
        if reason:
            self.notify(reason, title="Cannot launch", severity="warning")
            return
        if self.server.alive:
            self.notify("the server is already running; press r to restart it with these settings")
            return
        self._server_worker("launch", self.settings)

    def action_restart(self) -> None:
        """Restart llama-server with the settings on screen."""
        reason = self._blocked("restart")
        if reason:
            self.notify(reason, title="Cannot restart", severity="warning")
            return
        self._server_worker("restart", self.settings)

    def action_stop_server(self) -> None:
        """Stop llama-server (SIGTERM, grace period, then SIGKILL)."""
        reason = self._blocked("stop")
        if reason:
            self.notify(reason, severity="warning")
            return
        self._server_worker("stop", None)

    @work(thread=True, exclusive=True, exit_on_error=False, group="server")
    def _server_worker(self, action: str, settings: Settings | None) -> None:
        error = self.backend.server_action(action, settings)
        self.post_message(ServerActionDone(action, error))

    @on(ServerUpdated)
    def _server_updated(self) -> None:
        was_alive = self.server.alive
        self.server = self.backend.status()
        if self.server.alive != was_alive or self.server.state == "ready":
            self.form.mark_running(self.backend.running_settings if self.server.alive else None)
        self._show_server()

    @on(ServerActionDone)
    def _server_action_done(self, message: ServerActionDone) -> None:
        self.server = self.backend.status()
        self.form.mark_running(self.backend.running_settings if self.server.alive else None)
        self._show_server()
        if message.error:
            self.notify(message.error, title=f"{message.action} failed", severity="error", timeout=12)
        elif message.action in ("launch", "restart") and self.server.state == "ready":
            self._reconcile_worker()
        if not self.options.simulate and not any(p.severity == "error" for p in self.problems) and self.snapshot:
            self._request_plan(self.settings)  # real GPUs: exact mode waits while our server runs there
        if self._quitting and message.action == "stop":
            self.exit(0)

    @work(thread=True, exclusive=True, exit_on_error=False, group="reconcile")
    def _reconcile_worker(self) -> None:
        self.backend.reconcile_exact()  # notifies: the server panel re-reads its status

    def action_memory(self) -> None:
        """Memory after the launch: estimate, exact, reported (and NVML on a GPU) side by side."""
        from tui.ui.adapters.reconciling import nvml_by_device
        from tui.ui.screens.reconcile import ReconcileScreen

        nvml = None if self.fixed is not None else nvml_by_device(self.snapshot)
        self.push_screen(ReconcileScreen(self.server.reconcile, nvml, self.server.reconcile_exact_reason))

    # --- probes ----------------------------------------------------------------------------------

    def action_run_probes(self) -> None:
        """Run the chosen probe suite against the running server."""
        if self.fixed is not None:
            self.notify("this is a fixed preview; nothing runs", severity="warning")
            return
        if self.probes.running:
            self.notify("a probe run is already going; x cancels it")
            return
        if self.server.state not in ("ready", "attached"):
            self.notify("launch the server first (l), or attach to one with --attach URL", severity="warning")
            return
        suite = self.probe_panel.suite
        self._probe_cancel = threading.Event()
        self._probe_idle.clear()
        self.probes = dataclasses.replace(self.probes, running=True, done=0, total=0,
                                          message=f"starting the {suite} suite…")
        self.probe_panel.show(self.probes)
        self._probe_worker(suite, self.settings, self._probe_cancel)

    def action_cancel_probes(self) -> None:
        """Cancel the probe run (the request in flight finishes first)."""
        if not self.probes.running:
            return
        self._probe_cancel.set()
        self.probes = dataclasses.replace(self.probes, message="cancelling after the current request…")
        self.probe_panel.show(self.probes)

    @work(exclusive=True, exit_on_error=False, group="probe")
    async def _probe_worker(self, suite: str, settings: Settings, cancel: threading.Event) -> None:
        """Await the run on the backend's one probe thread: no thread of its own per run (a thread
        per run left its allocator arenas and stack behind, bench/bench_soak.py)."""
        def progress(state: ProbeState) -> None:
            self.post_message(ProbeUpdated(state))

        try:
            future = self.backend.submit_probes(suite, settings, self.probes, progress, cancel)
        except Exception as exc:  # noqa: BLE001 - reported as a failed run, never a traceback
            self._probe_idle.set()
            self.post_message(ProbeFinished(self.probes, None, f"the probe run could not start: {exc}"))
            return
        future.add_done_callback(lambda _f: self._probe_idle.set())
        try:
            state, run_id, error = await asyncio.wrap_future(future)
        except Exception as exc:  # noqa: BLE001
            state, run_id, error = self.probes, None, f"the probe run failed: {exc}"
        self.post_message(ProbeFinished(state, run_id, error))

    @on(ProbeUpdated)
    def _probe_updated(self, message: ProbeUpdated) -> None:
        if not self.probes.running:
            return  # a late update after the run ended
        self.probes = message.state
        self.probe_panel.show(self.probes)

    @on(ProbeFinished)
    def _probe_finished(self, message: ProbeFinished) -> None:
        self.probe_runs_finished += 1
        self.probes = dataclasses.replace(message.state, running=False)
        self.probe_panel.show(self.probes)
        if message.error:
            self.notify(message.error, title="Probe run failed", severity="error", timeout=12)
        # A saved run says so in the panel ("ok: 6 request(s), run 12"); no toast per run, which
        # piled up render state over a long session of probing (bench/bench_soak.py).

    # --- screens and other actions -------------------------------------------------------------

    def action_raw_log(self) -> None:
        """The whole server log of this launch."""
        from tui.ui.screens.log_view import LogScreen

        lines, path = self.backend.full_log()
        if self.fixed is not None:
            lines, path = list(self.server.log_tail), self.server.log_path
        self.push_screen(LogScreen(lines, path))

    def action_runs(self) -> None:
        """Stored probe runs: history, compare two, export."""
        from tui.ui.screens.runs import RunsScreen

        fixed = self.fixed
        self.push_screen(RunsScreen(self.backend, fixed=fixed.runs if fixed else None,
                                    comparison=fixed.comparison if fixed else (),
                                    compared=fixed.compared if fixed else ()))

    def action_profiles(self) -> None:
        """Save, load, export or import settings."""
        from tui.ui.screens.profile_dialog import ProfileDialog

        def loaded(settings: Settings | None) -> None:
            if settings is not None:
                self.form.load(settings)

        self.push_screen(ProfileDialog(self.backend, self.settings), loaded)

    def action_sweep(self) -> None:
        """Sweep the knobs that matter from the settings on screen (tui/ui/tuning_actions.py)."""
        tuning_actions.open_sweep(self)

    def action_mtp_ab(self) -> None:
        """MTP on vs off, interleaved, and the verdict for the workload."""
        tuning_actions.open_ab(self)

    def action_search_ctx(self) -> None:
        """The largest context that fits (planned, then confirmed by a launch)."""
        tuning_actions.open_search(self, "ctx")

    def action_search_fit(self) -> None:
        """The smallest --fit-target that survives the first decode."""
        tuning_actions.open_search(self, "fit")

    def action_help(self) -> None:
        """Keys and what each panel shows."""
        from tui.ui.screens.help import HelpScreen

        self.push_screen(HelpScreen())

    def action_edit(self) -> None:
        """Move the focus into the settings form (Escape leaves it)."""
        self.form.focus_field("ctx_size")

    def action_next_theme(self) -> None:
        """Switch to the next mtp-tune theme (all themes: command palette, 'theme')."""
        names = self._own_themes or list(self.available_themes)
        current = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(current + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for title, help_text, action in (
            ("Launch server", "start llama-server with the settings on screen", self.action_launch),
            ("Restart server", "restart llama-server with the settings on screen", self.action_restart),
            ("Stop server", "stop llama-server", self.action_stop_server),
            ("Run probes", "run the chosen probe suite", self.action_run_probes),
            ("Cancel probes", "cancel the probe run", self.action_cancel_probes),
            ("Server log", "the whole server log", self.action_raw_log),
            ("Memory after launch", "estimate, exact, reported (and NVML) side by side", self.action_memory),
            ("Runs", "history, compare, export", self.action_runs),
            ("Sweep", "axes over the knobs that matter, planned, measured, best saved", self.action_sweep),
            ("MTP on vs off", "interleaved passes, the verdict for your workload", self.action_mtp_ab),
            ("Largest context", "the largest --ctx-size that fits (plan, then a launch)", self.action_search_ctx),
            ("Smallest fit-target", "the smallest --fit-target that survives the first decode", self.action_search_fit),
            ("Profiles", "save TOML, write INI section, load, import command line", self.action_profiles),
            ("Next theme", "cycle mtp-tune's themes", self.action_next_theme),
        ):
            yield SystemCommand(title, help_text, action)

    async def action_quit(self) -> None:
        """Quit: cancel the work in flight (the probe's streaming request), then stop the server
        mtp-tune started. A server with a request in flight sits out its whole stop grace period, so
        the request goes first."""
        if self._quitting:
            return
        self._probe_cancel.set()
        if self.fixed is None and self.server.alive and not self.options.attach_url:
            self._quitting = True
            self.notify("stopping llama-server before quitting…", timeout=5)
            self._quit_worker(self._probe_idle, busy=not self._probe_idle.is_set())
            return
        self.exit(0)

    @work(thread=True, exclusive=True, exit_on_error=False, group="quit")
    def _quit_worker(self, probe_idle: threading.Event, busy: bool) -> None:
        """Wait (bounded) for the cancelled probe to close its request, then stop the server."""
        probe_idle.wait(QUIT_CANCEL_WAIT_S)
        grace = QUIT_STOP_GRACE_S if busy else None  # None: the supervisor's own grace period
        self.post_message(ServerActionDone("stop", self.backend.server_action("stop", None, grace=grace)))

    def on_unmount(self) -> None:
        self._probe_cancel.set()
        self.backend.close()


def make_app(options: AppOptions | None = None, backend: Backend | None = None) -> MtpTuneApp:
    """The one factory for the CLI, the tests and the screenshot script."""
    return MtpTuneApp(options or AppOptions(), backend)
