"""The main screen's tuning actions (`w` sweep, `a` MTP on/off, `c`/`F` searches, `T` tune): which screen, with what.

The work runs in the main screen's `TuningController`; these functions choose the settings on
screen, the suite chosen in the probe panel and the probe options, and push the screen that shows it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tui.core.options.settings import Settings
from tui.ui.adapters.tuning import simulated

if TYPE_CHECKING:
    from tui.ui.screens.main import MainScreen

KNOBS = {"ctx": "ctx_size", "fit": "fit_target"}


def open_sweep(main: MainScreen) -> None:
    """The sweep screen, set up from the settings on screen (the last setup kept while the App runs)."""
    from tui.ui.screens.sweep import SweepScreen, default_setup

    tuning = main.tuning
    setup = tuning.sweep_setup or default_setup(main.probe_panel.suite, main.options.probe_repeat,
                                                main.options.probe_n_predict)

    def closed(_result: Any) -> None:
        tuning.sweep_setup = screen.setup

    screen = SweepScreen(main.plan.settings, setup, main.probes.state.suites, simulate=simulated(main.options))
    main.app.push_screen(screen, closed)


def open_ab(main: MainScreen) -> None:
    """The verdict screen; starts MTP on vs off unless one runs or a verdict for these settings exists."""
    from tui.core.sweep.definition import settings_json
    from tui.ui.screens.verdict import VerdictScreen

    tuning = main.tuning
    current = tuning.verdict is not None and tuning.verdict.settings == settings_json(main.plan.settings.redacted())
    main.app.push_screen(VerdictScreen(workload=tuning.ab_workload))
    if tuning.running != "ab" and not current:
        reason = main.start_ab()
        if reason:
            main.app.notify(reason, title="Cannot run MTP on vs off", severity="warning")


def with_value(settings: Settings, knob: str, value: int) -> Settings:
    """The settings on screen with only the searched knob changed (the rest as the user left it)."""
    return replace(settings, ctx_size=value) if knob == "ctx_size" else replace(settings, fit_target=[value])


def open_search(main: MainScreen, which: str) -> None:
    """Start a search and show it; an accepted answer is loaded into the settings form."""
    from tui.ui.screens.search import SearchScreen

    knob = KNOBS[which]
    tuning = main.tuning
    if tuning.running != "search":
        reason = tuning.start_search(knob, main.plan.settings)
        if reason:
            main.app.notify(reason, title="Cannot search", severity="warning")
            return

    def accepted(value: int | None) -> None:
        if value is not None:
            main.form.load(with_value(main.plan.settings, knob, value))
            main.app.notify(f"{'--ctx-size' if knob == 'ctx_size' else '--fit-target'} set in the form; "
                            "l launches with it", title="Search")

    main.app.push_screen(SearchScreen(knob), accepted)


def open_tune(main: MainScreen) -> None:
    """The tune screen over the settings on screen: the last setup (kept while the App runs), or one
    that fixes what the form sets and searches MTP on/off and what the form leaves unset."""
    from tui.ui.adapters.tune import default_setup
    from tui.ui.screens.tune import TuneScreen

    tuning = main.tuning

    def closed(_result: Any) -> None:
        tuning.tune_setup = screen.setup

    screen = TuneScreen(main.plan.settings, tuning.tune_setup or default_setup(main.plan.settings))
    main.app.push_screen(screen, closed)
