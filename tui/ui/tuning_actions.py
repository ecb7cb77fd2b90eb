"""The App's tuning actions (`w` sweep, `a` MTP on/off, `c`/`F` searches): which screen, with what.

Kept out of app.py so the App only binds keys to these. The work itself runs in the main screen's
TuningPanel (`app.tuning`); these functions choose the settings on screen, the suite chosen in the
probe panel and the probe options, and push the screen that shows it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tui.core.options.settings import Settings
from tui.ui.adapters.tuning import simulated

KNOBS = {"ctx": "ctx_size", "fit": "fit_target"}


def open_sweep(app: Any) -> None:
    """The sweep screen, set up from the settings on screen (the last setup kept while the App runs)."""
    from tui.ui.screens.sweep import SweepScreen, default_setup

    setup = getattr(app, "_sweep_setup", None) or default_setup(
        app.probe_panel.suite, app.options.probe_repeat, app.options.probe_n_predict)

    def closed(_result: Any) -> None:
        app._sweep_setup = screen.setup

    screen = SweepScreen(app.settings, setup, app.probes.suites, simulate=simulated(app.options))
    app.push_screen(screen, closed)


def open_ab(app: Any) -> None:
    """The verdict screen; starts MTP on vs off unless one runs or a verdict for these settings exists."""
    from tui.core.sweep.definition import settings_json
    from tui.ui.screens.verdict import VerdictScreen

    panel = app.tuning
    current = panel.verdict is not None and panel.verdict.settings == settings_json(app.settings.redacted())
    app.push_screen(VerdictScreen(workload=panel.ab_workload))
    if panel.running != "ab" and not current:
        start_ab(app)


def start_ab(app: Any) -> None:
    reason = app.tuning.start_ab_on_screen()
    if reason:
        app.notify(reason, title="Cannot run MTP on vs off", severity="warning")


def with_value(settings: Settings, knob: str, value: int) -> Settings:
    """The settings on screen with only the searched knob changed (the rest as the user left it)."""
    return replace(settings, ctx_size=value) if knob == "ctx_size" else replace(settings, fit_target=[value])


def open_search(app: Any, which: str) -> None:
    """Start a search and show it; an accepted answer is loaded into the settings form."""
    from tui.ui.screens.search import SearchScreen

    knob = KNOBS[which]
    panel = app.tuning
    if panel.running != "search":
        reason = panel.start_search(knob, app.settings)
        if reason:
            app.notify(reason, title="Cannot search", severity="warning")
            return

    def accepted(value: int | None) -> None:
        if value is not None:
            app.form.load(with_value(app.settings, knob, value))
            app.notify(f"{'--ctx-size' if knob == 'ctx_size' else '--fit-target'} set in the form; l launches with it",
                       title="Search")

    app.push_screen(SearchScreen(knob), accepted)
