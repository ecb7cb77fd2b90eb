"""The memory planner as a sweep's pre-launch check: a predicted OOM is skipped unless try-anyway.

Devices are what the probe session plans against (`probes.session.predict_memory`, over the one
device list `planning.devices.planner_devices`): a simulated profile when given, else the GPUs NVML
sees now, else the CPU alone. Configurations with `--rpc` devices are not planned (their memory is
only known once connected) and simply launch. `PlanVerdict` lives here, not in the runner, so the
runner imports the planner check and nothing imports back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tui.core.options.settings import Settings


@dataclass(frozen=True)
class PlanVerdict:
    """The planner's call on a configuration: `risk` ok | tight | oom, `unknown` (could not plan), or
    `invalid` (the server is certain to refuse it, e.g. draft-mtp on a model without MTP layers)."""

    risk: str
    message: str = ""
    details: dict[str, Any] | None = None


PlanCheck = Callable[[Settings], "PlanVerdict | None"]


def _verdict_from_plan(plan: Any) -> tuple[str, str]:
    """(risk, one sentence naming the worst device and its numbers)."""
    risk = plan.worst_risk
    worst = [d for d in plan.devices if d.risk == risk]
    parts = []
    for d in worst[:3]:
        free = "unknown" if d.free_mib is None else f"{d.free_mib:.0f}"
        parts.append(f"{d.key} needs {d.needed_mib:.0f} MiB of {free} MiB free (margin {d.margin_mib:.0f})")
    return risk, "; ".join(parts)


def default_planner(simulate: str | None = None) -> PlanCheck:
    """The memory planner as a PlanCheck (`simulate`: plan against a simulated GPU profile)."""
    return plan_check(simulate)


def plan_check(simulate: str | None = None) -> PlanCheck:
    """A PlanCheck for `Sweep(planner=...)`: Settings -> PlanVerdict | None."""
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
