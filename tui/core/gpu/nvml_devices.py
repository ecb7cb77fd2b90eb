"""One NVML device read into a `GpuDevice`: names, memory, load, power and the processes on it.

Each field is its own guarded call (`nvml_calls`), so a function the driver lacks or a NotSupported
answer costs that field only; a device that answers "lost" becomes a `GpuDevice` with an error.
Newer NVML query versions are tried first, older ones after (memory v2 then v1, processes v3, v2,
unversioned).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tui.core.gpu.nvml_calls import NvmlCalls
from tui.core.gpu.nvml_codes import DEVICE_DEAD_CODES, ERROR_NOT_SUPPORTED, MiB, NvmlFailure, decode
from tui.core.gpu.types import NA, GpuDevice, GpuProcess, NaType, ProcessKind


class DeviceReader:
    """Reads devices through `calls`; remembers what never changes (name, UUID, PCI bus id)."""

    def __init__(self, calls: NvmlCalls, proc_root: Path | str = "/proc") -> None:
        self._calls = calls
        self._proc_root = Path(proc_root)
        self._static: dict[int, tuple[Any, Any, Any]] = {}
        self._memory_v2_ok = True

    def read_device(self, index: int, ours: frozenset[int], mismatch: list[str]) -> GpuDevice:
        """Device `index`; appends to `mismatch` when driver and bindings disagree about a query."""
        calls = self._calls
        handle, failure = calls.handle(index)
        if failure is not None:
            return self._dead(index, failure)
        static = self._static.get(index)
        if static is None:
            name, f1 = calls.call("nvmlDeviceGetName", handle)
            if f1 is not None and f1.code in DEVICE_DEAD_CODES:
                return self._dead(index, f1)
            uuid, _ = calls.call("nvmlDeviceGetUUID", handle)
            pci, _ = calls.call("nvmlDeviceGetPciInfo_v3", handle)
            if pci is NA:
                pci, _ = calls.call("nvmlDeviceGetPciInfo", handle)
            bus = decode(getattr(pci, "busId", NA)) if pci is not NA else NA
            static = (name, uuid, bus or NA)
            if name is not NA and uuid is not NA:
                self._static[index] = static

        memory, mem_failure = self._memory(handle)
        if mem_failure is not None and mem_failure.code in DEVICE_DEAD_CODES:
            return self._dead(index, mem_failure)
        if mem_failure is not None and mem_failure.missing:
            mismatch.append("no memory query works (nvmlDeviceGetMemoryInfo v1/v2 missing)")
        total = used = free = NA
        if memory is not NA:
            total = int(memory.total) // MiB
            used = int(memory.used) // MiB
            free = int(memory.free) // MiB

        util, _ = calls.device_call(index, "nvmlDeviceGetUtilizationRates", handle)
        temp, _ = calls.device_call(index, "nvmlDeviceGetTemperature", handle, 0)  # NVML_TEMPERATURE_GPU
        if temp is NA and "nvmlDeviceGetTemperature" in calls.missing:
            temp, _ = calls.device_call(index, "nvmlDeviceGetTemperatureV", handle, 0)
        power, _ = calls.device_call(index, "nvmlDeviceGetPowerUsage", handle)
        limit, _ = calls.device_call(index, "nvmlDeviceGetEnforcedPowerLimit", handle)
        if limit is NA:
            limit, _ = calls.device_call(index, "nvmlDeviceGetPowerManagementLimit", handle)

        reasons, _ = calls.device_call(index, "nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is NA and "nvmlDeviceGetCurrentClocksEventReasons" in calls.missing:  # drivers before 535
            reasons, _ = calls.device_call(index, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)

        processes, proc_status = self._processes(index, handle, ours, mismatch)
        return GpuDevice(
            index=index,
            name=static[0],
            uuid=static[1],
            pci_bus_id=static[2],
            memory_total_mib=total,
            memory_used_mib=used,
            memory_free_mib=free,
            utilization_gpu_percent=int(util.gpu) if util is not NA else NA,
            utilization_memory_percent=int(util.memory) if util is not NA else NA,
            temperature_c=int(temp) if isinstance(temp, int) else NA,
            power_draw_w=round(power / 1000.0, 1) if isinstance(power, int) else NA,
            power_limit_w=round(limit / 1000.0, 1) if isinstance(limit, int) else NA,
            clock_event_reasons=int(reasons) if isinstance(reasons, int) else NA,
            processes=processes,
            processes_status=proc_status,
        )

    def _dead(self, index: int, failure: NvmlFailure) -> GpuDevice:
        self._calls.forget_handle(index)
        static = self._static.get(index, (NA, NA, NA))
        return GpuDevice(
            index=index,
            name=static[0],
            uuid=static[1],
            pci_bus_id=static[2],
            memory_total_mib=NA,
            memory_used_mib=NA,
            memory_free_mib=NA,
            processes_status="not available: device failed",
            error=(
                f"device failed: {failure.text} in {failure.function}. Check `nvidia-smi` and `dmesg`"
                + ("; a lost GPU needs a reset or a reboot" if failure.code in DEVICE_DEAD_CODES else "")
            ),
        )

    def _memory(self, handle: Any) -> tuple[Any, NvmlFailure | None]:
        """Memory v2 (what nvidia-smi shows: "used" excludes driver-reserved memory), else v1."""
        version = getattr(self._calls.module, "nvmlMemory_v2", None)
        if self._memory_v2_ok and isinstance(version, int):
            memory, failure = self._calls.call("nvmlDeviceGetMemoryInfo", handle, version=version)
            if failure is None or not failure.missing:
                return memory, failure
            self._memory_v2_ok = False
        return self._calls.call("nvmlDeviceGetMemoryInfo", handle)

    def _process_list(self, family: str, handle: Any) -> tuple[list[Any] | NaType, NvmlFailure | None]:
        """`<family>_v3`, then `_v2`, then the unversioned call; NA when none works."""
        last: NvmlFailure | None = None
        for suffix in ("_v3", "_v2", ""):
            value, failure = self._calls.call(family + suffix, handle)
            if failure is None:
                return list(value or ()), None
            last = failure
            if not failure.missing:
                return NA, failure
        return NA, last

    def _processes(
        self, index: int, handle: Any, ours: frozenset[int], mismatch: list[str]
    ) -> tuple[tuple[GpuProcess, ...], str]:
        merged: dict[int, tuple[set[str], int | NaType]] = {}
        notes: list[str] = []
        for family, kind in (
            ("nvmlDeviceGetComputeRunningProcesses", "compute"),
            ("nvmlDeviceGetGraphicsRunningProcesses", "graphics"),
        ):
            if (index, family) in self._calls.unsupported:
                notes.append(f"{kind}: not supported")
                continue
            infos, failure = self._process_list(family, handle)
            if infos is NA:
                assert failure is not None
                if failure.missing:
                    notes.append(f"{kind}: driver and bindings disagree")
                    mismatch.append(f"no {kind} process query works ({family}_v3/_v2/unversioned missing)")
                elif failure.code == ERROR_NOT_SUPPORTED:
                    self._calls.unsupported.add((index, family))
                    notes.append(f"{kind}: not supported")
                else:
                    notes.append(f"{kind}: {failure.text}")
                continue
            for info in infos:
                pid = getattr(info, "pid", None)
                if not isinstance(pid, int):
                    continue
                used_bytes = getattr(info, "usedGpuMemory", None)
                used: int | NaType = int(used_bytes) // MiB if isinstance(used_bytes, int) else NA
                kinds, prev = merged.get(pid, (set(), NA))
                kinds.add(kind)
                if prev is not NA and (used is NA or prev > used):  # type: ignore[operator]
                    used = prev
                merged[pid] = (kinds, used)
        processes = []
        for pid, (kinds, used) in sorted(merged.items()):
            kind = ProcessKind.BOTH if len(kinds) == 2 else ProcessKind(next(iter(kinds)))
            processes.append(GpuProcess(pid, self._process_name(pid), used, kind, pid in ours))
        status = "ok" if not notes else "not available: " + "; ".join(notes)
        return tuple(processes), status

    def _process_name(self, pid: int) -> str | NaType:
        """NVML's name for the pid, else /proc/PID/comm, else NA (the process may already be gone).

        Not cached: a pid can be reused between two passes, and the lookup is cheap.
        """
        name: str | NaType = NA
        value, _ = self._calls.call("nvmlSystemGetProcessName", pid)
        if isinstance(value, str) and value.strip():
            name = os.path.basename(value.strip()) or value.strip()
        else:
            try:
                name = (self._proc_root / str(pid) / "comm").read_text().strip() or NA
            except OSError:
                name = NA
        return name
