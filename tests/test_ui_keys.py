"""Every action is reachable from the keyboard: bindings, the help screen, the command palette."""

from __future__ import annotations

import time

from tests.helpers import ui_samples as samples
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.screens.help import HELP, HelpScreen
from tui.ui.screens.runs import RunsScreen


def test_every_binding_has_an_action_and_is_documented() -> None:
    for binding in MtpTuneApp.BINDINGS:
        assert hasattr(MtpTuneApp, f"action_{binding.action}"), binding.action
        if binding.show:
            key = binding.key_display or binding.key
            assert f"`{key}`" in HELP, f"{key} is not in the help screen"


async def test_help_opens_and_closes() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


async def test_command_palette_reaches_the_runs_view() -> None:
    app = make_app(samples.fixed_options("runs"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Runs")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not isinstance(app.screen, RunsScreen):
            await pilot.press("enter")
            await pilot.pause(0.2)
        assert isinstance(app.screen, RunsScreen)


async def test_main_screen_keys_do_not_fire_in_dialogs() -> None:
    """`l` in the runs view must not launch anything; the footer there shows the view's own keys."""
    app = make_app(samples.fixed_options("runs"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("h")
        await pilot.pause()
        assert app.check_action("launch", ()) is False
        assert app.check_action("quit", ()) is True
