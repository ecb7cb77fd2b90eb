"""Held-out accuracy of the planner's instant estimate (and of exact mode) against the real server's loads.

The compute figures' validation, uncalibrated and calibrated, held out by architecture and with the
error band the UI shows, is bench/validate_estimate.py; this script checks every component against real
loads (or, with --dry, llama.cpp's dry runs) on architectures no constant was set on.

HELD-OUT set: shape-only GGUFs of shapes the estimate's compute constants were never fitted on
(tests/helpers/archshapes.py: gemma3 iswa 4B/12B, deepseek2 MLA with MTP (GLM-4.7-Flash-like) and
DeepSeek-V2, glm4moe MTP (GLM-4.6), qwen3next, mimo2 iswa+MTP, nemotron_h_moe Mamba-2 hybrid), each configuration launched on the real llama-server (CPU build, -nr, until it listens) and
compared component by component with its memory report. The CALIBRATION set is separate:
CALIBRATION_SHAPES here (the structural compute model) and bench_planner_accuracy.py's MATRIX/SHAPE
(tiny qwen35/qwen35moe presets and the Qwen3.6-35B-A3B shape, the hybrid widths).

    .venv/bin/python bench/bench_planner_heldout.py [--exact] [--limit N] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _results import append_under  # noqa: E402

from tests.helpers.archshapes import write_arch_shape  # noqa: E402
from tests.helpers.launch import probe_launch  # noqa: E402
from tui.core.server import provision  # noqa: E402
from tui.core.options.argv import settings_from_argv  # noqa: E402
from tui.core.planning.gguf_reader import read_gguf  # noqa: E402
from tui.core.planning.plan import plan  # noqa: E402
from tui.core.planning.reconcile import reconcile  # noqa: E402

MTP = ["--spec-type", "draft-mtp"]
COMMON = ["-nr", "-t", "1", "-tb", "1", "--no-warmup", "-fit", "off"]
Q8 = ["-ctk", "q8_0", "-ctv", "q8_0"]
Q4 = ["-ctk", "q4_0", "-ctv", "q4_0"]
_VARIANTS: list[list[str]] = [
    ["-c", "4096", "-np", "1"],
    ["-c", "32768", "-np", "1"],
    ["-c", "16384", "-np", "2", "-ub", "256"],
    ["-c", "8192", "-np", "4", "--kv-unified", "-ub", "1024"],
    ["-c", "12288", "-np", "3", *Q8],
    ["-c", "8192", "-np", "1", "-fa", "off", "-ub", "128"],
    ["-c", "65536", "-np", "1", *Q4, "-ub", "2048", "-b", "2048"],
    ["-c", "8192", "-np", "2", "-ub", "64", "--swa-full"],
    ["-c", "20000", "-np", "1", "-ub", "384"],
    ["-c", "8192", "-np", "2", "-ngl", "0", "-ctk", "q8_0", "-ctv", "q8_0"],
]
_MTP_VARIANTS: list[list[str]] = [
    ["-c", "4096", "-np", "1", *MTP],
    ["-c", "16384", "-np", "2", *MTP, "--spec-draft-n-max", "2", "-ctkd", "q8_0", "-ctvd", "q8_0"],
    ["-c", "8192", "-np", "1", *MTP, "--spec-draft-n-max", "6", "-ub", "256"],
    ["-c", "32768", "-np", "1", *MTP, *Q8, "-ub", "1024"],
]
#: shapes whose launches set the structural compute constants (tui/core/planning/graph.py); never held out
CALIBRATION_SHAPES: tuple[str, ...] = ("gemma3-1b", "deepseek-v2-lite", "glm45-air")
#: architectures whose shapes set a constant of the estimate (graph.py: calibrate_graph.py's shapes;
#: compute.py's widths: qwen35/qwen35moe): none of them is held out (issue 22)
CALIBRATION_ARCHS: tuple[str, ...] = ("gemma3", "deepseek2", "glm4moe", "qwen35", "qwen35moe")
#: (shape, args): the held-out matrix, architectures no constant was set on
HELD_OUT: list[tuple[str, list[str]]] = (
    [("qwen3-next-80b", v) for v in _VARIANTS[:7] + _MTP_VARIANTS]
    + [("mimo-v2-flash-r32", v) for v in _VARIANTS[:3] + _MTP_VARIANTS[:3]]
    + [("nemotron-h-moe-r32", v) for v in _VARIANTS[:6]]
    + [("qwen3-8b", v) for v in _VARIANTS[:7]]
)
assert not {s for s, _ in HELD_OUT} & set(CALIBRATION_SHAPES)
EXACTISH = ("weights", "kv", "draft_kv", "recurrent", "output")


def run_case(server: Path, model: Path, args: list[str], with_exact: bool) -> dict:
    t0 = time.monotonic()
    res = probe_launch(server, ["-m", str(model), *args, *COMMON], timeout_s=300)
    if not res.ready:
        return {"ready": False, "log_tail": res.log[-1500:]}
    settings = settings_from_argv(["-m", str(model), *args, *COMMON]).settings
    meta = read_gguf(model)
    out = {"ready": True, "seconds": round(time.monotonic() - t0, 1),
           "diffs": [d.to_dict() for d in reconcile(plan(meta, settings, []), res.report).diffs]}
    if with_exact:
        from tui.core.planning.exact import exact_plan
        ex = exact_plan(settings, [], server, meta=meta, use_cache=False)
        out["exact"] = [d.to_dict() for d in reconcile(ex.plan, res.report).diffs] if ex.available else ex.reason
    return out


def run_dry(server: Path, model: Path, args: list[str]) -> dict:
    """The estimate against the real server's own dry-run measurement (exact mode, no_alloc): on the 31
    real loads of this matrix exact mode equalled the load to 0.00 MiB, so it stands in for a launch
    where loading a 60-layer shape takes minutes on this shared 2-core machine."""
    from tui.core.planning.exact import exact_plan
    settings = settings_from_argv(["-m", str(model), *args, *COMMON]).settings
    meta = read_gguf(model)
    ex = exact_plan(settings, [], server, meta=meta, use_cache=False)
    if not ex.available:
        return {"ready": False, "log_tail": ex.reason}
    est = plan(meta, settings, [])
    diffs = []
    for d in ex.plan.devices:
        e = est.device(d.key)
        for c, rep in d.components.items():
            pred = e.components[c] if e is not None else 0.0
            diffs.append({"device": d.key, "component": c, "predicted_mib": round(pred, 2), "reported_mib": round(rep, 2),
                          "error_mib": round(pred - rep, 2), "error_pct": round(100 * (pred - rep) / rep, 2) if rep else None})
    return {"ready": True, "dry_run": True, "diffs": diffs}


def _ok(d: dict) -> bool:
    if d["component"] in EXACTISH:
        return abs(d["error_mib"]) <= max(1.0, 0.01 * d["reported_mib"])
    return abs(d["error_mib"]) <= max(0.10 * d["reported_mib"], 0.5)


def summarize(results: list[dict], key: str = "diffs") -> tuple[list[str], dict[str, float]]:
    """Table rows per architecture and component, and the band: the 95th-percentile relative error."""
    rows, bands = [], {}
    ok = [r for r in results if r["ready"] and isinstance(r.get(key), list)]
    comps = ("weights", "kv", "draft_kv", "recurrent", "output", "compute", "draft_compute")
    for c in comps:
        ds_all = [d for r in ok for d in r[key] if d["component"] == c and (d["reported_mib"] or d["predicted_mib"])]
        if not ds_all:
            continue
        rels = sorted(abs(d["error_mib"]) / max(d["reported_mib"], 1.0) for d in ds_all)
        bands[c] = round(100 * rels[min(len(rels) - 1, int(0.95 * len(rels)))], 2)
        for arch in sorted({r["arch"] for r in ok}):
            ds = [d for r in ok if r["arch"] == arch for d in r[key] if d["component"] == c
                  and (d["reported_mib"] or d["predicted_mib"])]
            if ds:
                worst = max(ds, key=lambda d: abs(d["error_mib"]))
                rows.append(f"| {c} | {arch} | {len(ds)} | {sum(map(_ok, ds))}/{len(ds)} | {abs(worst['error_mib']):.2f} | "
                            f"{max(abs(d['error_pct'] or 0) for d in ds if d['reported_mib'] >= 1.0) if any(d['reported_mib'] >= 1.0 for d in ds) else 0:.1f} |")
    return rows, bands


def write_report(results: list[dict], with_exact: bool, no_write: bool, planned: int) -> None:
    """The RESULTS.md section from these results (a run's, or a --summarize file's)."""
    shapes = {r["shape"] for r in results}
    rows, bands = summarize(results)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    ready = sum(r["ready"] for r in results)
    comp = [d for r in results if r["ready"] for d in r["diffs"] if d["component"] in ("compute", "draft_compute")
            and (d["reported_mib"] or d["predicted_mib"])]
    lines = [f"### Held-out accuracy of the estimate (bench/bench_planner_heldout.py), {when}, commit {commit}", "",
             f"{len(results)} of the {planned} planned configurations on {len(shapes)} shape-only models of {len({r['arch'] for r in results})} "
             f"architectures, none used for calibration; {ready} reached ready; llama-server b11434 CPU build, -nr; "
             f"{sum(1 for r in results if r.get('dry_run'))} of them measured by the server's dry run (exact mode) "
             "instead of a full load. "
             f"Compute within 10 % (0.5 MiB floor): {sum(map(_ok, comp))}/{len(comp)}. "
             "Error band (95th-percentile |error| / reported, %): " + ", ".join(f"{k} {v}" for k, v in bands.items()), "",
             "| component | arch | comparisons | within goal | max abs MiB | max rel % |", "|---|---|---|---|---|---|", *rows]
    if with_exact:
        erows, _ = summarize(results, "exact")
        lines += ["", "Exact mode vs the real load, same configurations:", "",
                  "| component | arch | comparisons | within goal | max abs MiB | max rel % |", "|---|---|---|---|---|---|", *erows]
    text = "\n".join(lines)
    print(text)
    if not no_write:
        append_under("## Memory planner", text)  # the UI's error band: bench/validate_estimate.py


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--exact", action="store_true", help="also run exact mode per configuration")
    ap.add_argument("--dry", action="store_true", help="reference: the server's dry-run measurement, not a launch")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--shapes", help="only these shapes (comma-separated), e.g. to split a run across processes")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--summarize", type=Path, help="report a --json file of an earlier (or partial) run, no launches")
    a = ap.parse_args()
    if a.summarize:
        results = json.loads(a.summarize.read_text())
        write_report(results, any("exact" in r for r in results), a.no_write, len(HELD_OUT))
        return 0
    server = provision.cached_server() or provision.ensure_server().path
    tmp = Path(tempfile.mkdtemp(prefix="mtp-bench-heldout-"))
    cases = HELD_OUT[: a.limit] if a.limit else HELD_OUT
    if a.shapes:
        cases = [c for c in cases if c[0] in a.shapes.split(",")]
    shapes: dict[str, Path] = {}
    results = []
    for name, args in cases:
        if name not in shapes:
            shapes[name] = write_arch_shape(name, tmp / f"{name}.gguf")
        r = run_dry(server, shapes[name], args) if a.dry else run_case(server, shapes[name], args, a.exact)
        r.update(shape=name, arch=read_gguf(shapes[name]).hparams.arch, args=" ".join(args))
        assert r["arch"] not in CALIBRATION_ARCHS, f"{name} is a calibration architecture ({r['arch']})"
        results.append(r)
        bad = [f"{d['component']} {d['error_mib']:+.2f} MiB ({d['error_pct']}%)" for d in r.get("diffs", []) if not _ok(d)]
        print(f"{name:17} {' '.join(args):64} {'NOT READY' if not r['ready'] else ('ok' if not bad else '; '.join(bad))}", flush=True)
        if a.json:
            a.json.write_text(json.dumps(results, indent=1))
    write_report(results, a.exact, a.no_write, len(cases))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
