"""GPU and host telemetry: NVML devices and processes, simulated hardware, host RAM, a sampler.

Layering: `types` (immutable values) <- `nvml` / `simulated` / `host` (sources) <- `collect`
(one pass) <- `sampler` (the background thread). `nvml` is built on `nvml_codes` (what NVML's
answers mean), `nvml_calls` (init, shutdown, calls that never raise) and `nvml_devices` (one device). The UI reads `GpuSampler.latest` or subscribes.
`order` maps llama.cpp's CUDA0.. names to NVML devices (docs/gpu-order.md).
`profiles` names the simulated GPUs (`--gpus` specs, demo hardware).
"""

from __future__ import annotations

from tui.core.gpu.collect import TelemetrySource, collect_snapshot
from tui.core.gpu.host import read_host_memory, read_process_memory, spill_warning
from tui.core.gpu.nvml import Nvml
from tui.core.gpu.order import cuda_order, llama_names, match_llama_devices, pci_key
from tui.core.gpu.sampler import DEFAULT_INTERVAL_S, GpuSampler
from tui.core.gpu.simulated import SimulatedGpus, device_index, resolve_profile
from tui.core.gpu.types import (
    NA,
    GpuDevice,
    GpuProcess,
    GpuReading,
    GpuSnapshot,
    HostMemory,
    NaType,
    ProcessKind,
    ProcessMemory,
    ServerView,
    Source,
    SpillWarning,
    Status,
    is_na,
    or_none,
)

__all__ = [
    "DEFAULT_INTERVAL_S",
    "NA",
    "GpuDevice",
    "GpuProcess",
    "GpuReading",
    "GpuSampler",
    "GpuSnapshot",
    "HostMemory",
    "NaType",
    "Nvml",
    "ProcessKind",
    "ProcessMemory",
    "ServerView",
    "SimulatedGpus",
    "Source",
    "SpillWarning",
    "Status",
    "TelemetrySource",
    "collect_snapshot",
    "cuda_order",
    "device_index",
    "is_na",
    "llama_names",
    "match_llama_devices",
    "or_none",
    "pci_key",
    "read_host_memory",
    "read_process_memory",
    "resolve_profile",
    "spill_warning",
]
