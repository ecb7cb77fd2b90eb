"""A finished row's record from what the launch and the probe returned: memory summary, warnings, numbers."""

from __future__ import annotations

import contextlib
from typing import Any

from tui.core.lab.knob import KnobFinding
from tui.core.lab.launcher import LaunchOutcome
from tui.core.options.settings import Settings
from tui.core.sweep.definition import Configuration, settings_json
from tui.core.sweep.state import RowResult


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


def row_from_run(c: Configuration, run: Any, settings: Settings, mem: dict[str, Any] | None, plan: dict[str, Any] | None,
                  warnings: list[str], finding: KnobFinding | None, launch: int, log_path: str | None) -> RowResult:
    s = run.summary or {}
    ws = list(warnings) + [w.message for w in (run.warnings or []) if getattr(w, "severity", "warn") == "warn"]
    if finding is not None and finding.converged:
        ws.insert(0, f"{finding.flag} set to {finding.value} {finding.unit} after a memory allocation failure "
                     f"({finding.message})")
    passes = [{"tg_tps": p.get("tg_tps"), "pp_tps": p.get("pp_tps"), "acceptance": p.get("acceptance")}
              for p in s.get("passes") or [] if p.get("complete", True)]
    row = RowResult(
        c.key, "ok" if run.status == "ok" else "failed",
        reason=run.error if run.status != "ok" else None,
        failure_kind=None if run.status == "ok" else "probe_failed",
        settings=settings_json(settings.redacted()), n_predict=c.n_predict,
        tg_tps=s.get("tg_tps_median"), pp_tps=s.get("pp_tps_median"), acceptance=s.get("acceptance"),
        tg_summary=s.get("tg_tps"), pp_summary=s.get("pp_tps"), passes=passes,
        mean_accept_len=s.get("mean_accept_len"), memory=mem, plan=plan, warnings=ws,
        finding=finding.to_json() if finding else None, run_id=run.run_id, launch=launch, log_path=log_path,
    )
    return row
