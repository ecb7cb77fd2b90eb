"""Reading format-1 files into today's journal: the sweep state (`sweep.state`, rows of `RowResult`)
and the tune state (`tuning.tune_state`, the same file with each record squeezed into a row, its own
fields under `finding.tune`, and its workload, prompt and A/B verdicts as `findings`).

Why a module of its own: it is the only place that knows the old shapes, a pure JSON-to-JSON step
before `lab.journal` reads the result as version 2, so it can go once no format-1 file is left. Each
old row is shape-checked here (ShapeError naming its place), because its writer's classes are gone.
"""

from __future__ import annotations

from typing import Any

from tui.core.config.jsonshape import ShapeError, check

_NUM = float | None
#: A format-1 sweep row (`RowResult.to_json()`); a missing key reads as null.
ROW_V1: dict[str, Any] = {
    "key": str, "status": str, "reason": str | None, "failure_kind": str | None, "settings": dict[str, Any] | None,
    "n_predict": int | None, "tg_tps": _NUM, "pp_tps": _NUM, "acceptance": _NUM, "passes": list[dict[str, Any]] | None,
    "mean_accept_len": _NUM, "memory": dict[str, Any] | None, "plan": dict[str, Any] | None,
    "warnings": list[str] | None, "finding": dict[str, Any] | None, "run_id": int | None, "launch": int | None,
    "log_path": str | None, "started_at": _NUM, "finished_at": _NUM,
}
#: What a format-1 tune row kept of its record under `finding.tune` (`TrialRecord.to_row()`).
TUNE_V1: dict[str, Any] = {
    "number": int | None, "memory_key": str | None, "values": dict[str, Any] | None, "stage": str | None,
    "status": str | None, "failure": str | None, "vram_mib": _NUM, "fit_target": int | None,
    "verdict": dict[str, Any] | None, "launches": int | None,
}
_PASS: dict[str, Any] = {"pp_tps": _NUM, "tg_tps": _NUM, "acceptance": _NUM, "e2e_s": _NUM}
#: The sweep row's columns that a trial keeps under the same name.
_SAME = ("key", "status", "reason", "failure_kind", "n_predict", "mean_accept_len", "memory", "plan", "run_id",
         "launch", "log_path", "started_at", "finished_at")


def upgrade(d: dict[str, Any], kind: str) -> dict[str, Any]:
    """A format-1 state (`d`, parsed JSON) as a version-2 journal of `kind` ("sweep" or "tune")."""
    check(d.get("rows"), dict[str, Any] | None, "rows")
    check(d.get("findings"), list[dict[str, Any]] | None, "findings")
    findings = list(d.get("findings") or [])
    trials: dict[str, Any] = {}
    for k, row in (d.get("rows") or {}).items():
        where = f"rows.{k}"
        check(row, ROW_V1, where)
        if "key" not in row or "status" not in row:
            raise ShapeError(f"{where} has no {'key' if 'key' not in row else 'status'}")
        t = _tune_trial(row, where) if kind == "tune" else _sweep_trial(row, where)
        if t is not None:
            trials[k] = t
    tune = None
    if kind == "tune":
        tune = {"workload": None, "prompt": None, "ab": []}
        for i, f in enumerate(findings):
            what = f.get("kind")
            if what == "workload":
                tune["workload"] = f.get("workload")
            elif what == "prompt":
                tune["prompt"] = f.get("text")
            elif what == "ab":
                tune["ab"].append({k: f.get(k) for k in ("on", "off", "passes", "verdict")})
        findings = [f for f in findings if f.get("kind") not in ("workload", "prompt", "ab")]
    times = {k: d[k] for k in ("created_at", "updated_at") if d.get(k) is not None}
    return {"version": 2, "kind": kind, "id": d.get("sweep_id"), "definition": d.get("definition") or {}, **times,
            "launches": d.get("launches") or 0, "sessions": d.get("sessions") or [], "findings": findings,
            "trials": trials, "tune": tune}


def _samples(row: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The row's passes as per-pass samples; a row with medians but no passes (only partial passes
    were measured) becomes one pass at its medians."""
    ps = list(row.get("passes") or [])
    for i, p in enumerate(ps):
        check(p, _PASS, f"{where}.passes[{i}]")
    if not ps and (row.get("tg_tps") is not None or row.get("pp_tps") is not None):
        ps = [{"pp_tps": row.get("pp_tps"), "tg_tps": row.get("tg_tps"), "acceptance": row.get("acceptance")}]
    if not ps:
        return None
    out = {k: [p.get(k) for p in ps] for k in ("pp_tps", "tg_tps", "acceptance")}
    out["e2e_s"] = [p.get("e2e_s") for p in ps] if any(p.get("e2e_s") is not None for p in ps) else []
    return out | {"error": None}


def _sweep_trial(row: dict[str, Any], where: str) -> dict[str, Any]:
    settings = dict(row.get("settings") or {})
    return {**{k: row.get(k) for k in _SAME}, "settings": settings, "mtp": bool(settings.get("spec_type")),
            "finding": row.get("finding"), "acceptance": row.get("acceptance"), "samples": _samples(row, where),
            "warnings": list(row.get("warnings") or [])}


def _tune_trial(row: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The tune record a format-1 row kept (None for a row no tune wrote)."""
    finding = dict(row.get("finding") or {})
    t = finding.pop("tune", None)
    if t is None:
        return None
    check(t, TUNE_V1, f"{where}.finding.tune")
    values = dict(t.get("values") or {})
    return {"key": row["key"], "status": t.get("status") or "ok", "number": t.get("number") or 0,
            "stage": t.get("stage") or "", "values": values, "memory_key": t.get("memory_key") or "",
            "mtp": bool(values.get("mtp")), "settings": dict(row.get("settings") or {}), "reason": row.get("reason"),
            "failure": t.get("failure"), "plan": row.get("plan"), "vram_mib": t.get("vram_mib"),
            "fit_target": t.get("fit_target"), "finding": finding or None, "samples": _samples(row, where),
            "verdict": t.get("verdict"), "launches": t.get("launches") or 0,
            "warnings": list(row.get("warnings") or [])}
