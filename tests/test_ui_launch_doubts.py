"""Launching with a plan that says OOM, or past the model's training context, asks first (issue 31):
Enter launches anyway, Esc goes back and nothing starts; simulated GPUs say they cannot run out.

The launch itself is recorded, not run (`ServerController.act` is replaced): what is tested is the
question in front of it, on the real planner and a generated tiny model's real header."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.test_ui_plan import TINY_GPU, options, set_ctx, settle
from tests.test_ui_probes import until
from tui.ui.app import make_app
from tui.ui.cockpit.server import ServerController
from tui.ui.widgets.question import Question


@pytest.fixture
def acts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int | None]]:
    seen: list[tuple[str, int | None]] = []

    def act(self, action, settings, problems, stand_ins=False):  # noqa: ANN001, ANN202
        seen.append((action + (" on stand-ins" if stand_ins else ""), settings.ctx_size if settings else None))

    monkeypatch.setattr(ServerController, "act", act)
    return seen


def _opts(model: Path):  # noqa: ANN202
    return replace(options(model), server_bin=Path("/nonexistent/llama-server"))  # can launch: the act is recorded


async def test_an_oom_plan_asks_and_esc_launches_nothing(tiny_models: dict[str, Path], acts: list) -> None:
    app = make_app(_opts(tiny_models["tiny-mtp"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        await set_ctx(pilot, app, "16384")
        assert app.main.plan.view.worst_risk == "oom"
        app.main.action_launch()
        await pilot.pause()
        assert isinstance(app.screen, Question)
        text = app.screen.text
        assert "runs out of memory, short by" in text
        assert "simulated" in text and "cannot run out of the simulated memory" in text
        assert "stand-ins" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, Question) and acts == []
        app.main.action_launch()
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert acts == [("launch", 16384)]


async def test_past_the_training_context_asks_and_says_the_cap(tiny_models: dict[str, Path], acts: list,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    big = replace(TINY_GPU, devices=tuple(replace(d, total_mib=1 << 20) for d in TINY_GPU.devices))
    app = make_app(replace(_opts(tiny_models["tiny-mtp"]), hardware=big))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        train = app.main.plan.view and app.main.plan.view.context_note == ""
        assert train, app.main.plan.view
        await set_ctx(pilot, app, "1048576")
        view = app.main.plan.view
        assert view.worst_risk != "oom" and "caps each slot at" in view.context_note
        app.main.action_restart()
        await pilot.pause()
        assert isinstance(app.screen, Question)
        text = app.screen.text
        assert "training context" in text and "Restart anyway" in text
        await pilot.press("enter")
        await pilot.pause()
        assert acts == [("restart", 1048576)]


async def test_a_plan_that_fits_launches_without_a_question(tiny_models: dict[str, Path], acts: list) -> None:
    app = make_app(_opts(tiny_models["tiny-mtp"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        assert app.main.plan.view.worst_risk == "ok"
        app.main.action_launch()
        await pilot.pause()
        assert not isinstance(app.screen, Question) and acts == [("launch", 512)]



async def test_stand_ins_make_the_predicted_oom_real(tiny_models: dict[str, Path], server_bin: Path,
                                                     rpc_server_bin: Path) -> None:
    """`t` in the question launches on capped stand-ins of the 24 MiB simulated GPU: the real server
    runs out of memory there, where the plain launch on this machine's CPU would have started."""
    app = make_app(replace(options(tiny_models["tiny-mtp"]), server_bin=server_bin))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        await set_ctx(pilot, app, "16384")
        # with a server, llama.cpp's dry run follows the estimate: the question reads the settled plan
        assert await until(pilot, lambda: app.main.plan.view is not None and app.main.plan.view.exact != "pending", 120)
        assert app.main.plan.view.worst_risk == "oom", app.main.plan.view
        app.main.action_launch()
        await pilot.pause()
        assert isinstance(app.screen, Question)
        assert "t launches on capped stand-ins" in app.screen.text
        await pilot.press("t")
        status = app.main.server
        assert await until(pilot, lambda: status.status.state in ("failed", "exited", "ready"), 120)
        assert status.status.state != "ready", status.status.log_tail
        failure = (status.status.failure or "").lower()
        assert "memory" in failure or "alloc" in failure, status.status
        assert not app.backend.stand_ins.active or app.backend.running_settings is None
