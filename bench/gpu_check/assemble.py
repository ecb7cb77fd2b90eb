"""Turn raw measurements into the check's result rows, JSON and Markdown (pure functions, tested).

Per config and component: what llama.cpp allocated on the GPU (its buffer lines), what the planner
predicted, what llama.cpp's own dry run (`llama-fit-params --fit-print on`) predicted, and NVML's
used memory over the baseline after load, a first decode and a long prompt. NVML's growth minus the
buffers is the memory nobody accounts for (CUDA context, cuBLAS workspace, FA/MMQ pools).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

COMPONENTS: tuple[str, ...] = ("weights", "kv", "draft_kv", "recurrent", "compute", "draft_compute", "output")
_FIT_ROW = re.compile(r"^(\S+) (\d+) (\d+) (\d+)\s*$")


def parse_fit_print(text: str) -> dict[str, dict[str, int]]:
    """`llama-fit-params --fit-print on` stdout -> device -> {model, context, compute} MiB."""
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        m = _FIT_ROW.match(line.strip())
        if m:
            out[m.group(1)] = {"model": int(m.group(2)), "context": int(m.group(3)), "compute": int(m.group(4))}
    return out


def gpu_name(devices: dict[str, Any]) -> str | None:
    """The first CUDA device key of a per-device dict (`CUDA0`)."""
    return next((k for k in devices if k.startswith("CUDA")), None)


def planned_gpu(plan: dict[str, Any] | None) -> dict[str, float] | None:
    """The planner's components for the first CUDA device of `mtp-tune plan --json`."""
    if not plan:
        return None
    for dev in plan.get("devices", []):
        if str(dev.get("name", "")).startswith("CUDA") or str(dev.get("id", "")).startswith("CUDA"):
            return {c: float(dev.get(f"{c}_mib") or 0.0) for c in (*COMPONENTS, "needed")}
    return None


def delta(readings: dict[str, float | None], point: str) -> float | None:
    a, b = readings.get("baseline"), readings.get(point)
    return None if a is None or b is None else round(b - a, 1)


def config_row(cfg: dict[str, Any], launch: dict[str, Any], buffers: dict[str, Any] | None,
               plan: dict[str, Any] | None, fit: dict[str, dict[str, int]] | None) -> dict[str, Any]:
    """One matrix row: measured vs planned vs dry run per component, NVML deltas, unaccounted MiB."""
    measured: dict[str, float] | None = None
    host: dict[str, float] | None = None
    if buffers and buffers.get("devices"):
        g = gpu_name(buffers["devices"])
        measured = {c: float(buffers["devices"][g].get(c, 0.0)) for c in COMPONENTS} if g else None
        if measured is not None:
            measured["draft_compute"] += float(buffers["devices"][g].get("draft_output", 0.0))
        h = buffers["devices"].get("Host")
        host = {c: float(h.get(c, 0.0)) for c in COMPONENTS} if h else None
    buf_total = round(sum(measured.values()), 1) if measured else None
    readings = launch.get("readings", {})
    nv = {p: delta(readings, p) for p in ("after_load", "after_decode", "after_long")}
    planned = planned_gpu(plan)
    fit_gpu = None
    if fit:
        k = gpu_name(fit)
        fit_gpu = fit.get(k) if k else None
    row: dict[str, Any] = {
        "config": cfg, "ready": launch.get("ready"), "error": launch.get("error"), "seconds": launch.get("seconds"),
        "measured_gpu": measured, "measured_host": host, "measured_gpu_total": buf_total,
        "planned_gpu": planned, "planned_gpu_total": round(planned["needed"], 1) if planned else None,
        "fit_print_gpu": fit_gpu, "fit_print_total": sum(fit_gpu.values()) if fit_gpu else None,
        "nvml_delta": nv, "long_prompt_tokens": launch.get("long_prompt_tokens", 0),
        "flash_attn": (buffers or {}).get("flash_attn"),
    }
    row["unaccounted"] = {p: (None if v is None or buf_total is None else round(v - buf_total, 1)) for p, v in nv.items()}
    if planned and buf_total is not None:
        row["planner_error_mib"] = round(planned["needed"] - buf_total, 1)
        row["planner_error_by_component"] = {c: round(planned[c] - measured[c], 1) for c in COMPONENTS} if measured else None
    return row


