"""Host memory and the server process, from /proc; and the "weights spilled to host" warning.

A GPU configuration that leaves model weights in host memory still answers /health, it is just
slow; users only notice from tokens/s. The server's own `load_tensors: <buffer> model buffer size`
lines say where the weights went, so the warning is built from those, not guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from tui.core.gpu.types import NA, HostMemory, NaType, ProcessMemory, SpillWarning

KIB_PER_MIB: Final = 1024

#: Host model buffers smaller than this are never reported as a spill.
SPILL_TOLERANCE_MIB: Final = 32.0


def _kib_fields(text: str, wanted: tuple[str, ...]) -> dict[str, int]:
    """`Key:   123 kB` lines -> {Key: 123} for the wanted keys."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep or key not in wanted:
            continue
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0])
    return out


def _mib(fields: dict[str, int], key: str) -> int | NaType:
    return fields[key] // KIB_PER_MIB if key in fields else NA


def read_host_memory(proc_root: Path | str = "/proc") -> HostMemory:
    """RAM and swap totals from /proc/meminfo; NA fields when it cannot be read (not Linux)."""
    try:
        text = (Path(proc_root) / "meminfo").read_text()
    except OSError:
        return HostMemory(NA, NA)
    f = _kib_fields(text, ("MemTotal", "MemAvailable", "MemFree", "SwapTotal", "SwapFree"))
    available = _mib(f, "MemAvailable")
    if available is NA:  # kernels before 3.14 lack MemAvailable
        available = _mib(f, "MemFree")
    return HostMemory(_mib(f, "MemTotal"), available, _mib(f, "SwapTotal"), _mib(f, "SwapFree"))


def read_process_memory(pid: int, proc_root: Path | str = "/proc") -> ProcessMemory:
    """A process's RSS and peak RSS (VmHWM) from /proc/PID/status; `alive=False` once it is gone."""
    try:
        text = (Path(proc_root) / str(pid) / "status").read_text()
    except OSError:
        return ProcessMemory(pid, NA, NA, NA, alive=False)
    name: str | NaType = NA
    for line in text.splitlines():
        if line.startswith("Name:"):
            name = line.partition(":")[2].strip() or NA
            break
    f = _kib_fields(text, ("VmRSS", "VmHWM"))
    rss = round(f["VmRSS"] / KIB_PER_MIB, 1) if "VmRSS" in f else NA
    peak = round(f["VmHWM"] / KIB_PER_MIB, 1) if "VmHWM" in f else NA
    # A zombie has a status file but no memory lines.
    return ProcessMemory(pid, name, rss, peak, alive="VmRSS" in f)


def is_host_buffer(name: str) -> bool:
    """CPU, CPU_Mapped, CPU_REPACK, CUDA_Host...: buffers in host RAM (pinned or not)."""
    n = name.strip()
    return n.upper().startswith("CPU") or n.lower().endswith("_host")


def spill_warning(
    buffers_mib: Mapping[str, float],
    *,
    layers_offloaded: tuple[int, int] | None = None,
    expected_host_mib: float | None = None,
    tolerance_mib: float = SPILL_TOLERANCE_MIB,
) -> SpillWarning | None:
    """A warning when weights sit in host memory while other layers are on devices, else None.

    `buffers_mib` are the server's reported model buffers per name ({"CPU_Mapped": 515, "CUDA0":
    17904}). llama.cpp always keeps the token-embedding table on the host, so a host buffer alone
    is not a spill. Evidence, strongest first: fewer layers offloaded than exist; host buffers
    larger than `expected_host_mib` (the embedding table, when the planner knows it); with neither
    known, more weight bytes on the host than on all devices together.
    """
    host = {k: float(v) for k, v in buffers_mib.items() if is_host_buffer(k) and float(v) > 0}
    device_mib = sum(float(v) for k, v in buffers_mib.items() if not is_host_buffer(k) and float(v) > 0)
    host_mib = sum(host.values())
    if device_mib <= 0 or host_mib <= tolerance_mib:
        return None  # CPU-only run, or nothing on the host worth mentioning
    detail = ", ".join(f"{k} {v:.0f} MiB" for k, v in sorted(host.items()))
    where = f"{host_mib:.0f} MiB of model weights are in host memory ({detail}) while {device_mib:.0f} MiB are on GPUs"
    reason: str | None = None
    if layers_offloaded is not None and layers_offloaded[0] < layers_offloaded[1]:
        n, total = layers_offloaded
        reason = f"only {n} of {total} layers are offloaded, so {total - n} run on the CPU"
    elif expected_host_mib is not None:
        if host_mib > expected_host_mib + tolerance_mib:
            reason = f"that is more than the {expected_host_mib:.0f} MiB llama.cpp always keeps on the host"
    elif layers_offloaded is None and host_mib > device_mib:
        reason = "that is more than on the GPUs, so layers were not offloaded"
    if reason is None:
        return None
    message = (
        f"weights spilled to host memory: {where}; {reason}. Decoding will be much slower although "
        "/health is fine: raise -ngl (or lower -c / --cache-type) until every layer fits."
    )
    return SpillWarning(host_mib, device_mib, tuple(sorted(host.items())), message)
