"""The calibration of graph.py's n_embd constants, reproducible: llama.cpp's own compute figures on the
calibration shapes only, and the constants they imply (issue 22).

graph.py models the compute buffer of one ubatch as the KQ masks plus the largest block peak, each a
sum of tensors read off llama-graph.cpp plus a constant number of n_embd-wide tensors: EMBD_DENSE
(dense FFN), EMBD_MOE (MoE FFN), EMBD_ATTN (attention), EMBD_OUT (output). Those constants are the
only fitted part, so they must come from the CALIBRATION shapes alone (gemma3-1b, deepseek-v2-lite,
glm45-air; bench_planner_heldout.py holds the other architectures out).

For every calibration configuration this script takes llama.cpp's measured target compute buffer (the
`--fit` dry run's per-buffer line, exact mode, CPU backend, host only), finds which block is the peak
under the committed constants, and solves that block's constant:

    implied = (measured - masks - the block's constant-free terms) / (n_embd x T x 4 bytes)

It writes every point to bench/data/graph_calibration.json and prints, per constant, the median and
range of the implied values beside the committed one. A constant no configuration puts at the peak
is reported as unconstrained (the calibration set does not pin it).

    .venv/bin/python bench/calibrate_graph.py [--no-write]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _results import publish  # noqa: E402

from tests.helpers.archshapes import write_arch_shape  # noqa: E402
from tui.core.options.argv import settings_from_argv  # noqa: E402
from tui.core.planning import graph  # noqa: E402
from tui.core.planning.exact import exact_plan  # noqa: E402
from tui.core.planning.gguf_reader import read_gguf  # noqa: E402
from tui.core.planning.resolve import resolve  # noqa: E402
from tui.core.server import provision  # noqa: E402

DATA = ROOT / "bench" / "data" / "graph_calibration.json"
COMMON = ["-nr", "-t", "1", "-tb", "1", "--no-warmup", "-fit", "off", "-np", "1"]
#: the calibration shapes (bench_planner_heldout.CALIBRATION_SHAPES) and the settings they are measured at
SHAPES = ("gemma3-1b", "deepseek-v2-lite", "glm45-air")
CONFIGS: tuple[tuple[str, ...], ...] = (
    ("-c", "4096"),
    ("-c", "4096", "-ub", "128"),
    ("-c", "4096", "-ub", "2048", "-b", "2048"),
    ("-c", "16384", "-ub", "1024", "-b", "2048"),
    ("-c", "8192", "-fa", "off", "-ub", "128"),
    ("-c", "2048", "-fa", "off", "-ub", "512"),
)
CONSTANTS = ("EMBD_DENSE", "EMBD_MOE", "EMBD_ATTN", "EMBD_OUT")


def _blocks(hp, r, T: int, n_out: int) -> dict[str, float]:  # noqa: ANN001 - HParams, Resolved
    """Each block's peak in bytes with its n_embd constant set to 0 (the constant-free terms)."""
    saved = {c: getattr(graph, c) for c in CONSTANTS}
    try:
        for c in CONSTANTS:
            setattr(graph, c, 0.0)
        out: dict[str, float] = {}
        dense, moe = graph.dense_layers(hp), hp.n_expert > 0
        if dense and (hp.dense_ff_max or hp.n_ff):
            out["EMBD_DENSE"] = graph._ffn(hp, True, False) * T * 4
        if moe:
            out["EMBD_MOE"] = graph._ffn(hp, False, True) * T * 4
        out["EMBD_ATTN"] = graph._attn(hp, r, T, r.n_ctx_seq)
        out["EMBD_OUT"] = n_out * hp.n_vocab * 4.0
        return out
    finally:
        for c, v in saved.items():
            setattr(graph, c, v)


def measure(server: Path, root: Path) -> list[dict]:
    points = []
    for name in SHAPES:
        model = write_arch_shape(name, root / f"{name}.gguf")
        meta = read_gguf(model)
        hp = meta.hparams
        for cfg in CONFIGS:
            settings = settings_from_argv(["-m", str(model), *cfg, *COMMON]).settings
            ex = exact_plan(settings, [], server, meta=meta, use_cache=False)
            if not ex.available:
                points.append({"shape": name, "args": list(cfg), "error": ex.reason})
                continue
            measured = ex.plan.device("Host").components["compute"] * 2**20
            r = resolve(settings, hp)
            T = r.n_tokens
            n_out = min(T, r.n_outputs_max)
            mask = graph.masks(hp, r, T, hp.attention_layers())
            base = _blocks(hp, r, T, n_out)
            unit = hp.n_embd * T * 4.0
            committed = {b: v + getattr(graph, b) * unit for b, v in base.items()}
            peak = max(committed, key=committed.get)  # type: ignore[arg-type]
            implied = (measured - mask - base[peak]) / unit
            points.append({"shape": name, "arch": hp.arch, "args": list(cfg), "T": T, "n_embd": hp.n_embd,
                           "measured_mib": round(measured / 2**20, 3), "mask_mib": round(mask / 2**20, 3),
                           "peak": peak, "implied": round(implied, 3), "committed": getattr(graph, peak),
                           "estimate_mib": round((mask + committed[peak]) / 2**20, 3)})
    return points


def summary(points: list[dict]) -> list[str]:
    lines = ["| constant | committed | configurations at the peak | implied: median [min-max] | estimate error (max) |",
             "|---|---|---|---|---|"]
    for c in CONSTANTS:
        at = [p for p in points if p.get("peak") == c]
        if not at:
            lines.append(f"| {c} | {getattr(graph, c)} | 0 | unconstrained by the calibration set | - |")
            continue
        vals = [p["implied"] for p in at]
        err = max(abs(p["estimate_mib"] - p["measured_mib"]) / max(p["measured_mib"], 1e-9) for p in at)
        lines.append(f"| {c} | {getattr(graph, c)} | {len(at)} ({', '.join(sorted({p['shape'] for p in at}))}) | "
                     f"{statistics.median(vals):.2f} [{min(vals):.2f}-{max(vals):.2f}] | {err:.1%} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print only; do not rewrite bench/data/graph_calibration.json")
    args = ap.parse_args()
    server = provision.find_server().path
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mtp-tune-cal-") as tmp:
        points = measure(Path(server), Path(tmp))
    took = time.monotonic() - t0
    worst = sorted((p for p in points if "implied" in p),
                   key=lambda p: -abs(p["estimate_mib"] - p["measured_mib"]) / max(p["measured_mib"], 1e-9))[:2]
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join([
        f"### {stamp}, commit {_commit()}", "",
        f"`python bench/calibrate_graph.py`: {len(points)} exact-mode dry runs (llama.cpp's own compute buffer, CPU "
        f"backend) on the calibration shapes only ({', '.join(SHAPES)}), {took:.0f} s; every point in "
        "`bench/data/graph_calibration.json`. Each configuration's peak block (under the committed constants) and "
        "the constant its measured buffer implies:", "", *summary(points), "",
        "Largest misses: " + "; ".join(f"{p['shape']} `{' '.join(p['args'])}`: estimate {p['estimate_mib']:.1f} MiB, "
                                       f"llama.cpp {p['measured_mib']:.1f} MiB ({p['peak']})" for p in worst) + ".",
    ])
    publish("## Estimate calibration: graph.py's constants (issue 22)", text, write=not args.no_write)
    if not args.no_write:
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text(json.dumps({"shapes": list(SHAPES), "configs": [list(c) for c in CONFIGS], "points": points},
                                   indent=1) + "\n")
        print(f"wrote {DATA.relative_to(ROOT)}")
    return 0


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


if __name__ == "__main__":
    raise SystemExit(main())