def summary_lines(res: dict[str, Any]) -> list[str]:
    """The short summary the script prints at the end."""
    rows = res.get("matrix", [])
    ok = [r for r in rows if r.get("ready")]
    lines = [f"gpu-check{' (DRY RUN on recorded samples)' if res.get('dry_run') else ''}: "
             f"{len(ok)}/{len(rows)} configs measured in {res.get('elapsed_s', 0):.0f} s"]
    b = res.get("build") or {}
    if b:
        lines.append(f"build: {'ok' if b.get('ok') else b.get('error', 'planned only')}"
                     + (f" in {b['phases'].get('build_s')} s" if b.get("phases", {}).get("build_s") else ""))
    un = [r["unaccounted"]["after_decode"] for r in ok if r.get("unaccounted", {}).get("after_decode") is not None]
    if un:
        lines.append(f"unaccounted after first decode: {min(un):.0f} .. {max(un):.0f} MiB")
    pe = [r["planner_error_mib"] for r in ok if r.get("planner_error_mib") is not None]
    if pe:
        lines.append(f"planner minus llama.cpp buffers: {min(pe):+.0f} .. {max(pe):+.0f} MiB")
    lap = res.get("laptop") or {}
    if lap.get("sweep_finding"):
        f = lap["sweep_finding"]
        lines.append(f"6 GiB laptop: smallest surviving {f.get('flag')} = {f.get('value')} {f.get('unit', '')}".rstrip())
    for key in ("probe_laptop", "probe_squeeze"):
        p = lap.get(key) or res.get(key)
        if p and p.get("classified"):
            c = p["classified"]
            lines.append(f"{key}: {c['kind']} on {c.get('flag_or_file')}: {c.get('evidence')}")
    for s in res.get("skipped", []):
        lines.append(f"skipped {s['step']}: {s['reason']}")
    return lines


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.0f}" if isinstance(v, (int, float)) else str(v)


def markdown(res: dict[str, Any]) -> str:
    """The human-readable report (bench/RESULTS.md takes its summary)."""
    out = ["# gpu-check" + (" (DRY RUN: recorded samples, not a measurement)" if res.get("dry_run") else ""), ""]
    out += [f"- {ln}" for ln in summary_lines(res)] + [""]
    if res.get("smi_compare"):
        out += ["## nvidia-smi vs `mtp-tune gpus --json`", "", "| gpu | field | nvidia-smi | mtp-tune | agree |", "|---|---|---|---|---|"]
        out += [f"| {r['index']} | {r['field']} | {r['nvidia_smi']} | {r['mtp_tune']} | {r['agree']} |" for r in res["smi_compare"]]
        out.append("")
    out += ["## Matrix (MiB on CUDA0: llama.cpp buffers / planner / llama-fit-params; NVML growth over baseline)", "",
            "| config | ready | weights | KV | draft KV | RS | compute | draft cmp | output | buffers | planner | fit-print "
            "| exact | NVML load | NVML decode | NVML long | unaccounted (decode) |",
            "|---|---|" + "---|" * 15]
    for r in res.get("matrix", []):
        m, p = r.get("measured_gpu") or {}, r.get("planned_gpu") or {}
        cells = [f"{_f(m.get(c))} / {_f(p.get(c))}" for c in COMPONENTS]
        nv, un = r.get("nvml_delta", {}), r.get("unaccounted", {})
        out.append(f"| {r['config']['id']} | {r.get('ready')} | " + " | ".join(cells)
                   + f" | {_f(r.get('measured_gpu_total'))} | {_f(r.get('planned_gpu_total'))} | {_f(r.get('fit_print_total'))}"
                   + f" | {_f((r.get('exact_gpu') or {}).get('needed'))}"
                   + f" | {_f(nv.get('after_load'))} | {_f(nv.get('after_decode'))} | {_f(nv.get('after_long'))}"
                   + f" | {_f(un.get('after_decode'))} |")
    lap = res.get("laptop")
    if lap:
        out += ["", "## 6 GiB laptop emulation", "", f"- holder: {json.dumps(lap.get('holder'))}",
                f"- foreign process seen by `mtp-tune gpus`: {lap.get('foreign_seen')}"]
        ex = (lap.get("exact") or {})
        out.append(f"- exact mode (fit's choice on the held card): {ex.get('status')} {json.dumps(ex.get('fit'))}")
        if lap.get("sweep_finding"):
            out.append(f"- fit-target search: {json.dumps(lap['sweep_finding'].get('message') or lap['sweep_finding'])}")
        for key in ("probe_laptop", "probe_squeeze"):
            p = lap.get(key)
            if p:
                out.append(f"- {key}: status {p.get('status')}, classified {json.dumps(p.get('classified'))}")
    if res.get("skipped"):
        out += ["", "## Skipped", ""] + [f"- {s['step']}: {s['reason']}" for s in res["skipped"]]
    return "\n".join(out) + "\n"


def write(res: dict[str, Any], out: Path) -> None:
    """gpu-check.json and gpu-check.md in `out` (rewritten after every step: a killed call keeps them)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-check.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    (out / "gpu-check.md").write_text(markdown(res))
