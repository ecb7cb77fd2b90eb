"""The server panel shows a launch's download: the real path (`-hf` from the loopback Hub, the plan's
header giving the total) and the panel's drawing of a fixed status."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from tests.helpers.range_server import LoopbackHub
from tui.core.gpu.profiles import PROFILES
from tui.core.options.settings import Settings
from tui.ui.cockpit import remote
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.options import AppOptions
from tui.ui.cockpit.views import ServerStatus
from tui.ui.cockpit.server_panel import ServerPanel

DEADLINE_S = 60.0


def _text(app: App, selector: str) -> str:  # type: ignore[type-arg]
    return str(app.query_one(selector).render())


async def _until(pilot, done, what: str) -> None:  # noqa: ANN001 - Pilot, a predicate
    """Poll the App's own widgets (bounded)."""
    deadline = time.monotonic() + DEADLINE_S
    while not done() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    assert done(), what


async def test_the_panel_follows_a_real_download(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
                                                 hub: LoopbackHub, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.add_repo("user/ui", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]})
    monkeypatch.setenv("HF_ENDPOINT", hub.url)  # the plan and llama-server ask the same Hub
    settings = Settings(hf_repo="user/ui:Q4_K_M", ctx_size=256, parallel=1, threads=1, threads_batch=1)
    app: MtpTuneApp = make_app(AppOptions(settings=settings, server_bin=server_bin,
                                          hardware=PROFILES["rtx3060-laptop-6g"], simulate=True, cursor_blink=False,
                                          server_log_dir=tmp_path / "logs", sample_interval_s=0.5))
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(pilot, lambda: remote.fetched(settings) is not None, "the plan reads the header first")
        assert not app.query_one("#server-download").display
        hub.rate_bps = 500_000  # about 3.5 s for the 1.7 MB model
        await pilot.press("l")
        await _until(pilot, lambda: "downloading m-Q4_K_M.gguf " in _text(app, "#server-download"),
                     "the panel shows the download under way")
        line = _text(app, "#server-download")
        assert "% (" in line and "of 1.7 MiB" in line and line.startswith("▕"), line
        assert app.query_one("#server-download").has_class("-active")
        await _until(pilot, lambda: app.main.server.status.state in ("ready", "failed"), "ready")
        assert app.main.server.status.state == "ready", app.main.server.status.failure
        await _until(pilot, lambda: "downloaded" in _text(app, "#server-download"), "the panel says it is done")
        assert _text(app, "#server-download") == "downloaded m-Q4_K_M.gguf (1.7 MiB)"
        assert not app.query_one("#server-download").has_class("-active")


class PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ServerPanel(id="server")


async def test_the_panel_draws_a_download_status() -> None:
    app = PanelApp()
    async with app.run_test(size=(100, 20)) as pilot:
        panel = app.query_one(ServerPanel)
        line = "downloading m-Q4_K_M.gguf 42% (1.9 of 4.6 GiB, 35 MiB/s, ETA 1 min)"
        panel.show(ServerStatus(state="starting", download=line, download_fraction=0.42, downloading=True))
        await pilot.pause()
        dl = app.query_one("#server-download")
        assert dl.display and dl.has_class("-active")
        assert _text(app, "#server-download") == "▕█████░░░░░░░▏ " + line
        panel.show(ServerStatus(state="starting", download="downloading x.gguf (1.2 MiB, 1.0 MiB/s)", downloading=True))
        await pilot.pause()
        assert _text(app, "#server-download") == "⬇ downloading x.gguf (1.2 MiB, 1.0 MiB/s)"  # no total: no bar
        panel.show(ServerStatus(state="ready", download="downloaded m-Q4_K_M.gguf (4.6 GiB)", download_fraction=1.0))
        await pilot.pause()
        assert _text(app, "#server-download") == "downloaded m-Q4_K_M.gguf (4.6 GiB)" and not dl.has_class("-active")
        panel.show(ServerStatus(state="stopped"))
        await pilot.pause()
        assert not dl.display
