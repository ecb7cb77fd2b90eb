"""Wall time of a 2x2 sweep (MTP on/off x ubatch 256/512) on the demo model, from the CLI.

The same grid the tmux end-to-end test runs from the TUI's sweep screen (tests/test_ui_e2e_tuning.py
prints its wall time): every row is a real launch of the demo's CPU llama-server, a first-decode
check, and probe passes over a two-prompt suite. Appends to bench/RESULTS.md under "## Sweep".

    .venv/bin/python bench/bench_sweep.py [--repeat 2] [--n-predict 24] [--threads 1] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import publish  # noqa: E402
from bench_ui import SUITE, base_env  # noqa: E402

HEADING = "## Sweep"
MTP_TUNE = Path(sys.executable).parent / "mtp-tune"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="passes per row (default 2, as the e2e test)")
    parser.add_argument("--n-predict", type=int, default=24, help="tokens per request (default 24)")
    parser.add_argument("--threads", type=int, default=1, help="llama-server -t (default 1)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    from tui.core.demo.prepare import prepare_demo

    setup = prepare_demo()
    load = os.getloadavg()[0]
    started = dt.datetime.now(dt.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="mtp-bench-sweep-") as tmp:
        root = Path(tmp)
        env = base_env(root, setup.server)
        suite = root / "soak.toml"
        suite.write_text(SUITE)
        argv = [str(MTP_TUNE), "sweep", "-m", str(setup.model), "-c", "8192", "-t", str(args.threads),
                "--spec-type", "draft-mtp", "--spec-draft-n-max", "3",
                "--axis", "mtp=on,off", "--axis", "ub=256,512", "--suite", str(suite),
                "--repeat", str(args.repeat), "--n-predict", str(args.n_predict), "--db", str(root / "r.sqlite")]
        t0 = time.monotonic()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"bench_sweep: the sweep failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    best = next((ln.strip() for ln in done.stdout.splitlines() if re.match(r"\s*best", ln, re.I)), "(no best line)")
    rows = len(re.findall(r"^\s*\d+\s", done.stdout, re.M))
    shown = [shlex.quote(a) if not a.startswith(str(root)) else Path(a).name for a in argv[1:]]
    section = f"""
### {started.strftime('%Y-%m-%d %H:%M UTC')}

Command: `{shlex.join([Path(sys.executable).name, *sys.argv])}`, which runs `mtp-tune {' '.join(shown)}`.
Machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load:.2f} at
start. Model: the demo's {setup.model.name}, real CPU llama-server.

| measure | result |
|---|---|
| 2x2 sweep wall time (4 launches, first-decode checks, {args.repeat} passes of 2 prompts x {args.n_predict} tokens each) | **{wall:.1f} s** |
| per row | {wall / 4:.1f} s |
| rows printed | {rows} |
| best | {best} |
"""
    print(done.stdout)
    publish(HEADING, section, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
