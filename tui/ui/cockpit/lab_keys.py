"""The cockpit's lab keys (`w` sweep, `a` MTP on/off, `c`/`F` searches, `T` tune): which lab screen,
with what from the cockpit (the settings on screen, the probe panel's suite, the probe options).

The work runs in the lab controller; an action that would stop the user's own server asks first
(`lab.confirm.confirm_then`), and cancelling leaves the server running.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tui.core.options.settings import Settings
from tui.core.options.settings import settings_json
from tui.ui.lab.confirm import confirm_then
from tui.ui.lab.search_screen import SearchScreen
from tui.ui.lab.sweep_screen import SweepScreen, default_setup
from tui.ui.lab.tune_ops import default_setup as default_tune_setup
from tui.ui.lab.tune_screen import TuneScreen
from tui.ui.lab.verdict_screen import VerdictScreen

if TYPE_CHECKING:
    from tui.ui.cockpit.screen import MainScreen

KNOBS = {"ctx": "ctx_size", "fit": "fit_target"}


def open_sweep(main: MainScreen) -> None:
    """The sweep screen, set up from the settings on screen (the last setup kept while the App runs)."""
    lab = main.lab
    setup = lab.sweep_setup or default_setup(main.probe_panel.suite, main.options.probe_repeat,
                                             main.options.probe_n_predict)

    def closed(_result: Any) -> None:
        lab.sweep_setup = screen.setup

    screen = SweepScreen(lab, main.plan.settings, setup, main.probes.state.suites)
    main.app.push_screen(screen, closed)


def open_ab(main: MainScreen) -> None:
    """The verdict screen; starts MTP on vs off (after asking, when the user's server would be stopped)
    unless one runs or a verdict for these settings exists."""
    lab = main.lab
    current = lab.verdict is not None and lab.verdict.settings == settings_json(main.plan.settings.redacted())
    main.app.push_screen(VerdictScreen(lab, workload=lab.ab_workload))
    if lab.running == "ab" or current:
        return
    reason = lab.blocked()
    if reason:
        main.app.notify(reason, title="Cannot run MTP on vs off", severity="warning")
        return

    def go() -> None:
        reason = main.start_ab()
        if reason:
            main.app.notify(reason, title="Cannot run MTP on vs off", severity="warning")

    confirm_then(main.app, lab.stops_server(), "the MTP on/off run", main.server.running_settings(), go)


def with_value(settings: Settings, knob: str, value: int) -> Settings:
    """The settings on screen with only the searched knob changed (the rest as the user left it)."""
    return replace(settings, ctx_size=value) if knob == "ctx_size" else replace(settings, fit_target=[value])


def open_search(main: MainScreen, which: str) -> None:
    """Start a search (after asking, when the user's server would be stopped) and show it; an
    accepted answer is loaded into the settings form."""
    knob = KNOBS[which]
    lab = main.lab

    def accepted(value: int | None) -> None:
        if value is not None:
            main.form.load(with_value(main.plan.settings, knob, value))
            main.app.notify(f"{'--ctx-size' if knob == 'ctx_size' else '--fit-target'} set in the form; "
                            "l launches with it", title="Search")

    def show() -> None:
        main.app.push_screen(SearchScreen(lab, knob), accepted)

    if lab.running == "search":
        show()
        return
    settings = main.plan.settings

    def go() -> None:
        reason = lab.start_search(knob, settings)
        if reason:
            main.app.notify(reason, title="Cannot search", severity="warning")
            return
        show()

    reason = lab.blocked()
    if reason:
        main.app.notify(reason, title="Cannot search", severity="warning")
        return
    what = "the largest-context search" if knob == "ctx_size" else "the smallest fit-target search"
    confirm_then(main.app, lab.stops_server(), what, main.server.running_settings(), go)


def open_tune(main: MainScreen) -> None:
    """The tune screen over the settings on screen: the last setup (kept while the App runs), or one
    that fixes what the form sets and searches MTP on/off and what the form leaves unset."""
    lab = main.lab

    def closed(_result: Any) -> None:
        lab.tune_setup = screen.setup

    screen = TuneScreen(lab, main.plan.settings, lab.tune_setup or default_tune_setup(main.plan.settings))
    main.app.push_screen(screen, closed)
