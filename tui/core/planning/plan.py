"""The planner's entry point: per-device memory and OOM risk for a llama-server configuration.

Mirrors llama.cpp b11434's own accounting (see the package docstring for the parts). Pure and fast:
a re-plan after one knob change takes well under a millisecond for a 41-layer model.
"""

from __future__ import annotations

from tui.core.planning.accounting import plan_once
from tui.core.planning.devices import DeviceSpec
from tui.core.planning.fit import apply_fit as fit_plan
from tui.core.planning.gguf_meta import GGUFMeta
from tui.core.planning.resolve import resolve
from tui.core.planning.result import FitOutcome, Plan
from tui.core.options.settings import Settings


def plan(
    meta: GGUFMeta,
    settings: Settings,
    devices: list[DeviceSpec] | None = None,
    host_total_mib: float | None = None,
    host_free_mib: float | None = None,
    apply_fit: bool = True,
) -> Plan:
    """Plan memory per device. `devices` are the offload targets (empty: CPU only, as llama.cpp's CPU
    backend allocates; build them with `devices.device_set`); the host comes last. With `--fit`
    on (the default) and ctx/ngl left unset, the expected fit result is applied first (see `Plan.fit`)."""
    devices = list(devices or [])
    base = resolve(settings, meta.hparams)
    p = plan_once(meta, settings, base, devices, host_total_mib, host_free_mib)
    if not apply_fit:
        p.fit = FitOutcome(base.fit, "off" if not base.fit else "none", "planned as given (fit not applied)")
    elif not base.fit:
        p.fit = FitOutcome(False, "off", "--fit off: llama-server loads exactly what is given.")
    else:
        p = fit_plan(meta, settings, base, devices, host_total_mib, host_free_mib, p)
    if p.context_note:  # after fit: its context is the one llama-server caps
        p.warnings.append(p.context_note + ".")
    return p

