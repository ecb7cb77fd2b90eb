"""THE device list: a telemetry snapshot plus `--rpc` endpoints -> the planner's offload devices.

One function, `planner_devices`, used by the TUI, `mtp-tune plan`, `probe` and `sweep`, so every
caller names, orders and sizes devices the same way, as llama.cpp b11434 does (src/llama.cpp,
default device selection; ggml-rpc.cpp `ggml_backend_rpc_add_server`):

- RPC devices come first ("add RPC servers at the front of the list to minimize network
  transfers"), in `--rpc` order, then the local GPUs in CUDA order (`tui.core.gpu.cuda_order` under
  this process's CUDA_DEVICE_ORDER / CUDA_VISIBLE_DEVICES; NVML order where CUDA's own ranking
  cannot be known, see docs/gpu-order.md).
- Keys are the names llama.cpp prints on its buffers, which the memory report is keyed by:
  `CUDA0..` and `RPC0[host:port]` (each server numbers its own devices from 0, so the endpoint is the
  key); `name` is the device name llama.cpp lists (`RPC0`, `RPC1`, ... counted over all servers) or
  the GPU's model name.
- Free memory is what the device has free now plus what our own server holds there (the plan is for
  the settings on screen, which would replace it); an RPC device (a ggml-rpc-server CPU device)
  reports the host's physical memory as total and free, so `rpc_memory_mib` defaults to this host's
  RAM, the stand-in for remote hosts whose size is unknown until connected.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tui.core.gpu.collect import collect_snapshot
from tui.core.gpu.nvml import Nvml
from tui.core.gpu.order import cuda_order
from tui.core.gpu.simulated import SIMULATED_SUFFIX, SimulatedGpus
from tui.core.gpu.types import NA, GpuDevice, GpuSnapshot
from tui.core.gpu.profiles import HwProfile

HOST = "Host"


@dataclass(frozen=True)
class DeviceSpec:
    """A device llama.cpp can offload to: a local GPU, a simulated one, or a remote RPC host."""

    key: str  # llama.cpp's buffer name: CUDA0, RPC0[host:port], ...
    name: str  # description for people
    total_mib: float
    free_mib: float
    remote: bool = False


def _num(v: object) -> float | None:
    return None if v is NA or v is None or isinstance(v, bool) else float(v)  # type: ignore[arg-type]


def _free_mib(d: GpuDevice, total: float) -> float:
    ours = sum(_num(p.used_memory_mib) or 0.0 for p in d.processes if p.is_ours)
    free = _num(d.memory_free_mib)
    if free is None:
        free = total - (_num(d.memory_used_mib) or 0.0)
    return max(0.0, min(total, free + ours))


def local_order(devices: Sequence[GpuDevice], env: Mapping[str, str] | None = None) -> list[GpuDevice]:
    """The snapshot's devices in CUDA order (CUDA0 first) for a process with `env` (default: ours)."""
    env = os.environ if env is None else env
    by_index = {d.index: d for d in devices}
    order = cuda_order(devices, cuda_device_order=env.get("CUDA_DEVICE_ORDER"),
                       cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"))
    if order is None:  # FASTEST_FIRST on mixed models: only CUDA knows; NVML order is the best guess
        order = tuple(sorted(by_index))
    return [by_index[i] for i in order if i in by_index]


#: RPC memory: one size for every server (total = free), or (total, free) per endpoint as read from
#: the servers (`tui.core.gpu.rpc.read_memory`); an endpoint missing there gets `default`.
RpcMemory = float | Mapping[str, tuple[float, float]] | None


def rpc_devices(endpoints: Sequence[str], memory_mib: RpcMemory, default: float | None = None) -> list[DeviceSpec]:
    """One device per `--rpc` endpoint (a ggml-rpc-server serves one device unless told otherwise)."""
    read = memory_mib if isinstance(memory_mib, Mapping) else {}
    mib = float(default or 0.0) if isinstance(memory_mib, Mapping) else float(memory_mib or 0.0)
    out = []
    for i, ep in enumerate(e.strip() for e in endpoints if e.strip()):
        total, free = read.get(ep, (mib, mib))
        out.append(DeviceSpec(f"RPC0[{ep}]", f"RPC{i}", float(total), float(free), remote=True))
    return out


def planner_devices(snapshot: GpuSnapshot | None, rpc_endpoints: Sequence[str] = (),
                    rpc_memory_mib: RpcMemory = None, *, env: Mapping[str, str] | None = None) -> list[DeviceSpec]:
    """The offload devices in llama.cpp's order: `--rpc` devices, then the snapshot's GPUs (real or
    simulated) as CUDA0.. in CUDA order. No snapshot (or `--gpus cpu`): RPC devices only."""
    host_total = _num(snapshot.host.ram_total_mib) if snapshot is not None else None
    if rpc_memory_mib is None:
        rpc_memory_mib = host_total
    out = rpc_devices(rpc_endpoints, rpc_memory_mib, host_total)
    local = [d for d in (snapshot.devices if snapshot is not None else ()) if _num(d.memory_total_mib) is not None]
    for i, d in enumerate(local_order(local, env)):
        total = float(_num(d.memory_total_mib) or 0.0)
        name = "" if d.name is NA else str(d.name)
        if name.endswith(SIMULATED_SUFFIX):
            name = name[: -len(SIMULATED_SUFFIX)]
        out.append(DeviceSpec(f"CUDA{i}", name, total, _free_mib(d, total)))
    return out


def host_memory(snapshot: GpuSnapshot | None) -> tuple[float | None, float | None]:
    """(total, available) host RAM in MiB from a snapshot; our own server's RSS counts as available."""
    if snapshot is None:
        return None, None
    total, avail = _num(snapshot.host.ram_total_mib), _num(snapshot.host.ram_available_mib)
    if avail is not None and snapshot.server is not None and snapshot.server.alive:
        avail += _num(snapshot.server.rss_mib) or 0.0
    return total, avail


def current_snapshot(profile: HwProfile | str | None = None, *, gpus: bool = True) -> GpuSnapshot:
    """One telemetry pass now: a simulated profile's GPUs when given, else what NVML sees (no GPUs
    without a driver; none at all with `gpus=False`, as `--gpus cpu`); host memory is this
    machine's either way. Never raises."""
    if not gpus or profile is not None:
        return collect_snapshot(SimulatedGpus(profile if gpus else None))
    return collect_snapshot(Nvml(register_atexit=False))
