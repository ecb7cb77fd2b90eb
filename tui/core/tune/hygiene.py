"""The machine's hygiene between a tune's trials, from NVML: what would make the next trial's numbers lie.

Before every launch no server of the tune runs, so any process holding GPU memory is someone else's
(another server, a notebook, a desktop session), and clocks held down by heat or a power brake slow
the next measurement for a reason outside its configuration. Each finding is one sentence, kept with
the trial (`Trial.warnings`) and listed in the report. Simulated GPUs have nothing to check.
"""

from __future__ import annotations

from typing import Any


class GpuHygiene:
    """The tuner's hygiene check on the GPUs NVML sees: other processes holding memory, and clocks held
    down by temperature or a power brake (`gpu.collect`). Called with no server of the tune running,
    so every process on a GPU is someone else's. `close` ends its NVML session."""

    def __init__(self, source: Any = None) -> None:
        from tui.core.gpu import Nvml

        self._own = source is None
        self.source = source if source is not None else Nvml(register_atexit=False)

    def __call__(self) -> list[str]:
        from tui.core.gpu.collect import clock_warnings, collect_snapshot, other_process_warnings

        snap = collect_snapshot(self.source, read_host=False)
        return other_process_warnings(snap.devices) + clock_warnings(snap.devices)

    def close(self) -> None:
        if self._own:
            self.source.shutdown()


def gpu_hygiene(devices: Any, gpus: str | None, source: Any = None) -> GpuHygiene | None:
    """A `GpuHygiene` for the GPUs NVML sees; None with simulated GPUs or none seen."""
    if gpus is not None or not any(not d.remote for d in getattr(devices, "devices", ())):
        return None
    return GpuHygiene(source)
