"""`q` goes back from every pushed screen and quits only from the main screen; quitting with a run in
flight asks first and names what is lost and what can be resumed (issue 31: a 7-minute A/B was lost
to one `q` on the verdict screen)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_ui_plan import options, settle
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.cockpit.screen import MainScreen
from tui.ui.lab.sweep_screen import SweepScreen
from tui.ui.lab.verdict_screen import VerdictScreen
from tui.ui.widgets.question import Question


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    monkeypatch.setattr(MtpTuneApp, "exit", lambda self, code=0, *a, **k: seen.append(code))
    return seen


async def test_q_goes_back_from_pushed_screens(tiny_models: dict[str, Path], exits: list[int]) -> None:
    app = make_app(options(tiny_models["tiny-mtp"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        for key in ("w", "question_mark", "h"):  # sweep, help, runs
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, MainScreen), key
            await pilot.press("q")
            await pilot.pause()
            assert isinstance(app.screen, MainScreen), (key, app.screen)
        assert exits == []


async def test_quitting_with_a_run_in_flight_asks_and_names_the_loss(tiny_models: dict[str, Path],
                                                                     exits: list[int]) -> None:
    app = make_app(options(tiny_models["tiny-mtp"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        app.lab.running = "ab"  # what the lab sets while its MTP on/off run is under way
        app.push_screen(VerdictScreen(app.lab))
        await pilot.pause()
        await pilot.press("q")  # back to the cockpit: the run keeps going behind
        await pilot.pause()
        assert isinstance(app.screen, MainScreen) and exits == []
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, Question)
        text = app.screen.text
        assert "MTP on/off run is stopped" in text and "cannot be resumed" in text
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, MainScreen) and exits == []
        app.lab.running = "sweep"
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert isinstance(app.screen, Question)
        assert "resumes it" in app.screen.text
        await pilot.press("y")
        await pilot.pause()
        assert exits == [0]
        app.lab.running = None


async def test_quitting_idle_does_not_ask(tiny_models: dict[str, Path], exits: list[int]) -> None:
    app = make_app(options(tiny_models["tiny-mtp"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        await pilot.press("q")
        await pilot.pause()
        assert exits == [0] and not isinstance(app.screen, Question)
