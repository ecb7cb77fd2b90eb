"""Reconciliation after a launch: estimate, exact (llama.cpp's dry run), reported, and NVML on a real
GPU, side by side (`m`). The demo launch is the real CPU server on the generated tiny MTP model."""

from __future__ import annotations

import time
from pathlib import Path

from tests.test_ui_exact import CountingExact, app_with, demo_options
from tui.core.gpu.types import GpuDevice, GpuProcess, GpuSnapshot, HostMemory, ProcessKind, Source, Status
from tui.ui.cockpit.reconciling import nvml_by_device
from tui.ui.cockpit.reconcile_screen import ReconcileScreen, columns, table_text
from tui.ui.cockpit.views import ReconcileRow

DEADLINE_S = 90.0


async def test_after_a_launch_estimate_exact_and_reported_stand_side_by_side(
        server_bin: Path, rpc_server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    fn = CountingExact(tmp_path / "exact")
    options = demo_options(server_bin, tiny_models["tiny-mtp"], tmp_path)
    app = app_with(options, fn)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        deadline = time.monotonic() + DEADLINE_S
        while not (app.main.server.status.state == "ready" and any(r.exact_mib is not None for r in app.main.server.status.reconcile)) \
                and app.main.server.status.state != "failed" and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert app.main.server.status.state == "ready", app.main.server.status.failure
        rows = app.main.server.status.reconcile
        assert rows and all(r.device == "Host" for r in rows)  # the demo's server is the CPU build
        by = {r.component: r for r in rows}
        # the exact dry run equals what the server then allocated (llama.cpp's own accounting)
        for comp in ("weights", "kv", "draft_kv", "compute", "draft_compute"):
            r = by[comp]
            assert r.exact_mib is not None and r.reported_mib is not None
            assert abs(r.exact_mib - r.reported_mib) <= 1.0, r
        # the reconciliation's dry run was CPU only, like the launch (not the stand-in GPU's)
        assert any(not call.rpc for call in fn.calls)
        await pilot.press("escape", "m")
        await pilot.pause()
        assert isinstance(app.screen, ReconcileScreen)
        text = str(app.screen.query_one("#reconcile-table").render())
        head = next(line for line in text.splitlines() if line.startswith("component"))
        assert head.split()[1:4] == ["estimate", "exact", "reported"] and "NVML" not in head
        assert "Host" in text and "total" in text and "three columns" in text
        assert app.screen.query_one("VerticalScroll").border_title == "Memory after launch: estimate · exact · reported"
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ReconcileScreen)


def _gpu_snapshot(ours_mib: int) -> GpuSnapshot:
    dev = GpuDevice(index=0, name="NVIDIA GeForce RTX 4090", uuid="GPU-1", pci_bus_id="0000:01:00.0",
                    memory_total_mib=24564, memory_used_mib=ours_mib + 300, memory_free_mib=24564 - ours_mib - 300,
                    processes=(GpuProcess(4242, "Xorg", 300, ProcessKind.GRAPHICS),
                               GpuProcess(31337, "llama-server", ours_mib, ProcessKind.COMPUTE, is_ours=True)))
    return GpuSnapshot(seq=1, taken_at=0.0, monotonic_s=0.0, sample_ms=0.1, source=Source.NVML, status=Status.OK,
                       message="NVML", devices=(dev,), host=HostMemory(64000, 50000))


def test_on_a_gpu_nvml_is_the_fourth_column() -> None:
    nvml = nvml_by_device(_gpu_snapshot(5210))
    assert nvml == {"CUDA0": 5210.0}
    rows = (ReconcileRow("CUDA0", "weights", 4180.0, 4178.9, 4179.0), ReconcileRow("CUDA0", "kv", 512.0, 512.0, 512.0),
            ReconcileRow("CUDA0", "compute", 616.0, 590.3, 590.25))
    text = table_text(rows, nvml)
    head = next(line for line in text.splitlines() if line.startswith("component"))
    assert head.split()[1:5] == ["estimate", "exact", "reported", "NVML"] == list(columns(nvml))
    total = next(line for line in text.splitlines() if line.strip().startswith("total"))
    assert total.split()[1:5] == ["5308.00", "5281.25", "5281.20", "5210.00"]
    # no real GPU reading (simulated, or CPU only): three columns, and it says why
    assert nvml_by_device(None) is None
    assert "NVML" not in table_text(rows, None).splitlines()[2] and "three columns" in table_text(rows, None)


def test_without_exact_figures_the_reason_is_shown() -> None:
    rows = (ReconcileRow("Host", "weights", 10.0, 10.2),)
    text = table_text(rows, None, "no llama-server found (run `mtp-tune doctor`); exact mode needs one.")
    assert "exact unavailable: no llama-server found" in text
    weights = next(line for line in text.splitlines() if line.strip().startswith("weights"))
    assert weights.split()[1:4] == ["10.00", "—", "10.20"]


def test_reconcile_screen_snapshot(snap_compare) -> None:  # noqa: ANN001 - the syrupy fixture
    from tests.helpers import ui_samples as samples
    from tui.ui.app import make_app

    assert snap_compare(make_app(samples.fixed_options("probes")), press=["m"], terminal_size=(120, 40))
