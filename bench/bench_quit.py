"""Time `q` from the keypress to the mtp-tune process gone: idle, and while a probe streams.

Goal (issue 14): within 1 s either way, with no llama-server left. Real terminal (a private tmux
server, 120x40), `mtp-tune --demo` and its CPU llama-server; "streaming" means the probe panel shows
a request in flight of a long generation. Appends to bench/RESULTS.md under "## Quit".

    .venv/bin/python bench/bench_quit.py [--tries 3] [--source DIR] [--label TEXT] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import publish  # noqa: E402
from bench_ui import Term, base_env  # noqa: E402

HEADING = "## Quit"


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _running(pid: int) -> bool:
    """Still running: a zombie has exited (tmux, its parent, reaps it when it gets round to it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def quit_time(root: Path, env: dict[str, str], streaming: bool) -> tuple[float, bool]:
    """Seconds from `q` (or, with a probe streaming, from the `y` that confirms it) to the process
    gone, and whether its llama-server is gone too."""
    term = Term(root, env, ["--demo", "--probe-repeat", "1", "--probe-n-predict", "4096"])
    try:
        term.start()
        term.wait("READY", 300, poll=0.2)
        pid = term.pid()
        servers = _children(pid)
        if streaming:
            term.keys("p")
            term.wait(", pass 1 (", 120, poll=0.05)  # a request in flight
            time.sleep(1.0)  # well into the stream (not at its first byte)
        if streaming:  # quitting with a probe in flight asks first: time from the answer
            term.keys("q")
            term.wait("Quit mtp-tune?", 30, poll=0.05)
        t0 = time.monotonic()
        wall0 = time.time()
        term.keys("y" if streaming else "q")
        sent = time.monotonic() - t0
        deadline = t0 + 30.0
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.005)
        elapsed = time.monotonic() - t0
        print(f"  q at {wall0:.3f} (tmux took {sent:.2f} s to send it), process gone at {wall0 + elapsed:.3f}",
              flush=True)
        time.sleep(0.2)
        left = [s for s in servers if Path(f"/proc/{s}").exists()]
        return elapsed, not left
    finally:
        term.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--source", type=Path, help="a directory holding the `tui` package to run instead")
    parser.add_argument("--label", default="")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("bench_quit: tmux is required")
    from tui.core.demo.prepare import prepare_demo

    setup = prepare_demo()
    results: dict[str, list[float]] = {"idle": [], "streaming": []}
    clean = True
    with tempfile.TemporaryDirectory(prefix="mtp-bench-quit-") as tmp:
        root = Path(tmp)
        env = base_env(root, setup.server)
        if args.source is not None:
            env["PYTHONPATH"] = str(args.source.resolve())
        for _ in range(args.tries):
            for mode in ("idle", "streaming"):
                t, gone = quit_time(root, env, mode == "streaming")
                results[mode].append(t)
                clean = clean and gone
                print(f"{mode}: {t:.2f} s, server gone: {gone}", flush=True)

    def fmt(v: list[float]) -> str:
        return f"{statistics.median(v):.2f} (min {min(v):.2f}, max {max(v):.2f})"

    label = f" ({args.label})" if args.label else ""
    section = f"""
### {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}{label}

Command: `{shlex.join([Path(sys.executable).name, *sys.argv])}`  
`mtp-tune --demo` in tmux, {args.tries} tries each, {os.cpu_count()} CPUs shared with other work; keypress to
process ended (exited, even if tmux has not reaped it yet). llama-server left afterwards: {'none' if clean else 'YES (a bug)'}.

| case | q -> exit, s | goal |
|---|---|---|
| idle (server ready) | {fmt(results['idle'])} | < 1 s |
| a probe streaming (4096-token generation in flight) | {fmt(results['streaming'])} | < 1 s |
"""
    publish(HEADING, section, write=not args.no_write)
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
