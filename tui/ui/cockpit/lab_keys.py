"""The cockpit's lab keys (`w` sweep, `a` MTP on/off and, on its screen, `v` versus a profile or another
build, `c`/`F` searches, `T` tune): which lab screen, with what from the cockpit (the settings on screen,
the probe panel's suite, the probe options).

The work runs in the lab controller; an action that would stop the user's own server asks first
(`lab.confirm.confirm_then`), and cancelling leaves the server running.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tui.core.options.settings import Settings, settings_json
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
from tui.ui.lab.views import Versus

if TYPE_CHECKING:
    from tui.ui.cockpit.screen import MainScreen

KNOBS = {"ctx": "ctx_size", "fit": "fit_target"}
#: How many profiles and builds `v` offers (the question's buttons fit three in a row).
CHOICES = 3


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
    main.app.push_screen(VerdictScreen(lab, workload=lab.ab_workload, versus=lambda: ask_versus(main),
                                       quality=main.quality.kv_text(main.plan.settings)))
    if lab.running == "ab" or shown_verdict_is_current(main, n):
        return
    reason = lab.blocked()
    if reason:
        main.app.notify(reason, title="Cannot run MTP on vs off", severity="warning")
        return

    def answered(choice: str | None) -> None:
        if choice == "start" and (reason := main.start_ab(n)):
            main.app.notify(reason, title="Cannot run MTP on vs off", severity="warning")

    main.app.push_screen(ab_question(main, n), answered)


def shown_verdict_is_current(main: MainScreen, concurrency: int = 1) -> bool:
    """The last verdict is MTP on vs off of the settings on screen at `concurrency` requests at once (at
    N > 1 its first level is at one: the same sides), so `a` shows it rather than asking to run."""
    # lazy: the lab's engine loads the supervisor and httpx, which the first frame does not wait for
    from tui.core.lab.ab import mtp_sides

    v = main.lab.verdict
    if v is None or verdict_levels.concurrency_of(v) != concurrency:
        return False
    first = v.levels[0][1] if hasattr(v, "levels") else v
    if first.pair.a != "off":
        return False
    a, b = mtp_sides(replace(main.plan.settings, port=None))
    return first.settings == {"a": settings_json(a.settings.redacted()), "b": settings_json(b.settings.redacted())}


def ab_question(main: MainScreen, concurrency: int = 1) -> Question:
    """What the MTP on/off run will do and how long it should take, before it starts (a 7-minute run
    used to start on one key), and that it stops the user's server when it does."""
    return Question("Run MTP on vs off?", ab_lines(main, concurrency),
                    [Answer("start", "Start", key="y", variant="warning")])


def ab_lines(main: MainScreen, concurrency: int = 1) -> list[str]:
    """An A/B's size and expected duration from the probe options, and that it stops the user's server."""
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
    return lines


def ask_versus(main: MainScreen) -> None:
    """Which saved profile or other llama-server build (B) to A/B the settings on screen (A) against, then
    that A/B on the verdict screen: the lab's one A/B, each side checked against its build's --help first."""
    # lazy: the lab's engine loads the supervisor and httpx, which the first frame does not wait for
    from tui.core.lab.sides import other_builds
    from tui.core.presets.profiles import list_profiles

    lab = main.lab
    if reason := lab.blocked():
        main.app.notify(reason, title="Cannot A/B", severity="warning")
        return
    profiles = [Versus(profile=p.name) for p in list_profiles()]
    builds = [Versus(server_bin=str(b)) for b in other_builds(main.options.server_bin)]
    # Three fit the question's row of buttons: two profiles and a build first, then whichever has more.
    every = profiles[:2] + builds[:1] + profiles[2:] + builds[1:]
    choices = every[:CHOICES]
    if not choices:
        main.app.notify("no saved profile and no other llama-server build to A/B against: save the settings as a "
                        "profile (f), or run `mtp-tune ab` with --b-bin", title="Nothing to A/B against",
                        severity="warning")
        return
    what = [f"{i + 1}  " + (f"profile {c.profile}" if c.profile else f"llama-server {c.server_bin} (same settings)")
            for i, c in enumerate(choices)]
    more = ["`mtp-tune ab` takes any other profile, preset section, command or binary."] if len(every) > CHOICES else []
    lines = ["A is the settings on screen; B is the one you pick:", "\n".join(what), *more, *ab_lines(main)]

    def answered(choice: str | None) -> None:
        if choice is None:
            return
        reason = lab.start_ab(main.plan.settings, suite=main.probe_panel.suite,
                              passes=max(1, main.options.probe_repeat), n_predict=main.options.probe_n_predict,
                              versus=choices[int(choice)])
        if reason:
            main.app.notify(reason, title="Cannot A/B", severity="warning")

    answers = [Answer(str(i), str(i + 1), key=str(i + 1), variant="warning") for i in range(len(choices))]
    main.app.push_screen(Question("A/B the settings on screen against…", lines, answers), answered)


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
