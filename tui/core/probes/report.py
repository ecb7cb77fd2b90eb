"""Export stored runs as a tuning-report table (Markdown or CSV) or as full JSON.

One row per run/configuration, with the knobs people tune by hand (MTP and n-max, ubatch, draft KV
type, fit-target) next to TG, acceptance and PP, each speed as median [min-max] over passes.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from tui.core.probes.stats import Summary, fmt_summary

COLUMNS = ("run", "status", "mtp", "ubatch", "draft_kv", "fit_target", "tg_tps", "acceptance", "pp_tps", "warnings")
HEADERS = {
    "run": "run", "status": "status", "mtp": "MTP", "ubatch": "ubatch", "draft_kv": "draft KV",
    "fit_target": "fit-target", "tg_tps": "TG t/s", "acceptance": "acceptance", "pp_tps": "PP t/s",
    "warnings": "warnings",
}


def _mtp_cell(row: Any) -> str:
    if row.mtp is None:
        return "?"
    if not row.mtp:
        return "off"
    n = (row.settings or {}).get("spec_draft_n_max")
    return f"on (n-max {n})" if n is not None else "on"


def _draft_kv(settings: dict[str, Any] | None, mtp: bool | None) -> str:
    if settings is None:
        return "?"
    if mtp is False:
        return "-"
    k = settings.get("cache_type_k_draft") or "f16"
    v = settings.get("cache_type_v_draft") or "f16"
    return k if k == v else f"{k}/{v}"


def _fit_target(settings: dict[str, Any] | None) -> str:
    if settings is None:
        return "?"
    if settings.get("fit") is False:
        return "fit off"
    ft = settings.get("fit_target") or []
    return ",".join(str(x) for x in ft) if ft else "default"


def _ubatch(settings: dict[str, Any] | None) -> str:
    if settings is None:
        return "?"
    ub = settings.get("ubatch_size")
    return str(ub) if ub is not None else "default"


def row_cells(row: Any, digits: int = 1) -> dict[str, str]:
    """The table cells of one `RunRow`."""
    s = row.summary or {}
    tg = Summary.from_json(s.get("tg_tps"))
    pp = Summary.from_json(s.get("pp_tps"))
    acc = s.get("acceptance")
    return {
        "run": f"#{row.id}" + (f" {row.label}" if row.label else ""),
        "status": row.status,
        "mtp": _mtp_cell(row),
        "ubatch": _ubatch(row.settings),
        "draft_kv": _draft_kv(row.settings, row.mtp),
        "fit_target": _fit_target(row.settings),
        "tg_tps": fmt_summary(tg, digits),
        "acceptance": "-" if acc is None else f"{acc:.1%}",
        "pp_tps": fmt_summary(pp, digits),
        "warnings": str(len(row.warnings or [])),
    }


def to_markdown(rows: Sequence[Any]) -> str:
    """A Markdown table, one row per run; speeds are median [min-max] over passes."""
    cells = [row_cells(r) for r in rows]
    head = "| " + " | ".join(HEADERS[c] for c in COLUMNS) + " |"
    sep = "|" + "|".join("---" if c in ("run", "status", "mtp", "draft_kv", "fit_target") else "---:" for c in COLUMNS) + "|"
    body = ["| " + " | ".join(c[k].replace("|", "\\|") for k in COLUMNS) + " |" for c in cells]
    notes = _notes(rows)
    return "\n".join([head, sep, *body] + ([""] + notes if notes else [])) + "\n"


def _notes(rows: Sequence[Any]) -> list[str]:
    out = []
    models = {r.model for r in rows if r.model}
    suites = {r.suite for r in rows if r.suite}
    if models:
        out.append("Model: " + ", ".join(sorted(str(m) for m in models)) + ". Suite: " + ", ".join(sorted(suites)) + ".")
    reps = {(r.config or {}).get("repeat") for r in rows}
    npred = {(r.config or {}).get("n_predict") for r in rows}
    out.append(
        f"Speeds: median [min-max] over {', '.join(str(x) for x in sorted(x for x in reps if x))} passes; "
        f"n_predict {', '.join(str(x) for x in sorted(x for x in npred if x))}; acceptance = accepted / drafted."
    )
    return out


def to_csv(rows: Sequence[Any]) -> str:
    """CSV with one row per run: numeric columns split into median/min/max."""
    buf = io.StringIO()
    fields = [
        "run_id", "label", "status", "model", "suite", "mtp", "spec_draft_n_max", "ubatch", "draft_kv", "fit_target",
        "tg_median", "tg_min", "tg_max", "pp_median", "pp_min", "pp_max", "acceptance", "mean_accept_len",
        "n_requests", "warnings",
    ]
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        s = r.summary or {}
        tg = Summary.from_json(s.get("tg_tps"))
        pp = Summary.from_json(s.get("pp_tps"))
        c = row_cells(r)
        w.writerow({
            "run_id": r.id, "label": r.label or "", "status": r.status, "model": r.model or "", "suite": r.suite or "",
            "mtp": "" if r.mtp is None else int(r.mtp), "spec_draft_n_max": (r.settings or {}).get("spec_draft_n_max", ""),
            "ubatch": c["ubatch"], "draft_kv": c["draft_kv"], "fit_target": c["fit_target"],
            "tg_median": _num(tg and tg.median), "tg_min": _num(tg and tg.min), "tg_max": _num(tg and tg.max),
            "pp_median": _num(pp and pp.median), "pp_min": _num(pp and pp.min), "pp_max": _num(pp and pp.max),
            "acceptance": _num(s.get("acceptance"), 4), "mean_accept_len": _num(s.get("mean_accept_len"), 3),
            "n_requests": s.get("n_requests", ""), "warnings": " | ".join(x.get("message", "") for x in r.warnings or []),
        })
    return buf.getvalue()


def _num(x: float | None, digits: int = 2) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def to_json(rows: Sequence[Any]) -> str:
    return json.dumps([r.to_json() for r in rows], indent=2, default=str) + "\n"
