"""The memory planner as a sweep's pre-launch check: a predicted OOM is skipped unless try-anyway.

Devices are what the probe session plans against (`probes.session.predict_memory`): a simulated
profile when given, else the GPUs NVML sees now, else the CPU alone. Configurations with `--rpc`
devices are not planned (their memory is only known once connected) and simply launch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tui.core.options.settings import Settings


def _verdict_from_plan(plan: Any) -> tuple[str, str]:
    """(risk, one sentence naming the worst device and its numbers)."""
    risk = plan.worst_risk
    worst = [d for d in plan.devices if d.risk == risk]
    parts = []
    for d in worst[:3]:
        free = "unknown" if d.free_mib is None else f"{d.free_mib:.0f}"
        parts.append(f"{d.key} needs {d.needed_mib:.0f} MiB of {free} MiB free (margin {d.margin_mib:.0f})")
    return risk, "; ".join(parts)


def plan_check(simulate: str | None = None) -> Callable[[Settings], Any]:
    """A PlanCheck for `Sweep(planner=...)`: Settings -> PlanVerdict | None."""
    from tui.core.sweep.runner import PlanVerdict

    meta_cache: dict[str, Any] = {}

    def check(settings: Settings) -> PlanVerdict | None:
        if not settings.model or settings.rpc:
            return None
        try:
            from tui.core.planning.gguf_reader import read_gguf

            meta = meta_cache.get(settings.model)
            if meta is None:
                meta = meta_cache[settings.model] = read_gguf(settings.model)
        except Exception:  # an unreadable file fails at launch with the server's own explanation
            return None
        if settings.mtp_enabled and getattr(meta.hparams, "n_nextn", 1) == 0:
            return PlanVerdict("invalid", f"--spec-type draft-mtp: {settings.model} has no MTP (NextN) layers, so "
                                          "llama-server would refuse to start ('failed to create MTP context').")
        from tui.core.probes.session import predict_memory

        plan, info = predict_memory(settings, simulate)
        if plan is None:
            err = (info or {}).get("error")
            return PlanVerdict("unknown", err) if err else None
        risk, message = _verdict_from_plan(plan)
        return PlanVerdict(risk, message, {"prediction": plan.to_dict()})

    return check
