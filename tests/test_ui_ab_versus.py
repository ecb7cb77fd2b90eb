"""`v` on the verdict screen: A/B the settings on screen (A) against a saved profile or another llama-server
build (B), on the same screen and the lab's one A/B. The run itself is the core's (tested against the real
server in tests/test_ab_real.py); here a stand-in records what the cockpit asked for."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fake_builds import HELP, OLD_HELP, fake_server
from tui.core.lab.sides import SideError
from tui.core.options.settings import Settings
from tui.core.presets.profiles import save_profile
from tui.ui.app import make_app
from tui.ui.lab import experiments
from tui.ui.lab.verdict_screen import VerdictScreen
from tui.ui.lab.views import Versus
from tui.ui.options import AppOptions
from tui.ui.widgets.question import Question


async def until(pilot: Any, predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return bool(predicate())


async def test_v_asks_for_a_profile_or_build_and_runs_that_ab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, Any]] = []
    monkeypatch.setattr(experiments, "run_ab", lambda *a, **k: asked.append(k) or (None, "the stand-in runs no A/B"))
    save_profile("fast", Settings(model=str(tmp_path / "m.gguf"), ctx_size=2048, flash_attn="on"))
    other = fake_server(tmp_path, "other", HELP, 11500)
    monkeypatch.setenv("MTP_TUNE_LLAMA_SERVER", str(other))
    opts = AppOptions(settings=Settings(model=str(tmp_path / "m.gguf"), ctx_size=1024), server_bin=Path("/bin/false"),
                      hardware=None, simulate=True, cursor_blink=False, exact=False, server_log_dir=tmp_path / "logs")
    app = make_app(opts)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("a")  # the verdict screen, and the MTP on/off question over it
        assert await until(pilot, lambda: isinstance(app.screen, Question))
        await pilot.press("escape")
        assert await until(pilot, lambda: isinstance(app.screen, VerdictScreen))
        await pilot.press("v")
        assert await until(pilot, lambda: isinstance(app.screen, Question))
        text = app.screen.text
        assert "A is the settings on screen" in text and "1  profile fast" in text
        assert f"2  llama-server {other} (same settings)" in text and "launches and" in text
        await pilot.press("1")
        assert await until(pilot, lambda: app.lab.finished["ab"] == 1)
        (kw,) = asked
        assert kw["versus"].profile == "fast" and kw["versus"].server_bin is None
        screen = app.screen
        assert isinstance(screen, VerdictScreen)
        title = str(screen.query_one("#verdict-title").render())
        assert title.startswith("the settings on screen (A) vs profile fast (B): passes interleaved (A, B, A, B")
        assert "the stand-in runs no A/B" in str(screen.query_one("#verdict-answer").render())
        # g runs the same A/B again, against the same profile.
        await pilot.press("g")
        assert await until(pilot, lambda: app.lab.finished["ab"] == 2)
        assert asked[1]["versus"] == kw["versus"]
        await pilot.press("v", "2")
        assert await until(pilot, lambda: app.lab.finished["ab"] == 3)
        assert asked[2]["versus"].server_bin == str(other)
        assert "vs llama-server" in str(screen.query_one("#verdict-title").render())


def test_against_another_build_both_sides_are_checked_first(tmp_path: Path) -> None:
    new, old = fake_server(tmp_path, "new", HELP, 11434), fake_server(tmp_path, "old", OLD_HELP, 11400)
    s = Settings(model="m.gguf", spec_type=["draft-mtp"], spec_draft_p_min=0.2)
    with pytest.raises(SideError, match=r"^B \(build 11400\): --spec-draft-p-min is not accepted by this build"):
        experiments.versus_sides(s, Versus(server_bin=str(old)), new)
    copy = fake_server(tmp_path, "copy", HELP, 11434)
    a, b, differs = experiments.versus_sides(s, Versus(server_bin=str(copy)), new)
    assert b.server_bin == copy and b.settings == a
    assert differs == (f"llama-server {new} -> {copy} (both build 11434)",)
    save_profile("q8", Settings(model="m.gguf", cache_type_k="q8_0"))
    _, b, differs = experiments.versus_sides(Settings(model="m.gguf"), Versus(profile="q8"), new)
    assert b.server_bin == new and differs == ("--cache-type-k (default f16) -> q8_0",)
