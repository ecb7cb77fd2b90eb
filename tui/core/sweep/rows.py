"""A finished sweep row's `Trial` from what the launch and the probe returned: memory summary, warnings,
per-pass numbers (the figures the table's medians and ranges are read from)."""

from __future__ import annotations

import contextlib
from typing import Any

from tui.core.lab.candidate import Candidate
from tui.core.lab.knob import KnobFinding
from tui.core.lab.launcher import LaunchOutcome
from tui.core.lab.trial import Samples, Trial
from tui.core.options.settings import Settings
from tui.core.options.settings import settings_json


def memory_summary(out: LaunchOutcome) -> dict[str, Any] | None:
    m = out.memory
    if not m:
        return None
    devices = {dev: round(sum(float(v) for v in comps.values()), 1) for dev, comps in (m.get("devices") or {}).items()}
    total = round(sum(devices.values()), 1)
    n_ctx = None
    with contextlib.suppress(Exception):
        n_ctx = int(m["target"]["params"]["n_ctx"])
    return {"total_mib": total, "devices": devices, "totals": m.get("totals"), "n_ctx": n_ctx,
            "device_free_mib": {d.get("name"): d.get("free_mib") for d in out.devices} or None}


def ctx_warning(settings: Settings, mem: dict[str, Any] | None) -> str | None:
    if not mem or not mem.get("n_ctx") or not settings.ctx_size:
        return None
    if mem["n_ctx"] < settings.ctx_size:
        return f"the server runs with a context of {mem['n_ctx']} tokens, not the {settings.ctx_size} asked for"
    return None


def trial_from_run(c: Candidate, run: Any, settings: Settings, mem: dict[str, Any] | None,
                   plan: dict[str, Any] | None, warnings: list[str], finding: KnobFinding | None, launch: int,
                   log_path: str | None) -> Trial:
    s = run.summary or {}
    ws = list(warnings) + [w.message for w in (run.warnings or []) if getattr(w, "severity", "warn") == "warn"]
    if finding is not None and finding.converged:
        ws.insert(0, f"{finding.flag} set to {finding.value} {finding.unit} after a memory allocation failure "
                     f"({finding.message})")
    # The passes the probe's medians are taken over: the complete ones, or all when none completed.
    passes = s.get("passes") or []
    passes = [p for p in passes if p.get("complete", True)] or passes
    return Trial(
        c.key, "ok" if run.status == "ok" else "failed", mtp=settings.mtp_enabled,
        reason=run.error if run.status != "ok" else None,
        failure_kind=None if run.status == "ok" else "probe_failed",
        settings=settings_json(settings.redacted()), n_predict=c.n_predict,
        samples=Samples.of_passes(passes) if passes else None, acceptance=s.get("acceptance"),
        mean_accept_len=s.get("mean_accept_len"), memory=mem, plan=plan, warnings=ws,
        finding=finding.to_json() if finding else None, run_id=run.run_id, launch=launch, log_path=log_path,
    )
