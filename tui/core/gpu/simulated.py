"""Simulated devices from `tui.core.gpu.profiles`, for planning on a machine without the GPU.

A simulated device's "used" memory is the profile's baseline (a desktop session, the CUDA context)
plus what the server really allocated on it according to its own log, or what the plan says before
launch. Nothing here is measured, so every device name, process and message says "simulated".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from tui.core.gpu.types import NA, GpuDevice, GpuProcess, GpuReading, ProcessKind, Source, Status
from tui.core.gpu.profiles import PROFILES, HwProfile, parse_gpus_spec

#: Per-device allocation in MiB, keyed by device index or llama.cpp device name ("CUDA0", "RPC1").
Allocation = Mapping[int | str, float]
AllocationInput = Allocation | Callable[[], Allocation | None] | None

SIMULATED_SUFFIX: Final = " (simulated)"

#: llama.cpp backend device names that denote an accelerator with an index.
_DEVICE_NAME = re.compile(r"^(?:CUDA|ROCm|Vulkan|SYCL|MUSA|CANN|RPC|Metal)(\d+)$")


def device_index(key: int | str) -> int | None:
    """0 for 0, "0", "CUDA0" or "RPC0"; None for host buffers ("CPU", "CPU_Mapped", "CUDA_Host")."""
    if isinstance(key, int):
        return key if key >= 0 else None
    text = str(key).strip()
    if text.isdigit():
        return int(text)
    m = _DEVICE_NAME.match(text)
    return int(m.group(1)) if m else None


def resolve_profile(profile: HwProfile | str) -> HwProfile | None:
    """A profile object, a profile key, or a `--gpus` spec ("2x16GiB"); None for "cpu".

    Raises ValueError naming the bad spec (from `parse_gpus_spec`).
    """
    if isinstance(profile, HwProfile):
        return profile
    return PROFILES.get(profile) or parse_gpus_spec(profile)


#: What a user must know before trusting a launch on simulated GPUs (the cockpit says it, and the
#: launch confirmation offers the capped stand-ins for a real out-of-memory).
SIMULATED_LAUNCHES = ("nothing is measured, and launches run on this machine, so they cannot run out of the "
                      "simulated memory.")


class SimulatedGpus:
    """A `TelemetrySource` for a named profile. `allocated_mib` is a mapping or a callable giving one."""

    def __init__(self, profile: HwProfile | str | None, allocated_mib: AllocationInput = None) -> None:
        self._profile = resolve_profile(profile) if profile is not None else None
        self._allocated = allocated_mib

    @property
    def profile(self) -> HwProfile | None:
        return self._profile

    def _allocation(self, warnings: list[str]) -> dict[int, float]:
        raw: Allocation | None
        try:
            raw = self._allocated() if callable(self._allocated) else self._allocated
        except Exception as exc:  # noqa: BLE001 - a broken provider must not break the sampler
            warnings.append(f"simulated allocation unavailable: {type(exc).__name__}: {exc}")
            raw = None
        out: dict[int, float] = {}
        n = len(self._profile.devices) if self._profile else 0
        for key, mib in (raw or {}).items():
            index = device_index(key)
            if index is None:
                continue  # host-side buffer: not on any device
            if index >= n:
                warnings.append(
                    f"simulated allocation names device {key} but the profile has {n} device(s); ignored"
                )
                continue
            out[index] = out.get(index, 0.0) + max(0.0, float(mib))
        return out

    def read(self, ours: Iterable[int] = ()) -> GpuReading:
        """One simulated pass: baseline + allocation per device. Never raises."""
        warnings: list[str] = []
        profile = self._profile
        if profile is None:
            return GpuReading(
                Source.SIMULATED, Status.SIMULATED, "Simulated hardware: CPU only, no GPUs (simulated).",
            )
        allocation = self._allocation(warnings)
        our_pids = sorted(ours)
        devices = []
        for index, sim in enumerate(profile.devices):
            alloc = allocation.get(index, 0.0)
            used = sim.baseline_mib + int(round(alloc))
            processes: list[GpuProcess] = []
            if sim.baseline_mib:
                processes.append(
                    GpuProcess(NA, "desktop/driver baseline (simulated)", sim.baseline_mib, ProcessKind.SIMULATED)
                )
            if alloc > 0:
                processes.append(
                    GpuProcess(
                        our_pids[0] if our_pids else NA,
                        "llama-server (simulated allocation)",
                        int(round(alloc)),
                        ProcessKind.SIMULATED,
                        is_ours=True,
                    )
                )
            if used > sim.total_mib:
                warnings.append(
                    f"simulated GPU {index} ({sim.name}): {used} MiB needed but only {sim.total_mib} MiB "
                    "exist; the real card would fail to load (out of memory)"
                )
            devices.append(
                GpuDevice(
                    index=index,
                    name=sim.name + SIMULATED_SUFFIX,
                    uuid=f"SIM-{profile.key}-{index}",
                    pci_bus_id=NA,
                    memory_total_mib=sim.total_mib,
                    memory_used_mib=used,
                    memory_free_mib=max(0, sim.total_mib - used),
                    processes=tuple(processes),
                    processes_status="simulated",
                    simulated=True,
                )
            )
        return GpuReading(
            Source.SIMULATED,
            Status.SIMULATED,
            f"Simulated hardware: profile {profile.key} ({profile.description}); {SIMULATED_LAUNCHES}",
            tuple(devices),
            tuple(warnings),
        )
