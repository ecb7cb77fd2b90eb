"""Immutable value types for GPU and host telemetry.

Every number carries its unit in its name (`_mib`, `_percent`, `_c`, `_w`). A value NVML could not
give is the `NA` sentinel, never an exception and never a guessed zero: a UI shows "N/A", JSON
shows null. Snapshots are frozen dataclasses holding only tuples and scalars, so they are hashable
and can be handed to any thread without copying.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeVar


class NaType:
    """The "not available" sentinel (falsy, prints as N/A, a singleton even through pickle/copy)."""

    _instance: NaType | None = None
    __slots__ = ()

    def __new__(cls) -> NaType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NA"

    def __str__(self) -> str:
        return "N/A"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> tuple[type[NaType], tuple[()]]:
        return (NaType, ())


NA: Final[NaType] = NaType()

T = TypeVar("T")


def is_na(value: object) -> bool:
    return value is NA


def or_none(value: T | NaType) -> T | None:
    """NA -> None, for JSON and for callers that prefer Optional."""
    return None if value is NA else value  # type: ignore[return-value]


class Source(StrEnum):
    """Where a snapshot's device list came from."""

    NVML = "nvml"
    SIMULATED = "simulated"
    NONE = "none"


class Status(StrEnum):
    """The telemetry state shown to the user; each has one clear message."""

    OK = "ok"
    SIMULATED = "simulated"
    #: libnvidia-ml.so.1 (or the nvidia-ml-py package) is missing: no NVIDIA driver here.
    LIBRARY_NOT_FOUND = "library_not_found"
    #: the library is there but the kernel driver is not loaded.
    DRIVER_NOT_LOADED = "driver_not_loaded"
    NO_PERMISSION = "no_permission"
    NO_DEVICES = "no_devices"
    #: the NVML library, the kernel driver and nvidia-ml-py do not agree on the API.
    VERSION_MISMATCH = "version_mismatch"
    ERROR = "error"
    NOT_SAMPLED = "not_sampled"

    @property
    def available(self) -> bool:
        """Whether devices can be listed at all in this state."""
        return self in (Status.OK, Status.SIMULATED, Status.NO_DEVICES, Status.VERSION_MISMATCH)


class ProcessKind(StrEnum):
    COMPUTE = "compute"
    GRAPHICS = "graphics"
    BOTH = "compute+graphics"
    SIMULATED = "simulated"


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process holding memory on one device."""

    pid: int | NaType
    name: str | NaType
    used_memory_mib: int | NaType
    kind: ProcessKind
    #: the llama-server mtp-tune launched (its pid is in the "ours" set).
    is_ours: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": or_none(self.pid),
            "name": or_none(self.name),
            "used_memory_mib": or_none(self.used_memory_mib),
            "type": self.kind.value,
            "ours": self.is_ours,
        }


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One device at one instant. `index` is NVML's index (PCI bus order), not CUDA's."""

    index: int
    name: str | NaType
    uuid: str | NaType
    pci_bus_id: str | NaType
    memory_total_mib: int | NaType
    memory_used_mib: int | NaType
    memory_free_mib: int | NaType
    utilization_gpu_percent: int | NaType = NA
    utilization_memory_percent: int | NaType = NA
    temperature_c: int | NaType = NA
    power_draw_w: float | NaType = NA
    power_limit_w: float | NaType = NA
    #: NVML's clocks event (throttle) reasons bitmask, `nvml_codes.CLOCK_EVENT_*`.
    clock_event_reasons: int | NaType = NA
    processes: tuple[GpuProcess, ...] = ()
    #: "ok", or why `processes` is incomplete (not supported, driver/bindings disagree...).
    processes_status: str = "ok"
    #: set when the device itself failed (GPU is lost, unknown error); other fields are then NA.
    error: str | None = None
    simulated: bool = False

    @property
    def label(self) -> str:
        return f"GPU {self.index}: {self.name}"

    @property
    def used_fraction(self) -> float | NaType:
        if self.memory_used_mib is NA or self.memory_total_mib is NA or not self.memory_total_mib:
            return NA
        return self.memory_used_mib / self.memory_total_mib  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": or_none(self.name),
            "uuid": or_none(self.uuid),
            "pci_bus_id": or_none(self.pci_bus_id),
            "simulated": self.simulated,
            "memory_total_mib": or_none(self.memory_total_mib),
            "memory_used_mib": or_none(self.memory_used_mib),
            "memory_free_mib": or_none(self.memory_free_mib),
            "utilization_gpu_percent": or_none(self.utilization_gpu_percent),
            "utilization_memory_percent": or_none(self.utilization_memory_percent),
            "temperature_c": or_none(self.temperature_c),
            "power_draw_w": or_none(self.power_draw_w),
            "power_limit_w": or_none(self.power_limit_w),
            "clock_event_reasons": or_none(self.clock_event_reasons),
            "error": self.error,
            "processes_status": self.processes_status,
            "processes": [p.to_dict() for p in self.processes],
        }


