"""After a launch: the estimate, llama.cpp's exact dry run, the server's report and NVML, side by side.

Via `tui.core.planning.reconcile`. A CPU-only report (everything on `Host`, as in the demo's CPU
server) is held against a CPU plan of the same settings (estimate and exact); a GPU report against
the plans for the devices on screen. NVML sees one number per GPU (what our server's process holds
there), so it stands beside each device's total, and only for real GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tui.core.gpu.types import NA, GpuSnapshot
from tui.core.options.settings import Settings
from tui.core.planning.devices import local_order
from tui.ui.options import AppOptions
from tui.ui.cockpit.views import ReconcileRow
from tui.ui.cockpit.planning import core_plan, exact_request, exact_unavailable_reason

#: Components worth a line on screen (tiny buffers and zero rows are left out).
MIN_MIB = 0.5


class _Reported:
    """The parts of a MemoryReport `reconcile()` reads, from the supervisor's consistent snapshot."""

    def __init__(self, devices: dict[str, dict[str, float]]) -> None:
        self._devices = devices

    def per_device(self) -> dict[str, dict[str, float]]:
        return self._devices


def _devices(memory: dict[str, Any] | None) -> dict[str, dict[str, float]]:
    return (memory or {}).get("devices") or {}


def cpu_only(memory: dict[str, Any] | None) -> bool:
    return set(_devices(memory)) == {"Host"}


def rows(settings: Settings | None, memory: dict[str, Any] | None, snapshot: GpuSnapshot | None,
         options: AppOptions, exact: Any = None) -> tuple[ReconcileRow, ...]:
    """Never raises: no rows when there is nothing (or nothing reliable) to compare. `exact` is the
    exact-mode core Plan for the same settings and devices (its figures fill `exact_mib`)."""
    # lazy: the reconciliation loads after a launch, not before the first frame
    from tui.core.planning.reconcile import reconcile
    devices = _devices(memory)
    if settings is None or not devices:
        return ()
    try:
        plan = core_plan(settings, snapshot, options, cpu_only=cpu_only(memory))
        rec = reconcile(plan, _Reported(devices), exact=exact)
    except Exception:  # noqa: BLE001 - a failed comparison only hides the line
        return ()
    return tuple(
        ReconcileRow(d.device, d.component, d.predicted_mib, d.reported_mib, d.exact_mib)
        for d in rec.diffs
        if max(d.predicted_mib, d.reported_mib, d.exact_mib or 0.0) >= MIN_MIB
    )


def exact_for_report(settings: Settings, memory: dict[str, Any] | None, snapshot: GpuSnapshot | None,
                     options: AppOptions, plan_fn: Callable[..., Any] | None = None,
                     last: Any = None) -> tuple[Any, str]:
    """(the exact core Plan for what was launched, "") or (None, one sentence why not). `last`: the
    ExactResult the screen showed for these settings before the launch (used for a GPU report).
    Otherwise blocks for a dry run (cached when one was made): call it from a worker."""
    why = exact_unavailable_reason(settings, options)
    if why is not None:
        return None, why
    if not cpu_only(memory):
        if last is not None and last.available:
            return last.plan, ""
        if not options.simulate:
            return None, ("llama.cpp's exact figures were not measured for these settings before the launch, and a "
                          "dry run beside the running server would measure around the memory it holds.")
    if plan_fn is None:
        # lazy: the exact planner (llama.cpp's dry run, httpx) loads on its worker
        from tui.core.planning.exact import exact_plan as plan_fn
    args, kwargs = exact_request(settings, snapshot, options, cpu_only=cpu_only(memory))
    try:
        res = plan_fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the comparison simply lacks its exact column
        return None, f"exact mode failed: {exc}"
    return (res.plan, "") if res.available else (None, res.reason or "llama.cpp's dry run gave no figures.")


def nvml_by_device(snapshot: GpuSnapshot | None) -> dict[str, float] | None:
    """What NVML sees our server hold on each real GPU, keyed as the plan is (CUDA0..); None when
    there is no real GPU reading (CPU only, or simulated devices)."""
    if snapshot is None or snapshot.simulated or not snapshot.devices:
        return None
    out: dict[str, float] = {}
    local = [d for d in snapshot.devices if d.memory_total_mib is not NA and not d.simulated]
    for i, d in enumerate(local_order(local)):
        ours = [p.used_memory_mib for p in d.processes if p.is_ours and p.used_memory_mib not in (NA, None)]
        if ours:
            out[f"CUDA{i}"] = float(sum(ours))  # type: ignore[arg-type]
    return out or None
