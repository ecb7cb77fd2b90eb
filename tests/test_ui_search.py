"""The searches as actions against the real llama-server: the largest context (`c`: planned, then a
launch that survives a first decode) and the smallest fit-target (`F`), with every trial on screen,
the answer accepted into the form with Enter, and a cancel that changes nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.widgets import DataTable

from tui.core.gpu.profiles import PROFILES
from tui.core.options.settings import Settings
from tui.ui.app import make_app
from tui.ui.options import AppOptions
from tui.ui.lab.search_screen import SearchScreen
from tui.ui.cockpit.lab_keys import with_value

pytestmark = pytest.mark.timeout(300)


async def until(pilot, predicate, timeout: float = 120.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return bool(predicate())


def options(model: Path, server_bin: Path, tmp_path: Path) -> AppOptions:
    settings = Settings(model=str(model), ctx_size=1024, parallel=1, threads=1, threads_batch=1,
                        spec_type=["draft-mtp"], spec_draft_n_max=3, port=8111)
    return AppOptions(settings=settings, server_bin=server_bin, hardware=PROFILES["rtx3060-laptop-6g"], simulate=True,
                      cursor_blink=False, server_log_dir=tmp_path / "logs", sample_interval_s=0.5)


def test_with_value_changes_only_the_knob() -> None:
    s = Settings(model="m.gguf", ctx_size=1024, port=8111, fit_target=[512], ubatch_size=256)
    assert with_value(s, "ctx_size", 4096) == Settings(model="m.gguf", ctx_size=4096, port=8111, fit_target=[512],
                                                       ubatch_size=256)
    assert with_value(s, "fit_target", 64).fit_target == [64] and with_value(s, "fit_target", 64).ctx_size == 1024


async def test_largest_context_accepted_into_the_form(server_bin: Path, tiny_models: dict[str, Path],
                                                      tmp_path: Path) -> None:
    app = make_app(options(tiny_models["tiny-mtp"], server_bin, tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("c")
        assert await until(pilot, lambda: isinstance(app.screen, SearchScreen))
        screen = app.screen
        assert await until(pilot, lambda: app.lab.finished["search"] == 1)
        view = app.lab.search_view
        assert view is not None and view.found and view.value is not None, view
        # Planned first, then confirmed by a real launch at that value.
        assert view.planned == view.value and view.trials[0].value == view.value and view.trials[0].outcome == "ok"
        assert screen.query_one("#search-trials", DataTable).row_count == len(view.trials)
        assert f"--ctx-size {view.value} tokens" in str(screen.query_one("#search-answer").render())
        # The 6 GB card holds the tiny model's whole training context: the answer says that is the bound, and
        # that its launches ran on this machine, where the simulated card cannot run out of memory.
        assert view.value == 4096 and "training context" in view.message, view.message
        assert "cannot run out of memory here" in str(screen.query_one("#search-message").render())
        await pilot.press("enter")
        assert await until(pilot, lambda: not isinstance(app.screen, SearchScreen))
        assert await until(pilot, lambda: app.main.plan.settings.ctx_size == view.value)
        assert app.main.plan.settings.port == 8111  # only the knob changed
        await pilot.press("q")
        assert await until(pilot, lambda: not app.is_running, timeout=30)


async def test_smallest_fit_target_then_cancel(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    app = make_app(options(tiny_models["tiny-mtp"], server_bin, tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("F")
        assert await until(pilot, lambda: isinstance(app.screen, SearchScreen))
        assert await until(pilot, lambda: app.lab.finished["search"] == 1)
        view = app.lab.search_view
        # The CPU backend keeps nothing free on a GPU: every value works, down to the floor.
        assert view is not None and view.found and view.value == 0, view
        assert len(view.trials) >= 2 and all(t.outcome == "ok" for t in view.trials)
        await pilot.press("enter")
        assert await until(pilot, lambda: app.main.plan.settings.fit_target == [0])

        # Again from a far higher value (many launches down), cancelled after its first trial.
        app.main.form.load(with_value(app.main.plan.settings, "fit_target", 1 << 20))
        assert await until(pilot, lambda: app.main.plan.settings.fit_target == [1 << 20])
        await pilot.press("F")
        assert await until(pilot, lambda: isinstance(app.screen, SearchScreen))
        assert await until(pilot, lambda: app.lab.search_view is not None and len(app.lab.search_view.trials) >= 1)
        await pilot.press("x")
        assert await until(pilot, lambda: app.lab.finished["search"] == 2)
        view = app.lab.search_view
        assert view.cancelled and not view.found and view.value is None, view
        assert "cancelled" in str(app.screen.query_one("#search-message").render())
        await pilot.press("enter")  # nothing to accept: the screen stays
        assert isinstance(app.screen, SearchScreen)
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, SearchScreen))
        assert app.main.plan.settings.fit_target == [1 << 20]
        await pilot.press("q")
        assert await until(pilot, lambda: not app.is_running, timeout=30)
