"""The fake machine behind the fake `pynvml`: GPUs, their processes, and what old drivers lack.

Plain data that tests build and mutate between calls (a process appearing, a device failing);
`fake_pynvml.FakeNvml` answers NVML calls from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MiB = 1024 * 1024

#: The C symbols an R470 driver lacks but nvidia-ml-py 13's default wrappers use.
OLD_DRIVER_MISSING = frozenset({
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetCurrentClocksEventReasons",  # 535 and later
})
#: ...and a driver so old that no versioned process query exists.
ANCIENT_DRIVER_MISSING = OLD_DRIVER_MISSING | {
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
}


@dataclass
class FakeProcess:
    pid: int
    used_mib: int | None  # None: NVML reports N/A (WDDM, some containers)
    name: str | None = None  # what nvmlSystemGetProcessName returns; None -> NVMLError_NotFound


@dataclass
class FakeGpu:
    name: str = "NVIDIA GeForce RTX 3090"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:01:00.0"
    total_mib: int = 24576
    used_mib: int = 300
    reserved_mib: int = 250  # v2 memory: "used" excludes this; v1 "used" includes it
    util_gpu: int = 0
    util_mem: int = 0
    temp_c: int = 40
    clock_event_reasons: int = 0x1  # nvmlClocksEventReasonGpuIdle
    power_mw: int = 25000
    limit_mw: int = 350000
    compute: list[FakeProcess] = field(default_factory=list)
    graphics: list[FakeProcess] = field(default_factory=list)
    #: every call on this device's handle raises this NVML code (15: GPU is lost, 999: unknown).
    fail_code: int | None = None
    #: nvmlDeviceGetHandleByIndex itself raises this code.
    handle_code: int | None = None
    #: functions answering NVML_ERROR_NOT_SUPPORTED on this device.
    unsupported: set[str] = field(default_factory=set)


class Handle:
    """An opaque device handle (the real one is a ctypes pointer)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<c_nvmlDevice_t fake {self.index}>"


class Struct:
    """Attribute bag standing in for ctypes structs and pynvml's nvmlFriendlyObject."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__dict__})"


def gpu(index: int = 0, **kwargs: Any) -> FakeGpu:
    """A FakeGpu with a distinct UUID and bus id per index."""
    defaults: dict[str, Any] = {
        "uuid": f"GPU-{index:08x}-aaaa-bbbb-cccc-{index:012x}",
        "bus_id": f"00000000:{0x17 + 0x10 * index:02X}:00.0",
    }
    defaults.update(kwargs)
    return FakeGpu(**defaults)