@dataclass(frozen=True, slots=True)
class GpuReading:
    """What one device source (NVML or simulation) returned for one pass."""

    source: Source
    status: Status
    message: str
    devices: tuple[GpuDevice, ...] = ()
    warnings: tuple[str, ...] = ()
    driver_version: str | NaType = NA
    cuda_driver_version: str | NaType = NA
    nvml_version: str | NaType = NA
    bindings_version: str | NaType = NA


@dataclass(frozen=True, slots=True)
class HostMemory:
    """Host RAM from /proc/meminfo."""

    ram_total_mib: int | NaType
    ram_available_mib: int | NaType
    swap_total_mib: int | NaType = NA
    swap_free_mib: int | NaType = NA

    def to_dict(self) -> dict[str, Any]:
        return {
            "ram_total_mib": or_none(self.ram_total_mib),
            "ram_available_mib": or_none(self.ram_available_mib),
            "swap_total_mib": or_none(self.swap_total_mib),
            "swap_free_mib": or_none(self.swap_free_mib),
        }


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """One host process's resident memory, from /proc/PID/status."""

    pid: int
    name: str | NaType
    rss_mib: float | NaType
    peak_rss_mib: float | NaType = NA
    alive: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "name": or_none(self.name),
            "rss_mib": or_none(self.rss_mib),
            "peak_rss_mib": or_none(self.peak_rss_mib),
            "alive": self.alive,
        }


def _buffers_tuple(buffers: Mapping[str, float] | tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    items = buffers.items() if isinstance(buffers, Mapping) else buffers
    return tuple(sorted((str(k), float(v)) for k, v in items))


@dataclass(frozen=True, slots=True)
class ServerView:
    """What the sampler needs to know about the server mtp-tune runs (all optional).

    `model_buffers_mib` are the `load_tensors: <name> model buffer size` lines of its log, e.g.
    {"CPU_Mapped": 515.0, "CUDA0": 17904.0}; `layers_offloaded` is (n, total) from
    "offloaded n/total layers to GPU"; `expected_host_mib` is what llama.cpp always keeps on the
    host (the token-embedding table), when the planner knows it.
    """

    pid: int | None = None
    extra_pids: frozenset[int] = frozenset()
    model_buffers_mib: tuple[tuple[str, float], ...] = ()
    layers_offloaded: tuple[int, int] | None = None
    expected_host_mib: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_buffers_mib", _buffers_tuple(self.model_buffers_mib))
        object.__setattr__(self, "extra_pids", frozenset(self.extra_pids))

    @property
    def ours(self) -> frozenset[int]:
        return self.extra_pids | ({self.pid} if self.pid is not None else set())


@dataclass(frozen=True, slots=True)
class SpillWarning:
    """Model weights sit in host memory while other layers are on GPUs: decode will be slow."""

    host_mib: float
    device_mib: float
    host_buffers: tuple[tuple[str, float], ...]
    message: str


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """Everything one sampling pass saw. Immutable: share it freely between threads."""

    seq: int
    taken_at: float  # time.time()
    monotonic_s: float  # time.monotonic(), for intervals
    sample_ms: float  # what the pass cost
    source: Source
    status: Status
    message: str
    devices: tuple[GpuDevice, ...]
    host: HostMemory
    server: ProcessMemory | None = None
    warnings: tuple[str, ...] = ()
    driver_version: str | NaType = NA
    cuda_driver_version: str | NaType = NA
    nvml_version: str | NaType = NA
    bindings_version: str | NaType = NA
    spill: SpillWarning | None = field(default=None)

    @property
    def simulated(self) -> bool:
        return self.source is Source.SIMULATED

    def to_dict(self) -> dict[str, Any]:
        """The `mtp-tune gpus --json` schema."""
        return {
            "source": self.source.value,
            "status": self.status.value,
            "message": self.message,
            "simulated": self.simulated,
            "driver_version": or_none(self.driver_version),
            "cuda_driver_version": or_none(self.cuda_driver_version),
            "nvml_version": or_none(self.nvml_version),
            "bindings_version": or_none(self.bindings_version),
            "devices": [d.to_dict() for d in self.devices],
            "host": self.host.to_dict(),
            "server": self.server.to_dict() if self.server else None,
            "warnings": list(self.warnings),
            "taken_at": self.taken_at,
            "seq": self.seq,
            "sample_ms": round(self.sample_ms, 3),
        }
