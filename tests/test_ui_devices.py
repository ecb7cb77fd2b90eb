"""The TUI counts devices as llama-server does (the one device list's `DeviceSet.count`, `--rpc`
servers included), and names an `--rpc` server that did not answer under the bars."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from tui.core.options.settings import Settings
from tui.ui.app import make_app
from tui.ui.options import AppOptions
from tui.ui.cockpit.vram_bars import VramBars


def _ts_problems(app) -> list[str]:  # noqa: ANN001 - the App
    return [p.message for p in app.main.plan.problems if p.field == "tensor_split"]


async def test_validation_counts_rpc_devices_and_the_unreachable_one_is_named(
        rpc_server_bin: Path, tiny_models: dict[str, Path]) -> None:
    from tui.core.gpu.profiles import PROFILES
    from tui.core.planning.standin import RpcServers
    from tui.core.server.process import free_port

    with RpcServers(rpc_server_bin, count=1) as rpc:
        gone = f"127.0.0.1:{free_port()}"
        settings = Settings(model=str(tiny_models["tiny-mtp"]), ctx_size=1024, rpc=[rpc.endpoints, gone],
                            tensor_split=[1.0, 1.0])
        app = make_app(AppOptions(settings=settings, hardware=PROFILES["rtx3060-laptop-6g"], simulate=True,
                                  cursor_blink=False, exact=False, sample_interval_s=0.5))
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 30
            while (app.main.plan.view is None or not app.main.plan.view.devices) and time.monotonic() < deadline:
                await pilot.pause(0.05)
            view = app.main.plan.view
            assert view is not None and view.error is None, view
            assert any(gone in w for w in view.warnings), view.warnings
            await pilot.pause(0.2)
            assert gone in str(app.main.query_one(VramBars).render()) or any(
                gone in str(w.render()) for w in app.main.query_one(VramBars).query("*") if hasattr(w, "render"))
            # one RPC server that answered + one simulated GPU: two devices, as llama-server counts them
            app.main.form.load(settings)
            await pilot.pause(0.2)
            assert _ts_problems(app) == []  # the snapshot alone (one GPU) would call two entries too many
            app.main.form.load(dataclasses.replace(settings, tensor_split=[1.0, 1.0, 1.0]))
            await pilot.pause(0.2)
            assert any("only 2 device(s)" in m for m in _ts_problems(app)), app.main.plan.problems
