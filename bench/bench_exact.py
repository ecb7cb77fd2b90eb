"""Exact mode: time of llama.cpp's --fit dry run (cold and cached) for the shape-only Qwen3.6-35B-A3B
GGUF, and exact-vs-real agreement (the real load through the Supervisor, parsed by memreport).
Goals: dry run < 3 s for the 35B shape on 2 cores; exact == real within 1 MiB per component.
Appends to bench/RESULTS.md.

    .venv/bin/python bench/bench_exact.py [--runs 5] [--no-real-shape] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _results import publish  # noqa: E402

from tests.helpers.archshapes import write_arch_shape  # noqa: E402
from tests.helpers.launch import probe_launch  # noqa: E402
from tests.helpers.shapemodel import write_shape_model  # noqa: E402
from tui.core.server import provision  # noqa: E402
from tui.core.options.argv import settings_from_argv  # noqa: E402
from tui.core.planning.devices import DeviceSpec  # noqa: E402
from tui.core.planning.dryrun import dry_run_args, run_dry  # noqa: E402
from tui.core.planning.exact import exact_plan  # noqa: E402
from tui.core.planning.gguf_reader import read_gguf  # noqa: E402
from tui.core.planning.reconcile import reconcile  # noqa: E402
from tui.core.planning.sparse import sparse_copy  # noqa: E402
from tui.core.planning.standin import RpcServers  # noqa: E402
from tui.core.demo.tiny_model import PRESETS, write_tiny_model  # noqa: E402

HEADING = "## Exact mode (issue 13)"
ARCHS = ("gemma3-1b", "gemma3-4b", "deepseek-v2-lite", "glm47-flash", "glm45-air", "qwen3-next-80b")
REAL_ARCHS = ("gemma3-1b", "gemma3-4b", "deepseek-v2-lite", "glm47-flash")  # the 44-76 GB ones: dry run only
SHAPE_ARGS = ["-c", "100000", "-ub", "1024", "-ctk", "q4_0", "-ctv", "q4_0", "--spec-type", "draft-mtp"]
COMMON = ["-t", "1", "-tb", "1", "--no-warmup"]
TINY = {
    "tiny-mtp -c 4096 -np 1": ("tiny-mtp", ["-c", "4096", "-np", "1", "--spec-type", "draft-mtp"]),
    "tiny-moe-mtp 3 slots, quantized KV": ("tiny-moe-mtp", ["-c", "8000", "-np", "3", "-ub", "256", "--spec-type", "draft-mtp",
                                                            "-ctk", "q8_0", "-ctv", "q4_0", "-ctkd", "q8_0", "-ctvd", "q4_0"]),
    "tiny-mtp-q8_0 auto slots, n-max 5": ("tiny-mtp-q8_0", ["-c", "16384", "-ub", "128", "--spec-type", "draft-mtp",
                                                            "--spec-draft-n-max", "5"]),
    "tiny-nomtp -fa off": ("tiny-nomtp", ["-c", "2048", "-np", "2", "-ub", "64", "-fa", "off"]),
    "tiny-mtp --fit off, ctx unset": ("tiny-mtp", ["-np", "2", "--spec-type", "draft-mtp", "-fit", "off"]),
}


def stats(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} (min {min(xs):.2f}, max {max(xs):.2f})"


def worst(rec, compute_only: bool | None = None) -> float:  # noqa: ANN001
    ds = [d for d in rec.diffs if compute_only is None or (d.component in ("compute", "draft_compute")) == compute_only]
    return max((abs(d.error_mib) for d in ds), default=0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-real-shape", action="store_true", help="skip the ~1 min real load of the 35B shape")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    server = provision.cached_server()
    if server is None:
        print("no cached llama-server: run `mtp-tune doctor --build`", file=sys.stderr)
        return 2
    rpc_bin = server.parent / "ggml-rpc-server"
    load0 = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="mtp-bench-exact-"))
    rows: list[tuple[str, str, str]] = []
    agree: list[tuple[str, str, str, str]] = []
    try:
        shape = write_shape_model(tmp / "qwen36-35b-a3b-shape.gguf")
        meta = read_gguf(shape)
        for label, extra in (("-np auto (4 slots)", []), ("-np 1", ["-np", "1"])):
            s = settings_from_argv(["-m", str(shape), *SHAPE_ARGS, *extra]).settings
            cold, fit_s = [], []
            for i in range(a.runs):
                root = tmp / f"cold-{label}-{i}"  # a fresh cache: sparse copy, dry run, plan
                t = time.perf_counter()
                res = exact_plan(s, [], server, meta=meta, use_cache=True, root=root)
                cold.append(time.perf_counter() - t)
                assert res.available, res.reason
            cached = []
            for _ in range(20):
                t = time.perf_counter()
                res = exact_plan(s, [], server, meta=meta, root=root)
                cached.append((time.perf_counter() - t) * 1000)
                assert res.cached
            copy = sparse_copy(meta, root)
            for _ in range(a.runs):  # fit's own "took" line comes after the stop now: time the run itself
                t = time.perf_counter()
                log, _ = run_dry(server, dry_run_args(s, copy), timeout_s=60, cancel=None, log_dir=tmp / "logs")
                fit_s.append(time.perf_counter() - t)
                assert log.fit.finished, "the dry run ended before fit's decision"
            rows.append((f"35B shape {label}: exact dry run, cold (process start to plan), s", stats(cold), "< 3 s"))
            rows.append((f"35B shape {label}: of which the dry run (spawn to fit's decision, stopped there), s", stats(fit_s), ""))
            rows.append((f"35B shape {label}: cached, ms", stats(cached), ""))
        # two simulated 24 GiB GPUs played by loopback stand-ins (fit changes nothing) and two 12 GiB (fit moves layers)
        for gib in (24, 12):
            devs = [DeviceSpec(f"CUDA{i}", "simulated", gib * 1024, gib * 1024 - 300) for i in range(2)]
            s = settings_from_argv(["-m", str(shape), *SHAPE_ARGS, "-np", "1"]).settings
            t = time.perf_counter()
            res = exact_plan(s, devs, server, meta=meta, stand_in=True, rpc_bin=rpc_bin, use_cache=False, root=tmp / "si",
                             timeout_s=300)
            dt = time.perf_counter() - t
            what = (f"{res.runs} dry run(s), fit: {' '.join(res.fit.flags()) or 'no change'}" if res.available
                    else f"unavailable: {res.reason}")
            if res.fit is not None and len(what) > 160:
                what = what[:157] + "..."
            rows.append((f"35B shape -np 1 on 2x{gib} GiB simulated (stand-ins), s", f"{dt:.2f}", what))
        # agreement with the real allocation
        for label, (preset, args) in TINY.items():
            model = tmp / f"{preset}.gguf"
            if not model.exists():
                write_tiny_model(model, PRESETS[preset])
            s = settings_from_argv(["-m", str(model), *args]).settings
            res = exact_plan(s, [], server, use_cache=False, root=tmp / "tiny")
            real = probe_launch(server, ["-m", str(model), *args, *COMMON], timeout_s=120)
            rec = reconcile(res.plan, real.report)  # type: ignore[arg-type]
            agree.append((label, "CPU", f"{worst(rec, False):.2f}", f"{worst(rec, True):.2f}"))
        with RpcServers(rpc_bin, 2) as rpc:
            model = tmp / "tiny-moe-mtp.gguf"
            args = ["-c", "4096", "-np", "2", "--spec-type", "draft-mtp", "-ts", "3,1"]
            devs = [DeviceSpec(f"CUDA{i}", "simulated", 24576, 20000) for i in range(2)]
            res = exact_plan(settings_from_argv(["-m", str(model), *args]).settings, devs, server, stand_in=True,
                             rpc_bin=rpc_bin, use_cache=False, root=tmp / "tiny")
            real = probe_launch(server, ["-m", str(model), *args, "--rpc", rpc.endpoints, *COMMON], timeout_s=120)
            for d, key in zip(res.plan.devices, rpc.keys):  # type: ignore[union-attr]
                d.key = key
            rec = reconcile(res.plan, real.report)  # type: ignore[arg-type]
            agree.append(("tiny-moe-mtp -ts 3,1, 2 simulated GPUs", "2 stand-ins vs 2 RPC", f"{worst(rec, False):.2f}",
                          f"{worst(rec, True):.2f}"))
        # other architectures (shape-only GGUFs): dry-run time, and agreement where a real load is affordable here
        for name in ARCHS:
            path = write_arch_shape(name, tmp / f"{name}.gguf")
            am = read_gguf(path)
            args = ["-c", "8192", "-np", "1", "-nr", *(["--spec-type", "draft-mtp"] if am.hparams.n_nextn else [])]
            s = settings_from_argv(["-m", str(path), *args]).settings
            t = time.perf_counter()
            res = exact_plan(s, [], server, meta=am, use_cache=False, root=tmp / "archs")
            dt = time.perf_counter() - t
            size = path.stat().st_size / 2**30
            rows.append((f"{name} ({am.hparams.arch}, {size:.1f} GiB{', MTP' if am.hparams.n_nextn else ''}) exact dry run, s",
                         f"{dt:.2f}", "" if res.available else res.reason))
            if res.available and name in REAL_ARCHS and not a.no_real_shape:
                real = probe_launch(server, ["-m", str(path), *args, *COMMON], timeout_s=300)
                rec = reconcile(res.plan, real.report)  # type: ignore[arg-type]
                agree.append((f"{name} ({am.hparams.arch}) -c 8192 -nr", "CPU", f"{worst(rec, False):.2f}", f"{worst(rec, True):.2f}"))
            path.unlink()
        if not a.no_real_shape:
            args = [*SHAPE_ARGS, "-np", "1", "-nr"]
            s = settings_from_argv(["-m", str(shape), *args]).settings
            res = exact_plan(s, [], server, meta=meta, use_cache=False, root=tmp / "shape-real")
            t = time.perf_counter()
            real = probe_launch(server, ["-m", str(shape), *args, *COMMON], timeout_s=300)
            real_s = time.perf_counter() - t
            rec = reconcile(res.plan, real.report)  # type: ignore[arg-type]
            agree.append((f"35B shape -np 1 -nr (real load {real_s:.0f} s)", "CPU", f"{worst(rec, False):.2f}",
                          f"{worst(rec, True):.2f}"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    text = [f"### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
            f"Command: `python bench/bench_exact.py --runs {a.runs}`  ",
            f"Machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
            f"{load0:.2f} at start (shared with other work). llama-server b11434 CPU build; the shape file is the "
            "sparse 19.5 GiB Qwen3.6-35B-A3B, measured through its header-only copy; `-lv 5 --log-jsonl`, stopped at "
            "fit's decision.", "",
            "| measure | result | goal / note |", "|---|---|---|"]
    text += [f"| {m} | {r} | {g} |" for m, r, g in rows]
    text += ["", "Exact vs what the real load then allocated (worst absolute error over devices, MiB):", "",
             "| case | devices | weights/KV/draft KV/recurrent/output | compute/draft compute |", "|---|---|---|---|"]
    text += [f"| {c} | {d} | {e} | {f} |" for c, d, e, f in agree]
    out = "\n".join(text)
    publish(HEADING, out, write=not a.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
