"""MTP on vs off (`a`) against the real llama-server: interleaved passes with progress, the verdict
with PP, TG, acceptance and end-to-end time, recomputed at once for an edited workload, cancel."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input

from tui.core.gpu.profiles import PROFILES
from tui.core.options.settings import Settings
from tui.core.config.paths import config_dir
from tui.ui.widgets.question import Question
from tui.ui.app import make_app
from tui.ui.options import AppOptions
from tui.ui.lab.verdict_screen import VerdictScreen, parse_tokens

pytestmark = pytest.mark.timeout(300)

SUITE = """\
name = "ab-ui"
[[prompts]]
name = "story"
prompt = "Write a short story about a fox."
"""


async def until(pilot, predicate, timeout: float = 120.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return bool(predicate())


def options(model: Path, server_bin: Path, tmp_path: Path, n_predict: int = 96) -> AppOptions:
    suites = config_dir() / "suites"
    suites.mkdir(parents=True, exist_ok=True)
    (suites / "ab-ui.toml").write_text(SUITE)
    settings = Settings(model=str(model), ctx_size=1024, parallel=1, threads=1, threads_batch=1,
                        spec_type=["draft-mtp"], spec_draft_n_max=3)
    return AppOptions(settings=settings, server_bin=server_bin, hardware=PROFILES["rtx3060-laptop-6g"], simulate=True,
                      cursor_blink=False, server_log_dir=tmp_path / "logs", probe_repeat=2, probe_n_predict=n_predict,
                      probe_suite=str(suites / "ab-ui.toml"), sample_interval_s=0.5)


def table_text(screen: VerdictScreen) -> list[list[str]]:
    t = screen.query_one("#verdict-table", DataTable)
    return [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]


def test_parse_tokens() -> None:
    assert parse_tokens("1000") == 1000 and parse_tokens("13k") == 13000 and parse_tokens("1.5k") == 1500
    assert parse_tokens("-1") is None and parse_tokens("ten") is None and parse_tokens("1.5") is None


async def test_mtp_on_off_verdict_and_workload(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    # tiny-mtp-random accepts no draft: MTP pays for every draft and gains nothing, so it must lose.
    app = make_app(options(tiny_models["tiny-mtp-random"], server_bin, tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("a")
        assert await until(pilot, lambda: isinstance(app.screen, Question))  # how long, before it starts
        await pilot.press("y")
        assert await until(pilot, lambda: isinstance(app.screen, VerdictScreen))
        screen = app.screen
        assert app.lab.running == "ab" or app.lab.finished["ab"] == 1  # started (tiny models are quick)
        assert await until(pilot, lambda: screen.view is not None and screen.view.done >= 1)
        assert "passes" in str(screen.query_one("#verdict-progress-text").render())
        assert await until(pilot, lambda: app.lab.finished["ab"] == 1), app.lab.verdict_view
        v = app.lab.verdict
        assert v is not None and v.status == "complete", v.error
        # Interleaved: off, on, off, on.
        assert [s.side for s in sorted(v.samples, key=lambda s: s.order)] == ["off", "on", "off", "on"]
        view = screen.view
        # The screen says what the core decided; with no draft accepted MTP never wins.
        assert view is not None and view.label == v.label != "b_wins", v.answer
        headline = {"b_loses": "MTP LOSES", "same": "THE SAME WITHIN THE NOISE", "inconclusive": "INCONCLUSIVE"}[v.label]
        assert view.headline == headline and headline in str(screen.query_one("#verdict-headline").render())
        assert view.answer == v.answer
        rows = table_text(screen)
        assert [r[0] for r in rows] == ["PP t/s", "TG t/s", "acceptance", "1000 in / 500 out (s)"]
        assert rows[2][2].startswith("0%")  # nothing accepted with MTP on
        assert rows[1][4] == v.tg.label and rows[1][3] == f"{v.tg.rel_change:+.1%}", (rows, v.answer)
        assert "MTP loses" in str(screen.query_one("#verdict-break-even").render()) or \
            "MTP wins only" in str(screen.query_one("#verdict-break-even").render())
        assert str(screen.query_one("#verdict-passes").render()).startswith("off 1:")

        # Another workload: recomputed at once from the same passes (nothing re-run).
        before = app.lab.finished["ab"]
        screen.query_one("#verdict-out", Input).value = "50"
        await pilot.pause()
        screen.query_one("#verdict-in", Input).value = "13k"
        await pilot.pause()
        assert table_text(screen)[3][0] == "13000 in / 50 out (s)"
        assert app.lab.verdict.workload == (13000, 50) and app.lab.finished["ab"] == before
        assert app.lab.verdict.samples == v.samples
        assert "13000 tokens in, 50 out" in str(screen.query_one("#verdict-answer").render())

        # Escape from the field, then back to the main screen; `a` shows the same verdict, no re-run.
        await pilot.press("escape", "escape")
        assert await until(pilot, lambda: not isinstance(app.screen, VerdictScreen))
        await pilot.press("a")
        assert await until(pilot, lambda: isinstance(app.screen, VerdictScreen))
        assert app.lab.running is None and app.screen.view.label == app.lab.verdict.label
        # g measures again with the settings on screen (the edited workload kept).
        await pilot.press("g")
        assert await until(pilot, lambda: app.lab.finished["ab"] == 2), [n.message for n in app._notifications]
        assert app.lab.verdict.workload == (13000, 50) and app.lab.verdict.samples != v.samples
        await pilot.press("escape", "q")
        assert await until(pilot, lambda: not app.is_running, timeout=30)


async def test_cancel_the_ab_run(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    app = make_app(options(tiny_models["tiny-mtp"], server_bin, tmp_path, n_predict=2000))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("a")
        assert await until(pilot, lambda: isinstance(app.screen, Question))
        await pilot.press("y")
        assert await until(pilot, lambda: isinstance(app.screen, VerdictScreen))
        screen = app.screen
        assert await until(pilot, lambda: screen.view is not None and "requests" in screen.view.message)
        await pilot.press("x")
        assert await until(pilot, lambda: app.lab.finished["ab"] == 1, timeout=30)
        v = app.lab.verdict
        assert v is not None and v.status == "cancelled" and v.label == "inconclusive"
        assert "cancelled" in str(screen.query_one("#verdict-answer").render())
        await pilot.press("escape", "q")
        assert await until(pilot, lambda: not app.is_running, timeout=30)
