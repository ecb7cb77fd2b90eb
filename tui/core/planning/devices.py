"""THE device list: a telemetry snapshot plus `--rpc` endpoints -> the planner's offload devices.

One entry point, `device_set` (`devices_now` takes the snapshot too), used by the TUI, validation,
`mtp-tune plan`, `probe`, `sweep` and the searches, so every caller names, orders, sizes and counts
devices the same way, as llama.cpp b11434 does (src/llama.cpp, default device selection;
ggml-rpc.cpp `ggml_backend_rpc_add_server`):

- RPC devices come first ("add RPC servers at the front of the list to minimize network
  transfers"), in `--rpc` order, then the local GPUs in CUDA order (`tui.core.gpu.cuda_order` under
  this process's CUDA_DEVICE_ORDER / CUDA_VISIBLE_DEVICES; NVML order where CUDA's own ranking
  cannot be known, see docs/gpu-order.md).
- Keys are the names llama.cpp prints on its buffers, which the memory report is keyed by:
  `CUDA0..` and `RPC0[host:port]` (each server numbers its own devices from 0, so the endpoint is the
  key); `name` is the device name llama.cpp lists (`RPC0`, `RPC1`, ... counted over all servers) or
  the GPU's model name.
- Free memory is what the device has free now plus what our own server holds there (the plan is for
  the settings on screen, which would replace it). An RPC device's size is what its server
  answers (`tui.core.gpu.rpc`, asked once per DeviceSet), or `--rpc-mib` when given; a server that
  does not answer is left out and named in `unreachable` (llama-server could not use it either),
  never planned at a size made up from this host's RAM.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tui.core.gpu.collect import collect_snapshot
from tui.core.gpu.nvml import Nvml
from tui.core.gpu.order import cuda_order
from tui.core.gpu.rpc import RpcReading, RpcReadings
from tui.core.gpu.simulated import SIMULATED_SUFFIX, SimulatedGpus, resolve_profile
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
    #: a GPU NVML sees (not simulated, not RPC): its compute buffers are its backend's, which a
    #: calibration on the CPU backend does not measure
    real_gpu: bool = False


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


#: Asks `--rpc` servers for their memory: endpoints -> the newest reading of each (`RpcReadings.read`).
RpcReader = Callable[[list[str]], Mapping[str, RpcReading]]


def _rpc_devices(endpoints: Sequence[str], sizes: Mapping[str, tuple[float, float]]) -> list[DeviceSpec]:
    """One device per `--rpc` endpoint with a known (total, free) size (a ggml-rpc-server serves one
    device unless told otherwise), named RPC0.. over all servers as llama.cpp names them."""
    return [DeviceSpec(f"RPC0[{ep}]", f"RPC{i}", *sizes[ep], remote=True)
            for i, ep in enumerate(ep for ep in endpoints if ep in sizes)]


def _local_devices(snapshot: GpuSnapshot | None, env: Mapping[str, str] | None) -> list[DeviceSpec]:
    """The snapshot's GPUs (real or simulated) as CUDA0.. in CUDA order."""
    local = [d for d in (snapshot.devices if snapshot is not None else ()) if _num(d.memory_total_mib) is not None]
    out = []
    for i, d in enumerate(local_order(local, env)):
        total = float(_num(d.memory_total_mib) or 0.0)
        name = "" if d.name is NA else str(d.name)
        if name.endswith(SIMULATED_SUFFIX):
            name = name[: -len(SIMULATED_SUFFIX)]
        out.append(DeviceSpec(f"CUDA{i}", name, total, _free_mib(d, total), real_gpu=not d.simulated))
    return out


def _host_memory(snapshot: GpuSnapshot | None) -> tuple[float | None, float | None]:
    """(total, available) host RAM in MiB from a snapshot; our own server's RSS counts as available."""
    if snapshot is None:
        return None, None
    total, avail = _num(snapshot.host.ram_total_mib), _num(snapshot.host.ram_available_mib)
    if avail is not None and snapshot.server is not None and snapshot.server.alive:
        avail += _num(snapshot.server.rss_mib) or 0.0
    return total, avail


