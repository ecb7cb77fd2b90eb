"""Host RAM and server RSS from /proc, and the weights-spilled-to-host warning."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from tui.core.gpu import NA, ServerView, SimulatedGpus, collect_snapshot, read_host_memory, read_process_memory, spill_warning
from tui.core.gpu.host import is_host_buffer

MEMINFO = """MemTotal:       24731648 kB
MemFree:         1048576 kB
MemAvailable:   23641088 kB
Buffers:          123456 kB
SwapTotal:       2097152 kB
SwapFree:        1048576 kB
"""

STATUS = """Name:\tllama-server
State:\tS (sleeping)
Pid:\t4242
VmPeak:\t 9999999 kB
VmHWM:\t 2097152 kB
VmRSS:\t 1572864 kB
Threads:\t8
"""


def test_host_memory_from_meminfo(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text(MEMINFO)
    h = read_host_memory(tmp_path)
    assert (h.ram_total_mib, h.ram_available_mib, h.swap_total_mib, h.swap_free_mib) == (24152, 23087, 2048, 1024)


def test_old_kernel_without_memavailable(tmp_path: Path) -> None:
    (tmp_path / "meminfo").write_text("MemTotal: 2048 kB\nMemFree: 1024 kB\n")
    assert read_host_memory(tmp_path).ram_available_mib == 1


def test_no_proc_means_na(tmp_path: Path) -> None:
    h = read_host_memory(tmp_path / "missing")
    assert h.ram_total_mib is NA and h.ram_available_mib is NA
    assert h.to_dict()["ram_total_mib"] is None


def test_real_host_memory_is_consistent() -> None:
    h = read_host_memory()
    assert isinstance(h.ram_total_mib, int) and isinstance(h.ram_available_mib, int)
    assert 0 < h.ram_available_mib <= h.ram_total_mib


def test_process_rss_from_status(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "status").write_text(STATUS)
    p = read_process_memory(4242, tmp_path)
    assert (p.pid, p.name, p.rss_mib, p.peak_rss_mib, p.alive) == (4242, "llama-server", 1536.0, 2048.0, True)


def test_zombie_and_gone_processes(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "status").write_text("Name:\tllama-server\nState:\tZ (zombie)\n")
    assert read_process_memory(7, tmp_path).alive is False
    gone = read_process_memory(8, tmp_path)
    assert gone.alive is False and gone.rss_mib is NA


def test_rss_of_a_real_child_process() -> None:
    code = "import sys; b = b'x' * (64 << 20); print('ready', flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 60)
        assert ready and child.stdout.readline().strip() == b"ready"
        p = read_process_memory(child.pid)
        assert p.alive and isinstance(p.rss_mib, float) and p.rss_mib > 64
        assert isinstance(p.peak_rss_mib, float) and p.peak_rss_mib >= p.rss_mib
    finally:
        child.communicate(b"", timeout=30)
    assert read_process_memory(child.pid).alive is False


def test_snapshot_carries_server_rss() -> None:
    snap = collect_snapshot(SimulatedGpus("rtx3090-24g"), server=ServerView(pid=os.getpid()))
    assert snap.server is not None and snap.server.alive and snap.server.rss_mib > 1  # type: ignore[operator]


# -- spill warning ------------------------------------------------------------------------------


def test_host_buffer_names() -> None:
    assert all(is_host_buffer(n) for n in ("CPU", "CPU_Mapped", "CPU_REPACK", "CUDA_Host", "ROCm_Host"))
    assert not any(is_host_buffer(n) for n in ("CUDA0", "RPC0[127.0.0.1:50052]", "Vulkan1", "Metal"))


def test_partial_offload_is_a_spill() -> None:
    w = spill_warning({"CPU_Mapped": 6200.0, "CUDA0": 9000.0}, layers_offloaded=(30, 41))
    assert w is not None and "11" in w.message and "CPU_Mapped 6200 MiB" in w.message
    assert (w.host_mib, w.device_mib) == (6200.0, 9000.0)


def test_embeddings_on_host_with_full_offload_are_not_a_spill() -> None:
    buffers = {"CPU_Mapped": 515.0, "CUDA0": 17904.0}
    assert spill_warning(buffers, layers_offloaded=(41, 41)) is None
    assert spill_warning(buffers) is None  # host < devices: the embedding table, not a spill
    assert spill_warning(buffers, expected_host_mib=515.0) is None


def test_host_beyond_the_expected_embeddings_is_a_spill() -> None:
    w = spill_warning({"CPU_Mapped": 2000.0, "CUDA_Host": 100.0, "CUDA0": 17904.0}, expected_host_mib=515.0)
    assert w is not None and "515" in w.message and w.host_buffers == (("CPU_Mapped", 2000.0), ("CUDA_Host", 100.0))


def test_more_on_host_than_on_gpus_without_other_evidence() -> None:
    assert spill_warning({"CPU_Mapped": 3000.0, "CUDA0": 1000.0}) is not None


@pytest.mark.parametrize(
    "buffers",
    [{"CPU_Mapped": 1.68}, {"CPU_Mapped": 3000.0}, {"CUDA0": 5000.0}, {"CPU_Mapped": 10.0, "CUDA0": 1.0}, {}],
)
def test_no_spill_without_weights_on_both_sides(buffers: dict[str, float]) -> None:
    """CPU-only runs, all-GPU runs and a few MiB of host buffers are never a spill."""
    assert spill_warning(buffers, layers_offloaded=(0, 41)) is None


def test_spill_warning_reaches_the_snapshot() -> None:
    view = ServerView(pid=None, model_buffers_mib={"CPU_Mapped": 6200.0, "CUDA0": 9000.0}, layers_offloaded=(30, 41))
    snap = collect_snapshot(SimulatedGpus("rtx3060-laptop-6g"), server=view)
    assert snap.spill is not None and snap.spill.message in snap.warnings
