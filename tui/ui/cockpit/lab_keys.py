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
from tui.core.probes.suites import SuiteError, get_suite
from tui.ui.cockpit import probe_start
from tui.ui.lab import verdict_levels
from tui.ui.lab.confirm import confirm_then, server_label
from tui.ui.widgets.question import Answer, Question
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
    """The verdict screen; starts MTP on vs off after saying how long it takes (and that the user's
    server will be stopped, when it runs) unless one runs or a verdict for these settings exists."""
    lab = main.lab
    if (n := probe_start.at_once(main, "Cannot run MTP on vs off")) is None:  # at 1 and N when N > 1
        return
    current = lab.verdict is not None and lab.verdict.settings == settings_json(main.plan.settings.redacted()) \
        and verdict_levels.concurrency_of(lab.verdict) == n
    main.app.push_screen(VerdictScreen(lab, workload=lab.ab_workload))
    if lab.running == "ab" or current:
        return
    reason = lab.blocked()
    if reason:
        main.app.notify(reason, title="Cannot run MTP on vs off", severity="warning")
        return

    def answered(choice: str | None) -> None:
        if choice == "start" and (reason := main.start_ab(n)):
            main.app.notify(reason, title="Cannot run MTP on vs off", severity="warning")

    main.app.push_screen(ab_question(main, n), answered)


def ab_question(main: MainScreen, concurrency: int = 1) -> Question:
    """What the MTP on/off run will do and how long it should take, before it starts (a 7-minute run
    used to start on one key), and that it stops the user's server when it does."""
    # lazy: the lab's engine loads the supervisor and httpx, which the first frame does not wait for
    from tui.core.lab.ab import ab_size

    passes, n_predict = max(1, main.options.probe_repeat), main.options.probe_n_predict
    lines = []
    try:
        size = ab_size(get_suite(main.probe_panel.suite), passes, n_predict)
    except SuiteError as exc:
        lines.append(f"The suite cannot be read ({exc}); starting will say why.")
    else:
        lines.append(f"{passes} passes per side, interleaved: {size.launches} launches and {size.requests} requests "
                     f"of the {main.probe_panel.suite} suite, up to {size.tokens} generated tokens.")
        lines.append(main.lab.expected(size))
    if concurrency > 1:
        lines.append(f"Then the same again with {concurrency} requests at once (-np {concurrency}, each slot keeping "
                     "its context), about as long once more: the verdicts at 1 and at "
                     f"{concurrency} side by side.")
    if main.lab.stops_server():
        running = main.server.running_settings()
        lines.append(f"It launches its own servers, so your {server_label(running)} is stopped first; you will "
                     "be offered to restart it when it ends.")
    return Question("Run MTP on vs off?", lines, [Answer("start", "Start", key="y", variant="warning")])


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
