"""Launch, restart and stop from the UI drive the real supervisor and a real llama-server (tiny model);
`q` quits and leaves no server behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
from textual.widgets import Input

from tui.core.gpu.profiles import PROFILES
from tui.core.options.settings import Settings
from tui.ui.widgets.question import Question
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.options import AppOptions


DEADLINE_S = 60.0


def _options(server_bin: Path, model: Path, tmp_path: Path) -> AppOptions:
    settings = Settings(model=str(model), ctx_size=1024, parallel=1, threads=1, threads_batch=1,
                        spec_type=["draft-mtp"], spec_draft_n_max=3)
    return AppOptions(settings=settings, server_bin=server_bin, hardware=PROFILES["rtx3060-laptop-6g"],
                      simulate=True, cursor_blink=False, server_log_dir=tmp_path / "logs", sample_interval_s=0.5)


async def wait_state(pilot, app: MtpTuneApp, states: set[str]) -> str:  # noqa: ANN001 - Pilot
    """Poll the App's own view of the server (bounded)."""
    deadline = time.monotonic() + DEADLINE_S
    while app.main.server.status.state not in states and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return app.main.server.status.state


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); read its state.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


async def test_launch_restart_stop(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    app = make_app(_options(server_bin, tiny_models["tiny-mtp"], tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        assert await wait_state(pilot, app, {"ready", "failed"}) == "ready", app.main.server.status.failure
        first_pid = app.main.server.status.pid
        assert first_pid and alive(first_pid)
        url = app.main.server.status.url
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        assert "READY" in str(app.query_one("#server-head").render())

        # Change a knob: the field is marked "restart needed" until the server runs with it.
        field = app.query_one("#f-spec_draft_n_max", Input)
        field.focus()
        await pilot.press("end", "backspace", "2")
        await pilot.pause()
        assert app.query_one("#row-spec_draft_n_max").has_class("-restart")
        assert "restart needed: spec-draft-n-max" in str(app.query_one("#server-head").render())

        await pilot.press("f6")  # restart while typing
        await pilot.pause(0.2)
        assert await wait_state(pilot, app, {"ready", "failed"}) == "ready"
        deadline = time.monotonic() + DEADLINE_S
        while (app.main.server.status.pid == first_pid or app.main.server.status.state != "ready") and time.monotonic() < deadline:
            await pilot.pause(0.05)
        second_pid = app.main.server.status.pid
        assert second_pid and second_pid != first_pid and not alive(first_pid)
        argv = app.backend._supervisor.launch.argv
        assert argv[argv.index("--spec-draft-n-max") + 1] == "2"
        assert not app.query_one("#row-spec_draft_n_max").has_class("-restart")

        await pilot.press("escape", "s")
        assert await wait_state(pilot, app, {"stopped", "exited"}) in ("stopped", "exited")
        assert not alive(second_pid)


async def test_quit_stops_the_server(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    app = make_app(_options(server_bin, tiny_models["tiny-mtp"], tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        assert await wait_state(pilot, app, {"ready", "failed"}) == "ready"
        pid = app.main.server.status.pid
        await pilot.press("q")
        deadline = time.monotonic() + DEADLINE_S
        while app.is_running and time.monotonic() < deadline:
            await pilot.pause(0.05)
    assert pid is not None and not alive(pid)


async def test_quit_while_a_probe_streams_cancels_it_before_the_stop(
        server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """`q` mid-request: the probe's request is cancelled (the run ends "cancelled") before the server
    is stopped, and no server is left. (The time it takes is measured by bench/bench_quit.py.)"""
    import dataclasses

    from tui.ui.cockpit.backend import Backend

    events: list[str] = []

    class Recording(Backend):
        def _run_probes(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - on the probe thread
            events.append("probe started")
            result = super()._run_probes(*args, **kwargs)
            events.append(f"probe ended: {result[0].message}")
            return result

        def server_action(self, action: str, settings: Settings | None, grace: float | None = None,
                          stand_ins: bool = False) -> str | None:
            events.append(f"{action} (grace {grace})")
            return super().server_action(action, settings, grace=grace, stand_ins=stand_ins)

    options = dataclasses.replace(_options(server_bin, tiny_models["tiny-mtp"], tmp_path), probe_repeat=3,
                                  probe_n_predict=4096)
    app = make_app(options, Recording(options))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        assert await wait_state(pilot, app, {"ready", "failed"}) == "ready"
        pid = app.main.server.status.pid
        await pilot.press("p")
        deadline = time.monotonic() + DEADLINE_S
        while ", pass " not in app.main.probes.state.message and time.monotonic() < deadline:
            await pilot.pause(0.02)
        assert ", pass " in app.main.probes.state.message, app.main.probes.state.message  # a request is on its way
        await pilot.press("q")  # a probe in flight: quitting asks first
        await pilot.pause()
        assert isinstance(app.screen, Question), app.screen
        await pilot.press("y")
        deadline = time.monotonic() + DEADLINE_S
        while app.is_running and time.monotonic() < deadline:
            await pilot.pause(0.05)
    assert events[0] == "launch (grace None)"
    assert events[1] == "probe started"
    assert events[2].startswith("probe ended: cancelled"), events
    assert events[3].startswith("stop (grace "), events  # the short grace: the request was in flight
    assert len(events) == 4, events
    assert pid is not None and not alive(pid)


async def test_failure_is_explained(server_bin: Path, tmp_path: Path) -> None:
    """A model that is not a GGUF: the panel shows the explained failure, not a wall of log."""
    bad = tmp_path / "not-a-model.gguf"
    bad.write_text("this is not a gguf file\n" * 10)
    app = make_app(_options(server_bin, bad, tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        assert await wait_state(pilot, app, {"failed", "ready"}) == "failed"
        await pilot.pause(0.1)
        failure = str(app.query_one("#server-failure").render())
        assert "GGUF" in failure or "gguf" in failure
        assert app.query_one("#server-failure").has_class("-shown")
        await pilot.press("o")  # the raw log, one key away
        await pilot.pause()
        assert app.screen.__class__.__name__ == "LogScreen"


def test_each_launch_writes_one_history_entry(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """The supervisor is the one writer of launch history: a TUI launch, then a restart, leave two entries."""
    from tui.core.presets.profiles import history_dir, load_history_entry
    from tui.ui.cockpit.backend import Backend

    options = _options(server_bin, tiny_models["tiny-mtp"], tmp_path)
    backend = Backend(options)
    try:
        assert backend.server_action("launch", options.settings) is None
        assert backend.status().state == "ready"
        entries = sorted(history_dir().glob("*.toml"))
        assert len(entries) == 1, entries
        assert load_history_entry(entries[0]).settings.spec_draft_n_max == 3
        assert backend.server_action("restart", options.settings) is None
        assert len(list(history_dir().glob("*.toml"))) == 2
    finally:
        backend.close()


def test_launched_run_is_labelled_from_what_runs(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """The form changed after the launch (n-max 5, not applied): the run measures n-max 3 and says so."""
    import dataclasses
    import threading

    from tui.core.config.paths import config_dir
    from tui.ui.cockpit.backend import Backend
    from tui.ui.cockpit.views import ProbeState

    suite = config_dir() / "suites" / "one.toml"
    suite.parent.mkdir(parents=True, exist_ok=True)
    suite.write_text('name = "one"\n[[prompts]]\nname = "capital"\nprompt = "What is the capital of France?"\n')
    options = dataclasses.replace(_options(server_bin, tiny_models["tiny-mtp"], tmp_path), probe_repeat=1,
                                  probe_n_predict=16)
    backend = Backend(options)
    try:
        assert backend.server_action("launch", options.settings) is None
        edited = dataclasses.replace(options.settings, spec_draft_n_max=5)
        _, run_id, error = backend.run_probes(str(suite), edited, ProbeState(), lambda _s: None, threading.Event())
        assert error is None and run_id is not None
        row = backend.store().require(run_id)
        assert row.label is not None and row.label.startswith("MTP n3"), row.label
        assert row.mtp is True and row.settings is not None and row.settings["spec_draft_n_max"] == 3
    finally:
        backend.close()
