"""The main screen: the whole tuning loop on one screen, and its keys (Posting's `MainScreen`).

It composes the layout, owns the main keys (`MainScreen.BINDINGS`, from `tui.ui.keys`: inert on any
other screen, no guard needed) and the controllers that own the work (tui/ui/cockpit/controller.py). Workers
post messages here; the handlers hand them to a controller and show what comes back ("attributes
down, messages up"). Widgets only display what they are given. Quality keys: `QualityKeys` (quality_keys.py).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Header

from tui.core.options.settings import Settings
from tui.ui import keys
from tui.ui.cockpit import lab_keys, probe_start
from tui.ui.cockpit.controller import CockpitController
from tui.ui.cockpit.key_bar import KeyBar
from tui.ui.cockpit.log_screen import LogScreen
from tui.ui.cockpit.messages import (
    Calibrated, CalibrationProgressed, ExactPlanned, Planned, ProbeFinished, ProbeUpdated, RemoteReading, Sampled,
    ServerActionDone, ServerUpdated,
)
from tui.ui.cockpit.probe_panel import ProbePanel
from tui.ui.cockpit.quality_keys import QualityKeys
from tui.ui.cockpit.reconcile_screen import ReconcileScreen
from tui.ui.cockpit.server_panel import ServerPanel
from tui.ui.cockpit.settings_form import SettingsForm
from tui.ui.cockpit.tuning_panel import TuningPanel
from tui.ui.cockpit.views import PlanView
from tui.ui.cockpit.vram_bars import VramBars
from tui.ui.format import markup_safe
from tui.ui.help_screen import HelpScreen
from tui.ui.host import Notice
from tui.ui.lab.confirm import RestartPrompt
from tui.ui.lab.controller import LabController
from tui.ui.lab.search_screen import SearchScreen
from tui.ui.lab.sweep_screen import SweepScreen
from tui.ui.lab.tune_screen import TuneScreen
from tui.ui.lab.verdict_screen import VerdictScreen
from tui.ui.lab.messages import (
    AbFinished, AbProgressed, SearchFinished, SearchProgressed, SweepFinished, SweepProgressed, TuneFinished,
    TuneProgressed, TuningChanged,
)
from tui.ui.profiles.screen import ProfileDialog
from tui.ui.runs.screen import RunsScreen
from tui.ui.variants.screen import VariantsScreen

if TYPE_CHECKING:
    from tui.ui.app import MtpTuneApp

#: The screen that shows an experiment's end itself (a toast is for the user elsewhere).
OWN_SCREEN: dict[type, type] = {SweepFinished: SweepScreen, TuneFinished: TuneScreen, AbFinished: VerdictScreen,
                                SearchFinished: SearchScreen}
NARROW_WIDTH = 110
SHORT_HEIGHT = 34


@runtime_checkable
class TuningWatcher(Protocol):
    """A screen that shows a tuning action (sweep, verdict, search) while it runs."""

    def tuning_changed(self, lab: LabController) -> None: ...


class MainScreen(QualityKeys, Screen[None]):
    """The VRAM bars, the settings form, the server and probe panels, and the tuning line."""

    BINDINGS = keys.bindings("main")

    def __init__(self, cockpit: CockpitController) -> None:
        super().__init__()
        self.cockpit = cockpit
        self.options, self.backend, self.fixed = cockpit.options, cockpit.backend, cockpit.options.fixed
        self.server, self.plan, self.probes = cockpit.server, cockpit.plan, cockpit.probes
        self.calibration, self.lab, self.quality = cockpit.calibration, cockpit.lab, cockpit.quality
        cockpit.host.attach(self)  # the controllers' workers run here and post here

    @property
    def mtp_app(self) -> MtpTuneApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        yield VramBars(id="vram")
        with Horizontal(id="main"):
            yield SettingsForm(self.plan.settings, lazy=self.fixed is None, id="settings-form")
            with Vertical(id="right"):
                yield ServerPanel(id="server")
                yield ProbePanel(self.probes.state.suites, defer_plots=self.fixed is None, id="probes")
        yield TuningPanel(id="tuning")
        yield KeyBar(id="keys")

    def on_mount(self) -> None:
        self.vram = self.query_one(VramBars)
        self.form = self.query_one(SettingsForm)
        self.server_panel = self.query_one(ServerPanel)
        self.probe_panel = self.query_one(ProbePanel)
        self.tuning_panel = self.query_one(TuningPanel)
        self.key_bar = self.query_one(KeyBar)
        self._apply_size_classes()
        if self.fixed is not None:
            self._show_fixed()
            return
        self.call_after_refresh(self._start_live)

    def _start_live(self) -> None:
        """Telemetry, the server watch and the autolaunch start after the first frame is on screen."""
        self.form.announce()  # validates the starting settings (and plans them)
        self.server.watch()
        self.backend.start_sampler(lambda snap: self.post_message(Sampled(snap)))
        self._show_server()
        if self.options.autolaunch and self.backend.can_launch:
            self.call_after_refresh(self.action_launch)

    def on_resize(self) -> None:
        self._apply_size_classes()

    def _apply_size_classes(self) -> None:
        self.set_class(self.app.size.width < NARROW_WIDTH, "-narrow")
        self.set_class(self.app.size.height < SHORT_HEIGHT, "-short")

    def _show_fixed(self) -> None:
        fixed = self.fixed
        assert fixed is not None
        self.plan.snapshot = fixed.snapshot  # type: ignore[assignment]
        self.plan.view = fixed.plan
        self.server.status = fixed.server
        self.probes.state = dataclasses.replace(fixed.probes, suites=self.probes.state.suites)
        self.vram.show(self.plan.view, self.plan.snapshot)
        self._show_server()
        self.probe_panel.show(self.probes.state)
        if self.server.status.state == "ready":
            self.form.mark_running(self.plan.settings)

    def _notice(self, notice: Notice | None) -> None:
        if notice is not None:
            self.app.notify(markup_safe(notice.message, keep_lines=True), title=markup_safe(notice.title), severity=notice.severity,  # type: ignore[arg-type]
                            **({} if notice.timeout is None else {"timeout": notice.timeout}))

    # --- settings -> validation -> plan ----------------------------------------------------------

    @on(SettingsForm.Changed)
    def _settings_changed(self, event: SettingsForm.Changed) -> None:
        problems = self.plan.validate(event.settings, event.parse_errors)
        self.form.show_problems(list(problems))
        restart = self.form.mark_running(self.server.running_settings())
        self._show_server(restart_needed=restart)
        if self.fixed is None:
            if self.calibration.settings_changed(event.settings):
                self.vram.status(self.calibration.status)
            self._show_plan(self.plan.replan())
            self._show_quality()

    @on(Planned)
    def _planned(self, message: Planned) -> None:
        self._show_plan(self.plan.take_estimate(message.plan))

    @on(RemoteReading)
    def _remote_reading(self, message: RemoteReading) -> None:
        if self.plan.reading(message.seq):
            self.vram.busy(f"reading the header of {message.label} (range requests, no download)…")

    @on(ExactPlanned)
    def _exact_planned(self, message: ExactPlanned) -> None:
        shown = self.plan.take_exact(message.rid, message.plan)
        self._show_plan(shown)
        if shown is not None and shown.exact == "exact" and self.calibration.exact_done(self.plan.settings):
            self.vram.status(self.calibration.status)  # llama.cpp measured the model: calibrate on it

    @on(CalibrationProgressed)
    def _calibration_progressed(self, message: CalibrationProgressed) -> None:
        if self.calibration.progressed(message):
            self.vram.status(self.calibration.status)

    @on(Calibrated)
    def _calibrated(self, message: Calibrated) -> None:
        replan, notice = self.calibration.finished(message)
        self.vram.status(self.calibration.status)
        self._notice(notice)
        if replan:
            self._show_plan(self.plan.recalibrated())

    def _show_plan(self, plan: PlanView | None) -> None:
        if plan is not None:
            self.vram.show(plan, self.plan.snapshot)

    @on(Sampled)
    def _sampled(self, message: Sampled) -> None:
        first_plan = self.plan.sampled(message.snapshot)
        self.vram.show(self.plan.view, self.plan.snapshot)
        self._show_plan(first_plan)

    # --- server ----------------------------------------------------------------------------------

    def _show_server(self, restart_needed: frozenset[str] | None = None) -> None:
        if restart_needed is None:
            restart_needed = self.form.restart_fields
        self.server_panel.show(self.server.status, restart_needed)
        self.key_bar.show(self.server.status, self.probes.state)

    def action_launch(self) -> None:
        """Start llama-server with the settings on screen (asking first when the plan says it will fail)."""
        self._launch("launch")

    def action_restart(self) -> None:
        """Restart llama-server with the settings on screen (asking first, as a launch does)."""
        self._launch("restart")

    def _launch(self, action: str) -> None:
        settings, problems = self.plan.settings, self.plan.problems
        question = self.server.launch_question(action, self.plan.view, problems)
        if question is None:
            self._notice(self.server.act(action, settings, problems))
            return

        def answered(choice: str | None) -> None:
            if choice in (action, "stand-ins"):  # the settings asked about, even if the form moved meanwhile
                self._notice(self.server.act(action, settings, problems, stand_ins=choice == "stand-ins"))

        self.app.push_screen(question, answered)

    def action_stop_server(self) -> None:
        """Stop llama-server (SIGTERM, grace period, then SIGKILL)."""
        self._notice(self.server.act("stop", None, self.plan.problems))

    @on(ServerUpdated)
    def _server_updated(self) -> None:
        if self.server.updated():
            self.form.mark_running(self.server.running_settings())
        self._show_server()

    @on(ServerActionDone)
    def _server_action_done(self, message: ServerActionDone) -> None:
        self.server.action_done(message)
        self.form.mark_running(self.server.running_settings())
        self._show_server()
        if message.error:
            self._notice(Notice(message.error, f"{message.action} failed", "error", 12))
        self._show_plan(self.plan.after_server_action())
        if self.server.quitting and message.action == "stop":
            self.app.exit(0)

    # --- probes ----------------------------------------------------------------------------------

    def action_run_probes(self) -> None:
        """Run the chosen probe suite against the running server, as many requests at once as asked."""
        probe_start.run_probes(self)

    def action_cancel_probes(self) -> None:
        """Cancel the probe run (the request in flight finishes first)."""
        state = self.probes.cancel()
        if state is not None:
            self.probe_panel.show(state)

    @on(ProbeUpdated)
    def _probe_updated(self, message: ProbeUpdated) -> None:
        state = self.probes.updated(message.state)
        if state is not None:
            self.probe_panel.show(state)
        self.key_bar.show(self.server.status, self.probes.state)

    @on(ProbeFinished)
    def _probe_finished(self, message: ProbeFinished) -> None:
        self.probe_panel.show(self.probes.finished(message))
        speeds = [x.tg_median for x in self.probes.state.summaries if x.tg_median]
        self.lab.tg_seen = min(speeds) if speeds else self.lab.tg_seen  # a long run's expected duration
        self.key_bar.show(self.server.status, self.probes.state)
        if message.error:
            self._notice(Notice(message.error, "Probe run failed", "error", 12))
        # A saved run says so in the panel ("ok: 6 request(s), run 12"); no toast per run, which
        # piled up render state over a long session of probing (bench/bench_soak.py).

    # --- the lab (tui/ui/cockpit/lab_keys.py opens its screens) --------------------------------

    @on(SweepProgressed)
    @on(SweepFinished)
    @on(AbProgressed)
    @on(AbFinished)
    @on(SearchProgressed)
    @on(SearchFinished)
    @on(TuneProgressed)
    @on(TuneFinished)
    def _tuning_news(self, message: Message) -> None:
        notice = self.lab.take(message)
        if not isinstance(self.app.screen, OWN_SCREEN.get(type(message), ())):  # its own screen shows it: a
            self._notice(notice)  # toast there covered the summary it repeats
        self._show_tuning()
        offer = self.lab.take_offer()
        if offer is not None:  # an experiment stopped the user's server: offer it back, as it ran
            self.app.push_screen(RestartPrompt(offer.what, offer.settings),
                                 lambda yes: self._notice(self.server.act("launch", offer.settings, ())) if yes else None)

    @on(TuningChanged)
    def _tuning_changed(self, message: TuningChanged) -> None:
        self._show_tuning(message.extra)

    def _show_tuning(self, extra: str = "") -> None:
        self.tuning_panel.show(self.lab.line(extra))
        for screen in self.app.screen_stack:
            if isinstance(screen, TuningWatcher):
                screen.tuning_changed(self.lab)

    def start_ab(self, concurrency: int = 1) -> str | None:
        """MTP on vs off with what this screen shows: its settings, the probe panel's suite, and the
        probe options (repeats become passes per side), at 1 and at `concurrency` at once when more;
        returns why it cannot start."""
        return self.lab.start_ab(self.plan.settings, suite=self.probe_panel.suite,
                                 passes=max(1, self.options.probe_repeat), n_predict=self.options.probe_n_predict,
                                 concurrency=concurrency)

    def action_sweep(self) -> None:
        """Sweep the knobs that matter from the settings on screen."""
        lab_keys.open_sweep(self)

    def action_mtp_ab(self) -> None:
        """MTP on vs off, interleaved, and the verdict for the workload."""
        lab_keys.open_ab(self)

    def action_search_ctx(self) -> None:
        """The largest context that fits (planned, then confirmed by a launch)."""
        lab_keys.open_search(self, "ctx")

    def action_search_fit(self) -> None:
        """The smallest --fit-target that survives the first decode."""
        lab_keys.open_search(self, "fit")

    def action_tune(self) -> None:
        """Tune for me: an MTP-aware search for the best configuration for a workload."""
        lab_keys.open_tune(self)

    # --- other screens -------------------------------------------------------------------------

    def action_memory(self) -> None:
        """Memory after the launch: estimate, exact, reported (and NVML on a GPU) side by side."""
        status = self.server.status
        nvml = None if self.fixed is not None else self.cockpit.nvml_by_device(self.plan.snapshot)
        self.app.push_screen(ReconcileScreen(status.reconcile, nvml, status.reconcile_exact_reason))

    def action_raw_log(self) -> None:
        """The whole server log of this launch."""
        lines, path = self.cockpit.full_log()
        if self.fixed is not None:
            lines, path = list(self.server.status.log_tail), self.server.status.log_path
        self.app.push_screen(LogScreen(lines, path))

    def action_runs(self) -> None:
        """Stored probe runs: history, compare two, export."""
        fixed, runs = self.fixed, self.cockpit.runs
        self.app.push_screen(RunsScreen(runs if fixed is None else runs.preview(fixed.runs, fixed.comparison,
                                                                                  fixed.compared)))

    def action_profiles(self) -> None:
        """Save, load, export or import settings."""
        def loaded(settings: Settings | None) -> None:
            if settings is not None:
                self.form.load(settings)

        self.app.push_screen(ProfileDialog(self.cockpit.profiles, self.plan.settings), loaded)

    def action_variants(self) -> None:
        """Every quant of the form's hf-repo planned side by side; Enter puts the chosen file in the form."""
        if self.fixed is not None:
            self._notice(Notice("this is a fixed preview; nothing runs"))
            return
        picker = self.cockpit.variants(self.plan.settings, self.plan.snapshot)
        if picker.why_not:
            self._notice(Notice(picker.why_not, "Variants", timeout=10))
            return

        def chosen(settings: Settings | None) -> None:
            if settings is not None:
                self.form.load(settings)  # validated and planned as any change (estimate, then exact)

        self.app.push_screen(VariantsScreen(picker), chosen)

    def action_help(self) -> None:
        """Keys (with the user's keymap) and what each panel shows."""
        self.app.push_screen(HelpScreen(self.mtp_app.keymap))

    def action_edit(self) -> None:
        """Move the focus into the settings form (Escape leaves it)."""
        self.form.focus_field("ctx_size")

    def action_find_field(self) -> None:
        """Jump to a settings field by name (the form's picker)."""
        self.form.pick_field()

    def shutdown(self) -> None:
        """Quitting: cancel the probe run and the tuning action (bounded wait for its server)."""
        self.cockpit.shutdown()
