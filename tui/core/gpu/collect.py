"""One sampling pass: devices from a source, host RAM, the server's RSS, and the warnings.

Used by the background sampler and by `mtp-tune gpus` alike, so the CLI smoke test exercises the
same code the TUI shows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from tui.core.gpu.host import read_host_memory, read_process_memory, spill_warning
from tui.core.gpu.types import NA, GpuDevice, GpuReading, GpuSnapshot, HostMemory, ProcessKind, ServerView, Source


class TelemetrySource(Protocol):
    """Anything that can list devices once (NVML, simulation, a test double)."""

    def read(self, ours: Iterable[int] = ()) -> GpuReading: ...


def other_process_warnings(devices: Iterable[GpuDevice]) -> list[str]:
    """The automatic "check nvidia-smi for leftover processes": memory held by processes not ours."""
    out: list[str] = []
    for dev in devices:
        others = [p for p in dev.processes if not p.is_ours]
        if not others:
            continue
        known = sum(p.used_memory_mib for p in others if isinstance(p.used_memory_mib, int))
        listed = ", ".join(
            f"pid {p.pid} {p.name} {p.used_memory_mib if p.used_memory_mib is not NA else 'N/A'} MiB" for p in others[:4]
        )
        more = f" and {len(others) - 4} more" if len(others) > 4 else ""
        advice = (
            " Stop leftover servers before launching."
            if any(p.kind is not ProcessKind.GRAPHICS for p in others)
            else " (a desktop session; a headless login frees it)"
        )
        out.append(
            f"GPU {dev.index} ({dev.name}): {len(others)} other process(es) hold {known} MiB ({listed}{more}); "
            f"llama-server gets that much less.{advice}"
        )
    return out


def clock_warnings(devices: Iterable[GpuDevice]) -> list[str]:
    """Devices whose clocks NVML says are held down by temperature or a power brake right now."""
    from tui.core.gpu.nvml_codes import clock_slowdowns

    out = []
    for dev in devices:
        why = clock_slowdowns(dev.clock_event_reasons) if isinstance(dev.clock_event_reasons, int) else []
        if why:
            temp = f" at {dev.temperature_c} C" if isinstance(dev.temperature_c, int) else ""
            out.append(f"GPU {dev.index} ({dev.name}) is throttled{temp}: {', '.join(why)}; speeds measured now are "
                       "lower than the configuration's own. Let it cool, or check its airflow and power.")
    return out


def collect_snapshot(
    source: TelemetrySource,
    *,
    seq: int = 0,
    server: ServerView | None = None,
    proc_root: Path | str = "/proc",
    read_host: bool = True,
) -> GpuSnapshot:
    """Run one pass and freeze it. Never raises (sources and /proc readers never do)."""
    started = time.perf_counter()
    ours = server.ours if server else frozenset()
    reading = source.read(ours)
    host = read_host_memory(proc_root) if read_host else HostMemory(NA, NA)
    server_mem = read_process_memory(server.pid, proc_root) if server and server.pid is not None else None
    warnings = list(reading.warnings)
    if reading.source is Source.NVML:
        warnings.extend(other_process_warnings(reading.devices))
    spill = None
    if server and server.model_buffers_mib:
        spill = spill_warning(
            dict(server.model_buffers_mib),
            layers_offloaded=server.layers_offloaded,
            expected_host_mib=server.expected_host_mib,
        )
        if spill:
            warnings.append(spill.message)
    return GpuSnapshot(
        seq=seq,
        taken_at=time.time(),
        monotonic_s=time.monotonic(),
        sample_ms=(time.perf_counter() - started) * 1000.0,
        source=reading.source,
        status=reading.status,
        message=reading.message,
        devices=reading.devices,
        host=host,
        server=server_mem,
        warnings=tuple(dict.fromkeys(warnings)),
        driver_version=reading.driver_version,
        cuda_driver_version=reading.cuda_driver_version,
        nvml_version=reading.nvml_version,
        bindings_version=reading.bindings_version,
        spill=spill,
    )
