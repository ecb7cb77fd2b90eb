"""What a newcomer trips over: no GPU, `--rpc` devices, absurd values in the form, re-running the
README's first command."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from tui.core.gpu.types import GpuSnapshot, HostMemory, Source, Status
from tui.core.options.settings import Settings
from tui.ui.app import make_app
from tui.ui.options import AppOptions, FixedScreen
from tui.ui.cockpit.views import DevicePlan, PlanView
from tui.ui.cockpit.vram_bars import DeviceBar, NO_GPU_TEXT

from tests.helpers import ui_samples


def _no_gpu_snapshot() -> GpuSnapshot:
    return GpuSnapshot(seq=1, taken_at=0.0, monotonic_s=0.0, sample_ms=0.1, source=Source.NONE, status=Status.LIBRARY_NOT_FOUND,
                       message="NVML not available: no NVIDIA driver", devices=(), host=HostMemory(24_000, 20_000))


def _host_plan() -> PlanView:
    host = DevicePlan(name="host memory", total_mib=24_000, free_mib=20_000, weights_mib=25, kv_mib=12,
                      needed_mib=80, headroom_mib=19_920, key="Host")
    return PlanView(devices=(host,))


def _bars_text(app) -> list[str]:  # noqa: ANN001 - the App
    return [str(bar.render()) for bar in app.query(DeviceBar)]


async def test_no_gpu_shows_host_ram_and_names_a_profile_to_try() -> None:
    """No GPU and nothing simulated: the bar is host RAM (never "GPU0 host memory"), and the status
    line says which simulated profile to try."""
    fixed = FixedScreen(snapshot=_no_gpu_snapshot(), plan=_host_plan())
    app = make_app(AppOptions(settings=Settings(model="/m.gguf"), fixed=fixed, cursor_blink=False))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        (text,) = _bars_text(app)
        assert text.startswith("host RAM ")
        assert "GPU0" not in text and "host memory" not in text
        assert "3.91/23.44 GiB" in text  # the live line is the host's RAM in use
        status = str(app.query_one("#telemetry-status").render())
        assert status == NO_GPU_TEXT
        assert "--gpus rtx3060-laptop-6g" in status


def test_a_cpu_only_plan_marks_its_device_as_the_host(tiny_models: dict[str, Path]) -> None:
    from tui.ui.cockpit.planning import plan_view

    options = AppOptions(settings=Settings(model=str(tiny_models["tiny-mtp"])))
    view = plan_view(options.settings, _no_gpu_snapshot(), options, seq=1)
    assert view.error is None
    assert [d.kind for d in view.devices] == ["host"]


async def test_simulated_gpus_keep_their_gpu_names() -> None:
    app = make_app(AppOptions(settings=ui_samples.settings(), cursor_blink=False,
                              fixed=FixedScreen(snapshot=ui_samples.snapshot(), plan=ui_samples.plan())))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        (text,) = _bars_text(app)
        assert text.startswith("GPU0 ")
        assert "SIMULATED" in str(app.query_one("#telemetry-status").render())


async def test_rpc_devices_are_bars_of_their_own_before_the_gpus() -> None:
    """An --rpc device gets its own bar (named by its endpoint, its size as the server reported it);
    the local GPU keeps its name and its live reading."""
    gpu = ui_samples.plan().devices[0]
    rpc = DevicePlan(name="RPC0", total_mib=16_384, free_mib=12_288, weights_mib=2000, needed_mib=2500,
                     headroom_mib=9788, key="RPC0[10.0.0.2:50052]", note="read from the server just now")
    plan = dataclasses.replace(ui_samples.plan(), devices=(rpc, dataclasses.replace(gpu, key="CUDA0")))
    app = make_app(AppOptions(settings=ui_samples.settings(), cursor_blink=False,
                              fixed=FixedScreen(snapshot=ui_samples.snapshot(), plan=plan)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        first, second = _bars_text(app)
        assert first.startswith("RPC0 10.0.0.2:50052 (remote)")
        assert "4.00/16.00 GiB read from the server just now" in first
        assert "[SIMULATED]" not in first.splitlines()[0]
        assert second.startswith("GPU0 ")
        assert "0.48/6.00 GiB" in second, second  # the simulated GPU's live reading, not the RPC server's


async def test_the_form_refuses_an_absurd_n_max_with_llamas_range() -> None:
    """spec-draft-n-max 500000 in the form: an error naming the field and the range llama.cpp accepts."""
    from textual.widgets import Input

    app = make_app(AppOptions(settings=ui_samples.settings(), cursor_blink=False,
                              fixed=FixedScreen(snapshot=ui_samples.snapshot(), plan=ui_samples.plan())))
    async with app.run_test(size=(120, 40)) as pilot:
        field = app.query_one("#f-spec_draft_n_max", Input)
        field.focus()
        await pilot.press("end", *["backspace"] * 4, *"500000")
        await pilot.pause(0.3)
        errors = [p for p in app.main.plan.problems if p.severity == "error" and p.field == "spec_draft_n_max"]
        assert errors, app.main.plan.problems
        assert "500000 is above 2047" in errors[0].message and "between 0 and 2047" in errors[0].message
        assert app.query_one("#row-spec_draft_n_max").has_class("-error")


def test_rerunning_the_first_command_reopens_the_demo(tmp_path: Path) -> None:
    """`mtp-tune` again after the demo launched: the demo (simulated GPU), with the settings it last
    launched, not the bare demo model on a machine without a GPU."""
    from tui.cli.app import _wants_demo
    from tui.core.demo.prepare import demo_model_path
    from tui.core.presets.profiles import record_launch
    from tui.cli._app_options import options_from_args

    model = demo_model_path()  # the demo's generated model (made here if no demo ran yet)
    args = argparse.Namespace(demo=False, server_args=[], attach=None, profile=None, gpus=None, server_bin=None,
                              theme=None, no_launch=True, suite=None, probe_repeat=None, probe_n_predict=None)
    last = Settings(model=str(model), ctx_size=4096, parallel=1, spec_type=["draft-mtp"], spec_draft_n_max=2)
    record_launch(last)
    assert _wants_demo(args)
    from tui.core.demo.prepare import DemoSetup
    from tui.core.gpu.profiles import PROFILES

    options = options_from_args(args, DemoSetup(Path("/bin/true"), model, PROFILES["rtx3060-laptop-6g"]))
    assert options.demo and options.simulate and options.hardware is PROFILES["rtx3060-laptop-6g"]
    assert options.settings.ctx_size == 4096 and options.settings.spec_draft_n_max == 2


async def test_rpc_memory_is_read_from_the_servers_into_the_bars_and_the_plan(
        rpc_server_bin: Path, tiny_models: dict[str, Path]) -> None:
    """A real loopback ggml-rpc-server and one that is not there: the first is planned and drawn with
    the memory it reports, the second is named under the bars and left out (it was planned as this
    host's RAM, issue 19)."""
    import time

    from tui.core.gpu.profiles import PROFILES
    from tui.core.planning.standin import RpcServers, host_total_mib
    from tui.core.server.process import free_port

    with RpcServers(rpc_server_bin, count=1) as rpc:
        gone = f"127.0.0.1:{free_port()}"
        settings = Settings(model=str(tiny_models["tiny-mtp"]), ctx_size=1024, rpc=[rpc.endpoints, gone])
        app = make_app(AppOptions(settings=settings, hardware=PROFILES["rtx3060-laptop-6g"], simulate=True,
                                  cursor_blink=False, exact=False, sample_interval_s=0.5))
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 30
            while (app.main.plan.view is None or len(app.main.plan.view.devices) < 2) and time.monotonic() < deadline:
                await pilot.pause(0.05)
            assert app.main.plan.view is not None and app.main.plan.view.error is None, app.main.plan.view
            kinds = [d.kind for d in app.main.plan.view.devices]
            assert kinds == ["rpc", "gpu"]
            real, _gpu = app.main.plan.view.devices
            assert abs(real.total_mib - host_total_mib()) <= 1.0  # what the CPU rpc-server reports
            assert real.note.startswith("read from the server")
            assert any(gone in w and "left out of the plan" in w for w in app.main.plan.view.warnings), \
                app.main.plan.view.warnings
            await pilot.pause(0.2)
            bars = _bars_text(app)
            assert len(bars) == 2 and bars[0].startswith(f"RPC0 {rpc.endpoints} (remote)")
            assert "read from the server" in bars[0].splitlines()[2]
            assert bars[1].startswith("GPU0 ")
            assert f"RPC server {gone} left out of the plan" in str(app.query_one("#plan-notes").render())  # under the bars
