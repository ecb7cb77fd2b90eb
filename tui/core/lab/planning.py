"""The memory planner as a sweep's pre-launch check: a predicted OOM is skipped unless try-anyway.

Devices are what the probe session plans against (`probes.session.predict_memory`, over the one
device list `planning.devices.devices_now`): a simulated profile when given, else the GPUs NVML
sees now, else the CPU alone. Configurations with `--rpc` devices are not planned (their memory is
only known once connected) and simply launch. `PlanVerdict` lives here, not in the runner, so the
runner imports the planner check and nothing imports back.

`exact=True`: each configuration is planned by llama.cpp's own dry run (`planning.exact`, simulated
GPUs played by loopback RPC stand-ins) with the sweep's server, a second or so per new
configuration (cached); where exact mode cannot run, the estimate decides and the verdict's details
say why (`exact_unavailable`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
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


def _exact_verdict(settings: Settings, meta: Any, simulate: str | None, server_bin: str | Path | None,
                   exact_fn: Callable[..., Any] | None) -> tuple[PlanVerdict | None, str]:
    """(the verdict from llama.cpp's own figures, "") or (None, one sentence why exact is unavailable)."""
    from tui.core.planning.devices import devices_now

    if exact_fn is None:
        from tui.core.planning.exact import exact_plan as exact_fn
    ds = devices_now(simulate, list(settings.rpc))
    stand_in = simulate is not None and any(not d.remote for d in ds.devices)
    try:
        res = exact_fn(settings, list(ds.devices), server_bin, meta=meta, stand_in=stand_in,
                       host_total_mib=ds.host_total_mib, host_free_mib=ds.host_free_mib)
    except Exception as exc:  # noqa: BLE001 - the estimate still decides
        return None, f"exact mode failed: {exc}"
    if not res.available:
        return None, res.reason or "llama.cpp's dry run gave no figures."
    risk, message = _verdict_from_plan(res.plan)
    details = {"prediction": res.plan.to_dict(), "source": "exact (llama.cpp)",
               "sources": {k: s.label for k, s in res.sources.items()}}
    if res.fit is not None and res.fit.changed:
        details["fit_choice"] = res.fit.flags()
    return PlanVerdict(risk, f"exact (llama.cpp): {message}", details), ""


def plan_check(simulate: str | None = None, *, exact: bool = False, server_bin: str | Path | None = None,
               exact_fn: Callable[..., Any] | None = None, headers: dict[str, Any] | None = None) -> PlanCheck:
    """The memory planner as the lab's PlanCheck: Settings -> PlanVerdict | None. `simulate`: plan
    against a simulated GPU profile; `exact`: llama.cpp's dry run with `server_bin`, the estimate where
    it cannot run; `exact_fn` replaces `planning.exact.exact_plan` (tests count the dry runs);
    `headers`: GGUF headers already read, by model path (a tune plans on the header its request read,
    not a second read)."""
    meta_cache: dict[str, Any] = dict(headers or {})

    def check(settings: Settings) -> PlanVerdict | None:
        # With --rpc the endpoints are asked for their memory (once per plan): a sweep and a tune
        # plan only between launches, when no server holds the RPC device.
        if not settings.model:
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
        why_not = ""
        if exact:
            verdict, why_not = _exact_verdict(settings, meta, simulate, server_bin, exact_fn)
            if verdict is not None:
                return verdict
        from tui.core.probes.session import predict_memory

        plan, info = predict_memory(settings, simulate)
        if plan is None:
            err = (info or {}).get("error")
            return PlanVerdict("unknown", err) if err else None
        risk, message = _verdict_from_plan(plan)
        details: dict[str, Any] = {"prediction": plan.to_dict(), "source": "estimate"}
        if why_not:
            details["exact_unavailable"] = why_not
        return PlanVerdict(risk, message, details)

    return check
