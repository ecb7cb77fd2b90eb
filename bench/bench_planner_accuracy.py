"""Planner accuracy: a matrix of llama-server configurations on generated models (tiny presets, a
25 MB model, and the shape-only Qwen3.6-35B-A3B with the real dimensions), each launched on the real
llama-server (-lv 4, until it listens, then stopped), compared component by component and device by
device with the memory report. Two-device cases use loopback ggml-rpc-server processes.

Goals: weights, KV, draft KV, recurrent within 1 % or 1 MiB; compute within 10 %.

    .venv/bin/python bench/bench_planner_accuracy.py [--quick] [--no-shape] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_planner_speed import append_section  # noqa: E402

from tui.core.server import provision  # noqa: E402
from tui.core.options.argv import settings_from_argv  # noqa: E402
from tui.core.planning.gguf_reader import read_gguf  # noqa: E402
from tui.core.planning.devices import DeviceSpec  # noqa: E402
from tui.core.planning.plan import plan  # noqa: E402
from tests.helpers.launch import probe_launch  # noqa: E402
from tui.core.planning.standin import RpcServers  # noqa: E402
from tui.core.planning.reconcile import EXACT_COMPONENTS, reconcile  # noqa: E402
from tests.helpers.shapemodel import write_shape_model  # noqa: E402
from tui.core.demo.tiny_model import PRESETS, write_tiny_model  # noqa: E402

MTP = ["--spec-type", "draft-mtp"]
COMMON = ["-t", "1", "-tb", "1", "--no-warmup", "-fit", "off"]

# (model, args, rpc devices)
MATRIX: list[tuple[str, list[str], int]] = [
    ("tiny-mtp", ["-c", "4096", "-np", "1", *MTP], 0),
    ("tiny-mtp", ["-c", "4096", "-np", "1"], 0),
    ("tiny-mtp", ["-c", "16384", "-np", "1", "-ub", "1024", *MTP], 0),
    ("tiny-mtp", ["-c", "2048", "-np", "1", "-ub", "64", *MTP, "--spec-draft-n-max", "1"], 0),
    ("tiny-mtp", ["-c", "8192", *MTP], 0),  # auto -np: 4 slots, unified
    ("tiny-mtp", ["-c", "8000", "-np", "3", *MTP, "--spec-draft-n-max", "6"], 0),
    ("tiny-mtp", ["-c", "4096", "-np", "1", *MTP, "-ctk", "q8_0", "-ctv", "q8_0"], 0),
    ("tiny-mtp", ["-c", "4096", "-np", "1", *MTP, "-ctkd", "q8_0", "-ctvd", "q4_0"], 0),
    ("tiny-mtp", ["-c", "4096", "-np", "2", "-fa", "off", "-ub", "128"], 0),
    ("tiny-mtp", ["-c", "65536", "-np", "1", *MTP, "-ctk", "q4_0", "-ctv", "q4_0", "-ub", "256"], 0),
    ("tiny-moe-mtp", ["-c", "4096", "-np", "1", *MTP], 0),
    ("tiny-moe-mtp", ["-c", "32768", "-np", "2", *MTP, "-ctk", "q8_0", "-ctv", "q8_0", "-ctkd", "q8_0", "-ctvd", "q8_0"], 0),
    ("tiny-moe-mtp", ["-c", "4096", "-np", "4", "-ub", "256", *MTP, "--spec-draft-n-max", "4"], 0),
    ("tiny-moe-mtp", ["-c", "4096", "-np", "1", "-ub", "512"], 0),
    ("tiny-mtp-q8_0", ["-c", "4096", "-np", "1", *MTP], 0),
    ("tiny-mtp-q8_0", ["-c", "12288", "-np", "2", "-ub", "128", *MTP, "-ctk", "q5_1", "-ctv", "q5_0"], 0),
    ("tiny-nomtp", ["-c", "4096", "-np", "1"], 0),
    ("tiny-nomtp", ["-c", "16384", "-ub", "1024"], 0),
    ("small-mtp-q8_0", ["-c", "4096", "-np", "1", *MTP], 0),
    ("small-mtp-q8_0", ["-c", "16384", "-np", "1", "-ub", "256", *MTP, "-ctk", "q8_0", "-ctv", "q8_0"], 0),
    ("small-mtp-q8_0", ["-c", "8192", "-np", "2", *MTP, "--spec-draft-n-max", "2", "-ctkd", "q4_0", "-ctvd", "q4_0"], 0),
    ("small-mtp-q8_0", ["-c", "4096", "-np", "1", "-ub", "1024"], 0),
    ("tiny-mtp", ["-c", "4096", "-np", "1", *MTP, "-ts", "1,1", "-ngl", "all"], 2),
    ("tiny-mtp", ["-c", "8192", "-np", "1", "-ub", "256", *MTP, "-ts", "3,1", "-ngl", "all"], 2),
    ("tiny-moe-mtp", ["-c", "4096", "-np", "2", *MTP, "-ts", "1,1", "-ngl", "all", "-ctk", "q8_0", "-ctv", "q8_0"], 2),
    ("small-mtp-q8_0", ["-c", "4096", "-np", "1", *MTP, "-ts", "1,1", "-ngl", "all"], 2),
    ("small-mtp-q8_0", ["-c", "8192", "-np", "1", "-ub", "256", *MTP, "-ts", "1,2", "-ngl", "all"], 2),
]
SHAPE: list[tuple[str, list[str], int]] = [
    ("shape", ["-c", "4096", "-np", "1", *MTP, "-nr"], 0),
    ("shape", ["-c", "4096", "-np", "1", "-nr"], 0),
    ("shape", ["-c", "16384", "-np", "1", *MTP, "-ctk", "q8_0", "-ctv", "q8_0", "-nr"], 0),
    ("shape", ["-c", "8192", "-np", "1", "-ub", "1024", *MTP, "--spec-draft-n-max", "6", "-nr"], 0),
    ("shape", ["-c", "8192", "-np", "2", "-ub", "256", *MTP, "-ctkd", "q8_0", "-ctvd", "q8_0", "-nr"], 0),
    ("shape", ["-c", "4096", "-np", "1", *MTP, "-cmoe", "-ts", "1,1", "-ngl", "all", "-nr"], 2),
]


def models(tmp: Path, with_shape: bool) -> dict[str, Path]:
    out = {n: write_tiny_model(tmp / f"{n}.gguf", PRESETS[n]) for n in
           ("tiny-mtp", "tiny-moe-mtp", "tiny-mtp-q8_0", "tiny-nomtp", "small-mtp-q8_0")}
    if with_shape:
        out["shape"] = write_shape_model(tmp / "qwen36-35b-a3b-shape.gguf")
    return out


def run_case(server: Path, rpc_bin: Path | None, model: Path, args: list[str], n_rpc: int) -> dict:
    t0 = time.monotonic()
    if n_rpc:
        assert rpc_bin is not None
        with RpcServers(rpc_bin, n_rpc) as rpc:
            res = probe_launch(server, ["-m", str(model), "--rpc", rpc.endpoints, *args, *COMMON], timeout_s=600)
            devices = [DeviceSpec(f"RPC0[127.0.0.1:{p}]", f"rpc {i}", 24576, 24576, remote=True) for i, p in enumerate(rpc.ports)]
            full_args = args + ["--rpc", rpc.endpoints]
    else:
        res = probe_launch(server, ["-m", str(model), *args, *COMMON], timeout_s=600)
        devices, full_args = [], args
    if not res.ready:
        return {"ready": False, "log_tail": res.log[-1500:]}
    settings = settings_from_argv(["-m", str(model), *full_args]).settings
    p = plan(read_gguf(model), settings, devices)
    rec = reconcile(p, res.report)
    return {"ready": True, "seconds": round(time.monotonic() - t0, 1), "diffs": [d.to_dict() for d in rec.diffs],
            "unmatched": rec.unmatched_devices}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="only the first 8 configurations")
    ap.add_argument("--no-shape", action="store_true", help="skip the 20 GB shape-only model")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the raw diffs here")
    ap.add_argument("--summarize", type=Path, help="summarize a --json file of an earlier run (no launches)")
    a = ap.parse_args()
    if a.summarize:
        text = summarize(json.loads(a.summarize.read_text()), a)
        print(text)
        if not a.no_write:
            append_section(text)
        return 0
    server = provision.cached_server() or provision.ensure_server().path
    rpc_bin = provision.rpc_server_for(server)
    tmp = Path(tempfile.mkdtemp(prefix="mtp-bench-acc-"))
    mdl = models(tmp, not a.no_shape)
    cases = MATRIX[:8] if a.quick else MATRIX + ([] if a.no_shape else SHAPE)
    results = []
    for name, args, n_rpc in cases:
        r = run_case(server, rpc_bin, mdl[name], args, n_rpc)
        r.update(model=name, args=" ".join(args), rpc=n_rpc)
        results.append(r)
        worst = "not ready" if not r["ready"] else max(
            (f"{d['component']}@{d['device'][:6]} {d['error_mib']:+.2f} MiB" for d in r["diffs"] if d["error_mib"]),
            key=lambda x: abs(float(x.split()[1])), default="exact")
        print(f"{name:15} {'RPCx2 ' if n_rpc else ''}{' '.join(args):70} worst: {worst}", flush=True)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    text = summarize(results, a)
    print(text)
    if not a.no_write:
        append_section(text)
    return 0


def summarize(results: list[dict], a: argparse.Namespace) -> str:
    comps = ("weights", "kv", "draft_kv", "recurrent", "output", "compute", "draft_compute")
    ok = [r for r in results if r["ready"]]
    rows = []
    for c in comps:
        ds = [d for r in ok for d in r["diffs"] if d["component"] == c and (d["reported_mib"] or d["predicted_mib"])]
        if not ds:
            continue
        max_abs = max(abs(d["error_mib"]) for d in ds)
        rels = [abs(d["error_pct"]) for d in ds if d["error_pct"] is not None and d["reported_mib"] >= 1.0]
        max_rel = max(rels, default=0.0)
        if c in EXACT_COMPONENTS or c == "output":
            met = sum(abs(d["error_mib"]) <= max(1.0, 0.01 * d["reported_mib"]) for d in ds)
            goal = "1 % or 1 MiB"
        else:
            met = sum(abs(d["error_mib"]) <= max(0.10 * d["reported_mib"], 0.5) for d in ds)
            goal = "10 % (0.5 MiB floor)"
        rows.append(f"| {c} | {len(ds)} | {max_abs:.2f} | {max_rel:.1f} | {met}/{len(ds)} within {goal} |")
    worst = []
    for r in ok:
        for d in r["diffs"]:
            if d["component"] in ("compute", "draft_compute") and d["error_pct"] is not None and abs(d["error_pct"]) > 10 \
                    and abs(d["error_mib"]) > 0.5:
                worst.append(f"- {r['model']} `{r['args']}`{' (2 RPC devices)' if r['rpc'] else ''}: {d['component']} on "
                             f"{d['device']}: predicted {d['predicted_mib']} MiB, reported {d['reported_mib']} MiB ({d['error_pct']:+.1f} %)")
    cmd = "`.venv/bin/python bench/bench_planner_accuracy.py" + (" --quick" if a.quick else "") + (" --no-shape" if a.no_shape else "") + "`"
    lines = [
        "### Accuracy (bench/bench_planner_accuracy.py)",
        "",
        f"Command: {cmd}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; llama-server b11434 CPU build, "
        f"{len(results)} configurations ({sum(1 for r in results if r['rpc'])} on two loopback ggml-rpc-server devices, "
        f"{sum(1 for r in results if r['model'] == 'shape')} on the shape-only Qwen3.6-35B-A3B), {len(ok)} reached ready. "
        "Every component of every device compared (predicted - reported).",
        "",
        "| component | comparisons | max abs error MiB | max rel error % (reported >= 1 MiB) | goal met |",
        "|---|---|---|---|---|",
        *rows,
    ]
    if worst:
        lines += ["", "Compute comparisons outside 10 % (and over 0.5 MiB):", *worst[:20]]
    not_ready = [r for r in results if not r["ready"]]
    if not_ready:
        lines += ["", "Did not get ready: " + "; ".join(f"{r['model']} `{r['args']}`" for r in not_ready)]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
