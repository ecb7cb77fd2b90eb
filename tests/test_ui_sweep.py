"""The sweep screen (`w`) against the real llama-server: a 2x2 grid planned before it runs, run with
progress, the table with medians and spread and the best marked, the best saved as a TOML profile
and an INI section in one key, the sweep going on behind the main screen, cancel and resume."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, Select

from tui.core.gpu.profiles import PROFILES, parse_gpus_spec
from tui.core.config.paths import config_dir
from tui.core.options.settings import Settings
from tui.core.lab.journal import load_journal
from tui.ui.widgets.question import Question
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.options import AppOptions
from tui.ui.lab.sweep_screen import SweepScreen
from tui.ui.lab.tables import SweepTable

pytestmark = pytest.mark.timeout(300)

SUITE = """\
name = "sweep-ui"
[[prompts]]
name = "count"
prompt = "Count from one to ten in words."
"""


async def until(pilot, predicate, timeout: float = 120.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return bool(predicate())


def options(model: Path, server_bin: Path, tmp_path: Path, hardware: Any = None, n_predict: int = 16,
            **extra: Any) -> AppOptions:
    """`n_predict` long enough keeps a request in flight for the tests that cancel or quit mid-row
    (the context is sized to hold it: a full context would end the generation early)."""
    extra.setdefault("ctx_size", max(1024, 2 * n_predict))
    settings = Settings(model=str(model), parallel=1, threads=1, threads_batch=1,
                        spec_type=["draft-mtp"], spec_draft_n_max=3, **extra)
    suites = config_dir() / "suites"
    suites.mkdir(parents=True, exist_ok=True)
    (suites / "sweep-ui.toml").write_text(SUITE)
    return AppOptions(settings=settings, server_bin=server_bin, hardware=hardware or PROFILES["rtx3060-laptop-6g"],
                      simulate=True, cursor_blink=False, server_log_dir=tmp_path / "logs", probe_repeat=2,
                      probe_n_predict=n_predict, probe_suite=str(suites / "sweep-ui.toml"), sample_interval_s=0.5)


async def open_sweep(pilot, app: MtpTuneApp, ub: str = "256,512") -> SweepScreen:  # noqa: ANN001
    await pilot.press("w")
    assert await until(pilot, lambda: isinstance(app.screen, SweepScreen))
    screen = app.screen
    assert isinstance(screen, SweepScreen)
    assert screen.query_one("#axis-0", Input).value == "on,off"  # MTP on and off to start with
    seen = screen.checks
    screen.query_one("#axis-4", Input).value = ub  # the ubatch axis
    assert await until(pilot, lambda: screen.checks > seen and screen.defn is not None
                       and len(screen.defn.axes) == 2), screen.problem
    return screen


async def test_sweep_2x2_planned_run_best_saved(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    app = make_app(options(tiny_models["tiny-mtp"], server_bin, tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_sweep(pilot, app)
        view = screen._shown
        assert view is not None and [r.values for r in view.rows] == [("on", "256"), ("on", "512"),
                                                                       ("off", "256"), ("off", "512")]
        # Planned before it runs: memory and risk on every row, nothing measured yet.
        assert all(r.status == "pending" and r.planned_mib and r.risk == "ok" for r in view.rows), view.rows
        assert screen.query_one(SweepTable).row_count == 4

        t0 = time.monotonic()
        await pilot.press("g")
        assert await until(pilot, lambda: app.lab.running == "sweep" or app.lab.finished["sweep"])
        assert app.lab.sweep_view is not None and app.lab.sweep_view.error is None, app.lab.sweep_view
        # Back to the main screen: the sweep goes on and says so there.
        assert await until(pilot, lambda: app.lab.sweep_view is not None and app.lab.sweep_view.done >= 1)
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, SweepScreen))
        if app.lab.running == "sweep":
            assert "sweep" in str(app.main.tuning_panel.render()) and app.main.tuning_panel.has_class("-active")
        assert await until(pilot, lambda: app.lab.finished["sweep"] == 1), app.lab.sweep_view
        wall = time.monotonic() - t0
        print(f"2x2 sweep from the TUI: {wall:.1f} s")
        final = app.lab.sweep_view
        assert final is not None and not final.running and final.error is None
        assert [r.status for r in final.rows] == ["ok"] * 4, final.rows
        assert all(r.tg and r.pp and r.tg_spread is not None for r in final.rows)  # medians with spread
        assert [r.acceptance is not None for r in final.rows] == [True, True, False, False]
        best = [r for r in final.rows if r.mark == "BEST"]
        assert len(best) == 1 and best[0].number == final.best
        assert final.summary and final.summary[0].startswith(f"Best for TG t/s: #{final.best}")
        assert "last sweep" in str(app.main.tuning_panel.render())

        # w again shows the finished table; b saves the best row as a profile and an INI section.
        await pilot.press("w")
        assert await until(pilot, lambda: isinstance(app.screen, SweepScreen) and app.screen.defn is not None)
        screen = app.screen
        assert await until(pilot, lambda: screen._shown is not None and screen._shown.best == final.best)
        screen.query_one("#sweep-save-as", Input).value = "ui-best"
        await pilot.pause()
        await pilot.press("b")
        profile = config_dir() / "profiles" / "ui-best.toml"
        ini = config_dir() / "presets.ini"
        assert await until(pilot, lambda: profile.is_file() and ini.is_file()), [n.message for n in app._notifications]
        assert "[ui-best]" in ini.read_text()
        best_ub = best[0].values[1]
        assert f"ubatch-size = {best_ub}" in ini.read_text() or f"ub = {best_ub}" in ini.read_text(), ini.read_text()
        await pilot.press("escape", "q")
        assert await until(pilot, lambda: not app.is_running, timeout=30)


async def test_sweep_cancel_then_resume_in_a_new_session(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    app = make_app(options(tiny_models["tiny-mtp"], server_bin, tmp_path, n_predict=1000))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_sweep(pilot, app)
        await pilot.press("g")
        assert await until(pilot, lambda: app.lab.sweep_view is not None and app.lab.sweep_view.done >= 1)
        await pilot.press("x")
        assert await until(pilot, lambda: app.lab.finished["sweep"] == 1)
        first = app.lab.sweep_view
        assert first is not None and "cancelled" in first.message
        done_first = [r.number for r in first.rows if r.status == "ok"]
        assert 1 <= len(done_first) < 4, first.rows
        state = load_journal("sweep", screen.defn.sweep_id)
        assert state is not None and len(state.trials) == len(done_first)

        sweep_id = screen.defn.sweep_id
        await pilot.press("escape", "q")
        assert await until(pilot, lambda: not app.is_running, timeout=30)

    # A new session: the sweep screen starts from MTP on,off alone; r brings the saved sweep back.
    app = make_app(options(tiny_models["tiny-mtp"], server_bin, tmp_path, n_predict=1000))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("w")
        assert await until(pilot, lambda: isinstance(app.screen, SweepScreen) and app.screen.defn is not None)
        screen = app.screen
        assert screen.defn.sweep_id != sweep_id
        await pilot.press("r")
        assert await until(pilot, lambda: screen.defn is not None and screen.defn.sweep_id == sweep_id)
        assert screen.query_one("#axis-4", Input).value == "256,512"
        assert await until(pilot, lambda: screen._shown is not None and "already done (g resumes)" in screen._shown.message)
        assert [r.number for r in screen._shown.rows if r.status == "ok"] == done_first
        await pilot.press("g")  # resume: only the rows not done run
        assert await until(pilot, lambda: app.lab.finished["sweep"] == 1)
        final = app.lab.sweep_view
        assert final is not None and [r.status for r in final.rows] == ["ok"] * 4
        state = load_journal("sweep", sweep_id)
        assert state is not None and len(state.sessions) == 2
        assert state.sessions[1]["launches"] == 4 - len(done_first)
        await pilot.press("escape", "q")
        assert await until(pilot, lambda: not app.is_running, timeout=30)


async def test_predicted_oom_rows_marked_and_skipped(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """A context too large for the (simulated) GPU is marked oom before the run and skipped in it."""
    hw = parse_gpus_spec("1x512MiB")  # --fit off: nothing moves to the host to make it fit
    app = make_app(options(tiny_models["tiny-mtp"], server_bin, tmp_path, hardware=hw, fit=False, fit_target=[64]))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("w")
        assert await until(pilot, lambda: isinstance(app.screen, SweepScreen))
        screen = app.screen
        screen.query_one("#axis-0", Input).value = ""
        seen = screen.checks
        screen.query_one("#axis-5", Input).value = "1024,262144"  # ctx
        assert await until(pilot, lambda: screen.checks > seen and screen.defn is not None
                           and screen.defn.axes[0].name == "c")
        rows = screen._shown.rows
        assert [r.risk for r in rows] == ["ok", "oom"], rows
        assert "predicted to OOM (skipped)" in screen._shown.message
        await pilot.press("g")
        assert await until(pilot, lambda: app.lab.finished["sweep"] == 1)
        final = app.lab.sweep_view
        assert [r.status for r in final.rows] == ["ok", "predicted_oom"], final.rows
        assert "OOM" in final.rows[1].note
        await pilot.press("escape", "q")
        assert await until(pilot, lambda: not app.is_running, timeout=30)


async def test_quit_while_a_sweep_runs_stops_its_server(server_bin: Path, tiny_models: dict[str, Path],
                                                       tmp_path: Path) -> None:
    """q in the middle of a row: the sweep is cancelled and its llama-server stopped before the App exits."""
    app = make_app(options(tiny_models["tiny-mtp"], server_bin, tmp_path, n_predict=4000))  # a request in flight
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_sweep(pilot, app, ub="256")
        await pilot.press("g")
        assert await until(pilot, lambda: app.lab._job is not None and app.lab.sweep_view is not None
                           and "requests" in app.lab.sweep_view.message)
        sup = app.lab._job.launcher._sup
        assert sup is not None and sup.pid is not None
        pid = sup.pid
        assert Path(f"/proc/{pid}").exists()
        await pilot.press("escape")
        t0 = time.monotonic()
        await pilot.press("q")  # a run in flight: quitting asks first, naming what is lost
        assert await until(pilot, lambda: isinstance(app.screen, Question))
        await pilot.press("y")
        assert await until(pilot, lambda: not app.is_running, timeout=30)
        print(f"quit during a sweep row: {time.monotonic() - t0:.2f} s")
    assert sup.state.final, sup.state  # stopped, not left running
    assert not alive(pid)
    state = load_journal("sweep", screen.defn.sweep_id)
    # The interrupted row is not recorded (a resume runs it); rows finished before q are whole.
    assert state is None or (len(state.trials) < 2 and all(r.status == "ok" and r.samples is not None and r.samples.passes() for r in state.trials.values()))


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
