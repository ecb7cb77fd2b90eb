"""Attach mode and a frozen server: the UI watches and probes a server it did not start (and leaves
it running on quit); a server that stops answering (SIGSTOP) never freezes the screen."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.helpers.llama import llama_server
from tui.core.gpu.profiles import PROFILES
from tui.core.config.paths import config_dir
from tui.core.options.settings import Settings
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.options import AppOptions


SUITE = """\
name = "attach-test"
[[prompts]]
name = "capital"
prompt = "What is the capital of France?"
"""


async def until(pilot, predicate, timeout: float = 60.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return bool(predicate())


def suite_file() -> Path:
    path = config_dir() / "suites" / "attach-test.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SUITE)
    return path


async def test_attach_watches_and_probes(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    with llama_server(server_bin, tiny_models["tiny-mtp"], ["--spec-type", "draft-mtp"], tmp_path) as srv:
        options = AppOptions(attach_url=srv.url, hardware=PROFILES["rtx3060-laptop-6g"], simulate=True,
                             cursor_blink=False, probe_suite=str(suite_file()), probe_repeat=2, probe_n_predict=16)
        app = make_app(options)
        async with app.run_test(size=(120, 40)) as pilot:
            assert await until(pilot, lambda: app.main.server.status.state == "ready"), app.main.server.status
            head = str(app.main.server_panel.query_one("#server-head").render())
            assert "attached" in head and srv.url in head
            await pilot.press("l")  # nothing to launch: mtp-tune does not own this server
            await pilot.pause()
            assert any("attached" in n.message for n in app._notifications)
            done = app.main.probes.runs_finished
            await pilot.press("p")
            assert await until(pilot, lambda: app.main.probes.runs_finished > done)
            summary = app.main.probes.state.summaries[-1]
            assert summary.n == 2 and summary.tg_median and summary.acceptance == pytest.approx(1.0)
            await pilot.press("q")
            assert await until(pilot, lambda: not app.is_running, 30)
        assert srv.alive(), "quitting an attached session must leave the server running"


async def test_frozen_server_never_freezes_the_screen(server_bin: Path, tiny_models: dict[str, Path],
                                                      tmp_path: Path) -> None:
    settings = Settings(model=str(tiny_models["tiny-mtp"]), ctx_size=1024, parallel=1, threads=1, threads_batch=1)
    options = AppOptions(settings=settings, server_bin=server_bin, hardware=PROFILES["rtx3060-laptop-6g"],
                         simulate=True, cursor_blink=False, server_log_dir=tmp_path / "logs",
                         probe_suite=str(suite_file()), sample_interval_s=0.2)
    app: MtpTuneApp = make_app(options)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        assert await until(pilot, lambda: app.main.server.status.state == "ready")
        pid = app.main.server.status.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            await pilot.press("p")
            assert await until(pilot, lambda: app.main.probes.state.running)
            # The UI keeps answering while the probe waits on the frozen server...
            theme, seq = app.theme, app.main.plan.snapshot.seq if app.main.plan.snapshot else 0
            await pilot.press("t")
            assert await until(pilot, lambda: app.theme != theme, 5)
            assert await until(pilot, lambda: app.main.plan.snapshot is not None and app.main.plan.snapshot.seq > seq, 10)
            # ...and cancelling works without the server's help.
            done = app.main.probes.runs_finished
            await pilot.press("x")
            assert await until(pilot, lambda: app.main.probes.runs_finished > done, 15)
            assert not app.main.probes.state.running
            # Stopping a frozen server: SIGTERM cannot act, SIGKILL after the grace period does.
            await pilot.press("s")
            assert await until(pilot, lambda: app.main.server.status.state in ("stopped", "exited", "failed"), 30)
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_attached_run_is_labelled_from_the_server(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """The form says nothing about MTP (spec-type none); the server runs draft-mtp with n-max 3: the stored
    run says what the server runs, not what the form shows."""
    import threading

    from tui.core.server.events import ServerState
    from tui.ui.cockpit.backend import Backend
    from tui.ui.cockpit.views import ProbeState

    extra = ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]
    with llama_server(server_bin, tiny_models["tiny-mtp"], extra, tmp_path) as srv:
        backend = Backend(AppOptions(attach_url=srv.url, probe_suite=str(suite_file()), probe_repeat=1,
                                     probe_n_predict=16))
        try:
            backend.on_server_change(lambda: None)
            assert backend.handle is not None and backend.handle.wait_ready(30) == ServerState.READY
            assert Settings().mtp_enabled is False  # the form: spec-type "default: none"
            state, run_id, error = backend.run_probes(str(suite_file()), Settings(), ProbeState(), lambda _s: None,
                                                      threading.Event())
            assert error is None and run_id is not None
            row = backend.store().require(run_id)
            assert row.mtp is True
            assert row.label is not None and row.label.startswith("MTP n3"), row.label
            assert row.settings is not None and row.settings["spec_type"] == ["draft-mtp"]
            assert row.settings["spec_draft_n_max"] == 3
            assert state.summaries[-1].config == row.label and state.summaries[-1].acceptance == pytest.approx(1.0)
        finally:
            backend.close()


async def test_attached_server_panel_shows_what_the_server_runs(server_bin: Path, tiny_models: dict[str, Path],
                                                                tmp_path: Path) -> None:
    """The form says spec-type none; the server runs draft-mtp: the server panel says what the server
    runs, marked as read from it, with the n-max unknown until a speculative request told it."""
    extra = ["--spec-type", "draft-mtp", "--spec-draft-n-max", "2"]
    with llama_server(server_bin, tiny_models["tiny-mtp"], extra, tmp_path) as srv:
        options = AppOptions(attach_url=srv.url, cursor_blink=False, probe_suite=str(suite_file()), probe_repeat=1,
                             probe_n_predict=16)
        app = make_app(options)
        async with app.run_test(size=(120, 40)) as pilot:
            def running() -> str:
                return str(app.main.server_panel.query_one("#server-running").render())

            assert await until(pilot, lambda: "spec-type draft-mtp" in running()), running()
            text = running()
            assert text.startswith("runs (read from the server): ")
            assert "n-max unknown until a speculative request ran" in text
            assert "ctx 4096" in text and "slots 1" in text and tiny_models["tiny-mtp"].name in text
            assert app.main.plan.settings.mtp_enabled is False  # the form still shows its own (none)
            done = app.main.probes.runs_finished
            await pilot.press("p")
            assert await until(pilot, lambda: app.main.probes.runs_finished > done)
            assert await until(pilot, lambda: "n-max 2" in running()), running()
            await pilot.press("q")
            assert await until(pilot, lambda: not app.is_running, 30)