@dataclass(frozen=True)
class DeviceSet:
    """Everything a plan or a validation needs about where llama.cpp can put memory."""

    devices: tuple[DeviceSpec, ...]  # offload devices in llama.cpp's order (RPC first), reachable ones only
    host_total_mib: float | None
    host_free_mib: float | None
    snapshot: GpuSnapshot | None  # the telemetry it came from
    unreachable: tuple[str, ...] = ()  # --rpc endpoints that did not answer (by address)
    source: str = ""  # a tag for people: "nvml", "cpu", "rtx3060-laptop-6g", "1 RPC + nvml"
    reasons: tuple[str, ...] = ()  # why each of `unreachable` did not answer (one phrase each, same order)
    readings: tuple[RpcReading, ...] = ()  # what each --rpc server answered (none asked with rpc_mib)

    @property
    def count(self) -> int:
        """What validation's device_count is: every device llama-server would offload to."""
        return len(self.devices)

    @property
    def rpc_endpoints(self) -> list[str]:
        """The `--rpc` value of the servers that answered, in order (what a dry run may connect to)."""
        return [d.key[len("RPC0["):-1] for d in self.devices if d.remote]

    def notes(self) -> tuple[str, ...]:
        """One sentence per unreachable endpoint, naming it (the CLI's table, the TUI's bars)."""
        return tuple(f"RPC server {ep} left out of the plan: {why}." for ep, why in zip(self.unreachable, self.reasons))


def _ask_once(endpoints: list[str]) -> Mapping[str, RpcReading]:
    return RpcReadings(refresh_s=0.0).read(endpoints)


def device_set(snapshot: GpuSnapshot | None, rpc_endpoints: Sequence[str] = (), rpc_mib: float | None = None, *,
               rpc_reader: RpcReader | None = None, env: Mapping[str, str] | None = None,
               source: str = "") -> DeviceSet:
    """THE device list: `--rpc` devices, then the snapshot's GPUs as CUDA0.. in CUDA order, and host RAM.

    `rpc_mib` given: every RPC device has that size and no server is asked. Otherwise each endpoint is
    asked once through `rpc_reader` (default: the RPC client, asked now; the TUI passes its caching
    `RpcReadings.read`); one that never answered is left out and listed in `unreachable` with its
    reason, never planned at a made-up size. `source`: the tag's GPU part (default: nvml or cpu).
    """
    endpoints = [e.strip() for e in rpc_endpoints if e.strip()]
    distinct = list(dict.fromkeys(endpoints))  # each server asked once, even when named twice
    readings: tuple[RpcReading, ...] = ()
    if rpc_mib is not None:
        sizes = {ep: (float(rpc_mib), float(rpc_mib)) for ep in distinct}
    else:
        asked = (rpc_reader or _ask_once)(distinct)
        readings = tuple(asked[ep] for ep in distinct if ep in asked)
        sizes = {r.endpoint: (r.memory.total, r.memory.free) for r in readings if r.memory is not None}
    missing = [ep for ep in distinct if ep not in sizes]
    why = {r.endpoint: r.error.removeprefix(f"{r.endpoint}: ") for r in readings}
    remote = _rpc_devices(endpoints, sizes)
    local = _local_devices(snapshot, env)
    simulated = snapshot is not None and any(d.simulated for d in snapshot.devices)
    tag = source or ("cpu" if not local else "simulated" if simulated else "nvml")
    total, free = _host_memory(snapshot)
    return DeviceSet(tuple(remote + local), total, free, snapshot, tuple(missing),
                     (f"{len(remote)} RPC + " if remote else "") + tag,
                     tuple(why.get(ep) or "it did not answer" for ep in missing), readings)


def devices_now(gpus: HwProfile | str | None = None, rpc_endpoints: Sequence[str] = (), rpc_mib: float | None = None,
                *, rpc_reader: RpcReader | None = None) -> DeviceSet:
    """A DeviceSet from one telemetry pass now. `gpus`: None for the GPUs NVML sees (none without a
    driver), else a `--gpus SPEC` (`cpu`, `2x16GiB`, `6GiB,24GiB`) or a profile, simulated.
    Raises ValueError naming a bad spec."""
    prof = resolve_profile(gpus) if gpus is not None else None
    snap = current_snapshot(prof, gpus=gpus is None or prof is not None)
    tag = "" if gpus is None else prof.key if prof is not None else "cpu"
    return device_set(snap, rpc_endpoints, rpc_mib, rpc_reader=rpc_reader, source=tag)


def current_snapshot(profile: HwProfile | str | None = None, *, gpus: bool = True) -> GpuSnapshot:
    """One telemetry pass now: a simulated profile's GPUs when given, else what NVML sees (no GPUs
    without a driver; none at all with `gpus=False`, as `--gpus cpu`); host memory is this
    machine's either way. Raises ValueError only for a `profile` string that names nothing."""
    if not gpus or profile is not None:
        return collect_snapshot(SimulatedGpus(profile if gpus else None))
    return collect_snapshot(Nvml(register_atexit=False))
