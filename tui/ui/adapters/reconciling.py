"""Predicted (the core plan) vs reported (the server's memory report) rows, via `tui.core.planning.reconcile`.

A CPU-only report (everything on `Host`, as in the demo's CPU server) is held against a CPU plan of
the same settings; a GPU report against the plan for the devices on screen.
"""

from __future__ import annotations

from typing import Any

from tui.core.gpu.types import GpuSnapshot
from tui.core.options.settings import Settings
from tui.ui.options import AppOptions
from tui.ui.view import ReconcileRow

#: Components worth a line on screen (tiny buffers and zero rows are left out).
MIN_MIB = 0.5


class _Reported:
    """The parts of a MemoryReport `reconcile()` reads, from the supervisor's consistent snapshot."""

    def __init__(self, devices: dict[str, dict[str, float]]) -> None:
        self._devices = devices

    def per_device(self) -> dict[str, dict[str, float]]:
        return self._devices


def rows(settings: Settings | None, memory: dict[str, Any] | None, snapshot: GpuSnapshot | None,
         options: AppOptions) -> tuple[ReconcileRow, ...]:
    """Never raises: no rows when there is nothing (or nothing reliable) to compare."""
    from tui.core.planning.reconcile import reconcile
    from tui.ui.adapters.planning import core_plan

    devices = (memory or {}).get("devices") or {}
    if settings is None or not devices:
        return ()
    cpu_only = set(devices) == {"Host"}
    try:
        plan = core_plan(settings, snapshot, options, cpu_only=cpu_only)
        rec = reconcile(plan, _Reported(devices))
    except Exception:  # noqa: BLE001 - a failed comparison only hides the line
        return ()
    return tuple(
        ReconcileRow(d.device, d.component, d.predicted_mib, d.reported_mib)
        for d in rec.diffs
        if max(d.predicted_mib, d.reported_mib) >= MIN_MIB
    )
