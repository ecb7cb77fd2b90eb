"""Start-up of the CLI: `mtp-tune plan` (the estimate, no --exact) on the shape-only Qwen3.6-35B-A3B GGUF,
and `--version`, `--help`, `plan --help`. Each command runs in a fresh interpreter (as the console script
does), with its bytecode cached as an installed package has it (PYTHONDONTWRITEBYTECODE is dropped and the
.pyc files go to a temp PYTHONPYCACHEPREFIX); wall-clock and CPU (user + system) medians of --runs runs,
plus `python -X importtime`'s total and whether a heavy module (the server supervisor, httpx, textual,
huggingface_hub, numpy, rich) was imported. On a shared machine the CPU time is the steadier figure. Goal: the estimate
plan at or under 0.2 s. Appends to bench/RESULTS.md under "## CLI start-up".

    .venv/bin/python bench/bench_plan_startup.py [--runs 5] [--label before|after] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _results import publish  # noqa: E402

from tests.helpers.shapemodel import write_shape_model  # noqa: E402

HEADING = "## CLI start-up"
#: what the console script runs (tui.cli:main), in a fresh interpreter
ENTRY = "import sys; from tui.cli import main; raise SystemExit(main(sys.argv[1:]))"
HEAVY = ("tui.core.server.supervisor", "httpx", "textual", "huggingface_hub", "numpy", "rich")


def commands(model: Path, fresh: Path) -> dict[str, list[str]]:
    """The measured command lines (mtp-tune's arguments) by label. `model` is dated back an hour, as a
    downloaded model is (its parsed header is cached after the first plan); `fresh` was just written, so
    every run walks its header (what the first plan of a model costs)."""
    return {
        "plan -m 35B-shape.gguf (estimate, GPUs detected)": ["plan", "-m", str(model)],
        "plan -m 35B-shape.gguf (estimate, GPUs detected), a file written just now": ["plan", "-m", str(fresh)],
        "plan -m 35B-shape.gguf --gpus 24GiB -c 32768 --spec-type draft-mtp":
            ["plan", "-m", str(model), "--gpus", "24GiB", "-c", "32768", "--spec-type", "draft-mtp"],
        "--version": ["--version"],
        "--help": ["--help"],
        "plan --help": ["plan", "--help"],
    }


def timed(argv: list[str], runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) per run, the whole process (interpreter start, imports, the command, exit)."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", ENTRY, *argv], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def imports(argv: list[str], env: dict[str, str]) -> tuple[float, int, list[str]]:
    """`-X importtime`: (seconds importing, modules imported, the heavy ones among them)."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", ENTRY, *argv], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False).stderr
    rows = [line.split("|") for line in err.splitlines() if line.startswith("import time:") and "cumulative" not in line]
    names = [r[2].strip() for r in rows]
    # a top-level row's cumulative time includes everything it imported: their sum is the import time
    total_us = sum(int(r[1]) for r in rows if not r[2].startswith("  "))
    heavy = [h for h in HEAVY if h in names]
    return total_us / 1e6, len(names), heavy


def git_head() -> str:
    """The short commit measured ("" outside a checkout), and whether tui/ differs from it."""
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return ""
    dirty = subprocess.run(["git", "status", "--porcelain", "tui"], cwd=ROOT, capture_output=True, text=True,
                           check=False).stdout.strip()
    return r.stdout.strip() + (" + uncommitted changes under tui/" if dirty else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--label", default="", help="a word for the heading (before, after)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mtp-bench-startup-"))
    model = write_shape_model(tmp / "qwen36-35b-a3b-shape.gguf")
    fresh = write_shape_model(tmp / "fresh" / "qwen36-35b-a3b-shape.gguf")
    hour_ago = time.time() - 3600
    os.utime(model, (hour_ago, hour_ago))
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPATH": str(ROOT),
           "PYTHONPYCACHEPREFIX": str(tmp / "pycache"), "MTP_TUNE_HEADER_DIR": str(tmp / "headers")}
    rows = []
    for label, argv in commands(model, fresh).items():
        timed(argv, 1, env)  # warm up: the page cache, the .pyc files, the settled model's parsed header
        walls, cpus = timed(argv, a.runs, env)
        secs, count, heavy = imports(argv, env)
        med = statistics.median
        rows.append(f"| `mtp-tune {label}` | {med(walls):.3f} | {min(walls):.3f} | {med(cpus):.3f} | {secs:.3f} | "
                    f"{count} | {', '.join(heavy) or 'none'} |")
    text = "\n".join([
        f"### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}{', ' + a.label if a.label else ''}"
        f"{', commit ' + head if (head := git_head()) else ''}",
        "",
        f"Command: `.venv/bin/python bench/bench_plan_startup.py` on {platform.node() or 'this machine'} "
        f"({os.cpu_count()} cores, shared; load average {os.getloadavg()[0]:.1f} at the start), Python {platform.python_version()}; wall clock of a fresh interpreter, "
        f"{a.runs} runs after one warm-up, bytecode cached; imports from one `-X importtime` run (which adds its own "
        "overhead).",
        "",
        "| command | wall median s | wall min s | CPU median s | importing s | modules | heavy modules imported |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ])
    publish(HEADING, text, write=not a.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
