"""An experiment never stops the user's own server silently: `a` (and the other lab keys) ask first,
naming what runs and that the server will be stopped; cancelling leaves it running; after the
experiment the offer to restart it appears, and accepting relaunches it with the settings it ran with
(through the cockpit's launch path). A stand-in backend plays the server: no process is started."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tui.core.options.settings import Settings
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.cockpit.backend import Backend
from tui.ui.cockpit.views import ServerStatus
from tui.ui.lab import experiments
from tui.ui.lab.confirm import RestartPrompt
from tui.ui.widgets.question import Question
from tui.ui.options import AppOptions


class StandInServer(Backend):
    """The supervisor's part played in memory: launch and stop are recorded and answered at once."""

    def __init__(self, options: AppOptions) -> None:
        super().__init__(options)
        self.actions: list[tuple[str, Settings | None]] = []
        self.up = False

    def server_action(self, action: str, settings: Settings | None, grace: float | None = None,
                      stand_ins: bool = False) -> str | None:
        self.actions.append((action, settings))
        self.up = action != "stop"
        self.running_settings = settings if self.up else None
        self._notify()
        return None

    def status(self) -> ServerStatus:
        return ServerStatus(state="ready" if self.up else "stopped", pid=4242 if self.up else None)


async def until(pilot: Any, predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return bool(predicate())


def make(tiny_models: dict[str, Path], tmp_path: Path) -> tuple[MtpTuneApp, StandInServer]:
    opts = AppOptions(settings=Settings(model=str(tiny_models["tiny-mtp"]), ctx_size=1024, spec_type=["draft-mtp"]),
                      server_bin=Path("/bin/false"), hardware=None, simulate=True, cursor_blink=False, exact=False,
                      server_log_dir=tmp_path / "logs")
    backend = StandInServer(opts)
    return make_app(opts, backend), backend


async def launched(pilot: Any, app: MtpTuneApp, backend: StandInServer) -> Settings:
    await pilot.press("l")
    assert await until(pilot, lambda: app.main.server.status.state == "ready")
    settings = backend.running_settings
    assert settings is not None
    return settings


async def test_cancelling_the_confirmation_leaves_the_server_running(tiny_models: dict[str, Path], tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[Any] = []
    monkeypatch.setattr(experiments, "run_ab", lambda *a, **k: ran.append(a) or (None, "not run"))
    app, backend = make(tiny_models, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await launched(pilot, app, backend)
        await pilot.press("a")
        assert await until(pilot, lambda: isinstance(app.screen, Question))
        question = app.screen.text
        assert "MTP on vs off" in question and "stopped first" in question and "tiny-mtp.gguf" in question
        assert "launches and" in question  # what it will do, and how long (or how to know) before it starts
        await pilot.press("n")
        assert await until(pilot, lambda: not isinstance(app.screen, Question))
        await pilot.pause(0.2)
        assert app.lab.running is None and not ran
        assert [a for a, _ in backend.actions] == ["launch"]  # never stopped
        assert app.main.server.status.state == "ready"


async def test_after_the_experiment_the_restart_offer_relaunches_the_same_settings(
        tiny_models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(experiments, "run_ab", lambda *a, **k: (None, "the stand-in runs no A/B"))
    app, backend = make(tiny_models, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        before = await launched(pilot, app, backend)
        await pilot.press("a")
        assert await until(pilot, lambda: isinstance(app.screen, Question))
        await pilot.press("y")
        assert await until(pilot, lambda: isinstance(app.screen, RestartPrompt))
        assert [a for a, _ in backend.actions] == ["launch", "stop"]
        assert app.main.server.status.state == "stopped" and app.lab.finished["ab"] == 1
        assert "restart it with the settings it ran with" in str(app.screen.query_one("#question").render())
        await pilot.press("y")
        assert await until(pilot, lambda: len(backend.actions) == 3 and app.main.server.status.state == "ready")
        action, settings = backend.actions[2]
        assert action == "launch" and settings == before
