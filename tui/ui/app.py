"""The mtp-tune App: app-wide state only (themes, the keymap, quitting); the loop is the `MainScreen`.

Threading rule (Harlequin's): every blocking call (NVML sampling, HTTP, planning, server start and
stop, probes, the results store) runs in a worker that never touches a widget; it posts a message,
and the main screen's handlers hand it to a controller and show what changed (tui/ui/cockpit/screen.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from textual.app import App, SystemCommand
from textual.screen import Screen

from tui.core.config.keymap import KeymapProblem, config_file, read_keymap
from tui.ui import keys
from tui.ui import themes as theme_loader
from textual.binding import Binding

from tui.ui.cockpit.backend import Backend
from tui.ui.cockpit.controller import CockpitController
from tui.ui.cockpit.log_screen import LogScreen
from tui.ui.cockpit.quality_screen import QualityMemoryScreen
from tui.ui.cockpit.reconcile_screen import ReconcileScreen
from tui.ui.cockpit.screen import MainScreen
from tui.ui.cockpit.settings_form import SettingsForm
from tui.ui.help_screen import HelpScreen
from tui.ui.lab.confirm import ConfirmStop, RestartPrompt
from tui.ui.lab.controller import LabController
from tui.ui.lab.search_screen import SearchScreen
from tui.ui.lab.sweep_screen import SweepScreen
from tui.ui.lab.tune_screen import TuneScreen
from tui.ui.lab.verdict_screen import VerdictScreen
from tui.ui.options import AppOptions
from tui.ui.profiles.screen import ProfileDialog
from tui.ui.runs.detail_screen import RunDetailScreen
from tui.ui.runs.screen import RunsScreen, RunsTable
from tui.ui.variants.screen import VariantsScreen
from tui.ui.widgets.question import Answer, Question


class MtpTuneApp(App[int]):
    """Build it with `make_app()`; `tui.cli.app.run_app()` runs it for the CLI."""

    TITLE = "mtp-tune"
    CSS_PATH = "app.tcss"
    ENABLE_COMMAND_PALETTE = True
    AUTO_FOCUS = None  # keys act on the main screen at start; `e` (or Tab) enters the form
    BINDINGS = keys.bindings("app")

    def __init__(self, options: AppOptions, backend: Backend | None = None) -> None:
        super().__init__()
        self.options = options
        self.backend = backend or Backend(options)
        self.cockpit = CockpitController(options, self.backend)
        self.main = MainScreen(self.cockpit)
        self.title = options.title
        self.cursor_blink_enabled = options.cursor_blink
        loaded, problems = theme_loader.load_themes()
        for theme in loaded:
            self.register_theme(theme)
        self._own_themes = [t.name for t in loaded]  # bundled, then the user's: what `t` cycles through
        self._theme_problems = problems
        wanted = options.theme or theme_loader.DEFAULT_THEME
        self.theme = wanted if wanted in self.available_themes else theme_loader.DEFAULT_THEME
        self.keymap, self._keymap_problems = load_keymap()
        if self.keymap:
            self.set_keymap(self.keymap)

    def get_default_screen(self) -> Screen:
        return self.main

    @property
    def lab(self) -> LabController:
        """The lab's controller: the sweep, tune, verdict and search screens show its state."""
        return self.cockpit.lab

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """Plan and series colours for themes that lack them (Textual's builtin ones)."""
        return theme_loader.derived_defaults(self.current_theme.to_color_system().generate())

    def on_mount(self) -> None:
        for problem in self._theme_problems:
            self.notify(problem.message, title="Theme not loaded", severity="warning", timeout=10)
        for kp in self._keymap_problems:
            self.notify(str(kp), title="Keymap line not used", severity="warning", timeout=15)

    def action_next_theme(self) -> None:
        """Switch to the next mtp-tune theme (all themes: command palette, 'theme')."""
        names = self._own_themes or list(self.available_themes)
        current = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(current + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's, then the main screen's actions (from the one key table) when opened there."""
        yield from super().get_system_commands(screen)
        if screen is self.main:
            for action in keys.palette("main"):
                title, help_text = action.palette or ("", "")
                yield SystemCommand(title, help_text, partial(self.run_action, action.action, screen))

    async def action_back_or_quit(self) -> None:
        """`q`: back from a pushed screen (its own Escape action, so it keeps what it keeps), quit from
        the main screen. A screen that takes `q` itself (help, log, runs) never gets here."""
        screen = self.screen
        if screen is self.main or len(self.screen_stack) <= 1:
            await self.action_quit()
            return
        back = next((b.action for b in getattr(screen, "BINDINGS", ()) if isinstance(b, Binding)
                     and "escape" in b.key.split(",")), None)
        if back is not None:
            await screen.run_action(back)
        else:
            self.pop_screen()

    async def action_quit(self) -> None:
        """Quit, after asking when a run is in flight (it names what is lost and what can be resumed)."""
        if self.main.server.quitting or isinstance(self.screen, Question):
            return
        lost = in_flight(self)
        if not lost:
            self._quit_now()
            return

        def answered(choice: str | None) -> None:
            if choice == "quit":
                self._quit_now()

        self.push_screen(Question("Quit mtp-tune?", lost, [Answer("quit", "Quit", "y", "error")], back="Stay"),
                         answered)

    def _quit_now(self) -> None:
        """Cancel the work in flight (the probe's streaming request), then stop the server mtp-tune
        started. A server with a request in flight sits out its whole stop grace period, so the
        request goes first."""
        main = self.main
        if main.server.quitting:
            return
        main.probes.cancel_event.set()
        if main.server.stop_for_quit(main.probes.idle):
            self.notify("stopping llama-server before quitting…", timeout=5)
            return
        self.exit(0)

    def on_unmount(self) -> None:
        self.main.shutdown()
        self.backend.close()


#: What quitting loses of each lab run, and how it comes back (the lab's `running` names).
LOST = {
    "sweep": "The sweep running now is stopped; its finished rows are saved, and g on the sweep screen "
             "(or `mtp-tune sweep` with the same axes) resumes it.",
    "tune": "The tune running now is stopped; its finished trials are saved, and g on the tune screen "
            "(or the same `mtp-tune tune` command) resumes it.",
    "ab": "The MTP on/off run is stopped and its passes so far are lost (it cannot be resumed).",
    "search": "The search running now is stopped and its answer is lost (it cannot be resumed).",
}


def in_flight(app: MtpTuneApp) -> list[str]:
    """What quitting now would lose, one sentence each ([] when nothing runs)."""
    probes = app.main.probes.state
    out = [LOST[app.lab.running]] if app.lab.running in LOST else []
    if probes.running:
        out.append(f"The probe run is cancelled at {probes.done} of {probes.total} requests "
                   "(it is kept in Runs as cancelled; the verdict needs a whole run).")
    if app.main.quality.running is not None:
        out.append(f"The quality measurement of {app.main.quality.running.label} is stopped (settings already "
                   "measured stay measured).")
    if out and app.main.server.alive and not app.options.attach_url:  # said only beside a run's loss
        out.append("llama-server, which mtp-tune started, is stopped.")
    return out


def load_keymap() -> tuple[dict[str, str], tuple[KeymapProblem, ...]]:
    """The `[keymap]` of config.toml, checked against every binding id the UI has."""
    path = config_file()
    if not path.is_file():
        return {}, ()
    return read_keymap(path, known_ids())


def known_ids() -> frozenset[str]:
    """Every binding id a `[keymap]` may name: the one table's and the other screens' own keys."""
    classes = (HelpScreen, LogScreen, ProfileDialog, ReconcileScreen, RunsScreen, SearchScreen, SweepScreen, TuneScreen,
               VariantsScreen, VerdictScreen, SettingsForm, ConfirmStop, RestartPrompt, RunDetailScreen, RunsTable,
               QualityMemoryScreen)
    found = {b.id for cls in classes for b in cls.BINDINGS if isinstance(b, Binding) and b.id}
    return keys.ids() | frozenset(found)


def make_app(options: AppOptions | None = None, backend: Backend | None = None) -> MtpTuneApp:
    """The one factory for the CLI, the tests and the screenshot script."""
    return MtpTuneApp(options or AppOptions(), backend)
