"""Planning a model that is not on this disk: bytes and wall time to plan the Qwen3.6-35B-A3B shape
(a 20 GB-class GGUF, ~5 MB header) served over loopback, by estimate and by exact mode.

The real Hugging Face Hub is not reached (no machine here can): the shape-only GGUF is served from
127.0.0.1 by tests/helpers/range_server.py, as a static file (`-mu URL`) and behind the Hub's routes
(`-hf REPO:QUANT` with HF_ENDPOINT), with HEAD, Range and the Hub's 302 to storage. Each cold run
starts from an empty header cache. Goals (issue 20): estimate <= 1 s, exact <= 3 s, bytes fetched
<= 1.2x the header. Timed in-process (the plan a TUI keystroke or a CLI run does after Python has
started) and through the real `mtp-tune plan` command (Python start and imports included).
Appends to bench/RESULTS.md.

    .venv/bin/python bench/bench_remote.py [--runs 5] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import publish  # noqa: E402

from tests.helpers.range_server import serve  # noqa: E402
from tests.helpers.shapemodel import write_shape_model  # noqa: E402
from tui.core.options.argv import settings_from_argv  # noqa: E402
from tui.core.planning.exact import exact_plan  # noqa: E402
from tui.core.planning.gguf_reader import read_gguf  # noqa: E402
from tui.core.planning.plan import plan  # noqa: E402
from tui.core.remote.fetch import fetch_model  # noqa: E402
from tui.core.remote.source import local_settings, source_of  # noqa: E402
from tui.core.server import provision  # noqa: E402

HEADING = "## Planning before download (issue 20)"
REPO = "bench/Qwen3.6-35B-A3B-GGUF"
FILE = "Qwen3.6-35B-A3B-Q4_K_M.gguf"
FLAGS = ["-c", "100000", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0", "--spec-type", "draft-mtp"]


def stats(xs: list[float], unit: str = "s", scale: float = 1.0) -> str:
    v = [x * scale for x in xs]
    return f"{statistics.median(v):.2f} {unit} (min {min(v):.2f}, max {max(v):.2f})"


def settings_for(args: list[str]):  # noqa: ANN201
    return settings_from_argv(args).settings


def one_plan(args: list[str], cache: Path, server: Path | None) -> dict[str, float]:
    """A cold plan from an empty cache: fetch the header, estimate; then exact on the header copy."""
    os.environ["MTP_TUNE_REMOTE_DIR"] = str(cache)
    s = settings_for(args)
    t0 = time.perf_counter()
    got = fetch_model(source_of(s))  # type: ignore[arg-type]
    local = local_settings(s, got.path)
    meta = read_gguf(got.path)
    plan(meta, local, [], host_total_mib=131072, host_free_mib=120000)
    t_est = time.perf_counter() - t0
    out = {"estimate": t_est, "bytes": float(got.traffic.bytes), "requests": float(got.traffic.requests),
           "header": float(got.header_bytes)}
    if server is not None:
        t1 = time.perf_counter()
        res = exact_plan(local, [], server, meta=meta, use_cache=False, root=cache / "exact")
        out["exact_only"] = time.perf_counter() - t1
        out["exact"] = t_est + out["exact_only"]
        assert res.available, res.reason
    t2 = time.perf_counter()  # the second plan: from the cache, no request
    again = fetch_model(source_of(s))  # type: ignore[arg-type]
    plan(read_gguf(again.path), local_settings(s, again.path), [], host_total_mib=131072, host_free_mib=120000)
    out["cached"] = time.perf_counter() - t2
    out["cached_requests"] = float(again.traffic.requests)
    return out


def cli_plan(args: list[str], cache: Path, env: dict[str, str], exact: bool) -> float:
    e = {**env, "MTP_TUNE_REMOTE_DIR": str(cache), "MTP_TUNE_EXACT_DIR": str(cache / "exact")}
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "tui.cli", "plan", *args, "--gpus", "2x16GiB", "--json",
                          *(["--exact"] if exact else [])], env=e, capture_output=True, text=True, timeout=300, cwd=ROOT)
    dt = time.perf_counter() - t
    if out.returncode not in (0, 1):
        raise SystemExit(f"mtp-tune plan failed: {out.stderr}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    server = provision.cached_server()
    load0 = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="mtp-bench-remote-"))
    shape = write_shape_model(tmp / FILE)
    size = shape.stat().st_size
    rows: list[tuple[str, str, str]] = []
    with serve() as hub:
        url = hub.add_file(FILE, shape)
        hub.add_repo(REPO, {FILE: shape})
        os.environ["HF_ENDPOINT"] = hub.url
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
        for label, args in (("-mu URL", ["-mu", url]), ("-hf REPO:Q4_K_M", ["-hf", f"{REPO}:Q4_K_M"])):
            runs = []
            for i in range(a.runs):
                hub.clear()
                r = one_plan([*args, *FLAGS], tmp / f"cache-{label[:3]}-{i}", server)
                r["served"] = float(hub.bytes_sent())
                runs.append(r)
            header = runs[0]["header"]
            fetched = runs[0]["served"]
            rows.append((f"{label}: estimate, cold (list, read header, plan)", stats([r["estimate"] for r in runs]), "<= 1 s"))
            if server is not None:
                rows.append((f"{label}: exact, cold (the estimate + llama.cpp's dry run of the header copy)",
                             stats([r["exact"] for r in runs]), "<= 3 s"))
            rows.append((f"{label}: second plan (cache, {int(runs[0]['cached_requests'])} requests)",
                         stats([r["cached"] for r in runs], "ms", 1000), ""))
            rows.append((f"{label}: bytes served / header bytes",
                         f"{fetched / 2**20:.2f} / {header / 2**20:.2f} MiB = {fetched / header:.3f}x "
                         f"in {int(runs[0]['requests'])} range requests", "<= 1.2x"))
            for exact in (False, True):
                if exact and server is None:
                    continue
                ts = [cli_plan([*args, *FLAGS], tmp / f"cli-{label[:3]}-{exact}-{i}", env, exact) for i in range(a.runs)]
                rows.append((f"{label}: `mtp-tune plan{' --exact' if exact else ''}` command, cold, Python start included",
                             stats(ts), ""))
    load1 = os.getloadavg()[0]
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    out = [f"### {stamp}, commit {commit}", "",
           f"The Qwen3.6-35B-A3B shape ({size / 2**30:.1f} GiB apparent, header {header / 2**20:.2f} MiB) over loopback "
           f"(tests/helpers/range_server.py; the real Hub was not reached); flags `{' '.join(FLAGS)}`; {a.runs} cold runs "
           f"each, median (min, max); {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
           f"load {load0:.1f} -> {load1:.1f}.", "",
           "| measure | result | goal |", "|---|---|---|"]
    out += [f"| {m} | {r} | {g} |" for m, r, g in rows]
    publish(HEADING, "\n".join(out), write=not a.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
