"""Benchmark the TUI: time to the first frame, CPU while idling with live sampling and a plot, and the
server's TG with mtp-tune watching vs not (paired runs).

Goals (issue 8): idle < 2 % of one core; first frame < 1 s; TG with mtp-tune watching within 1 %
(paired: the same `mtp-tune --attach` process running vs frozen with SIGSTOP, alternating).
Everything runs for real: `mtp-tune` in a private tmux server (a real terminal), the demo's CPU
llama-server. Appends to bench/RESULTS.md under "## TUI".

    .venv/bin/python bench/bench_ui.py [--starts 5] [--idle-seconds 20] [--pairs 6] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _results import publish  # noqa: E402

HEADING = "## TUI"
RESULTS = ROOT / "bench" / "RESULTS.md"
MTP_TUNE = Path(sys.executable).parent / "mtp-tune"
TICKS = os.sysconf("SC_CLK_TCK")
SUITE = """\
name = "bench-short"
[[prompts]]
name = "colours"
prompt = "Name three colours of the rainbow."
[[prompts]]
name = "capital"
prompt = "What is the capital of France?"
"""
N_PREDICT = 256
REQUESTS = 2
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


class Term:
    """`mtp-tune` in its own tmux server: a real terminal, nothing shared with the user's tmux."""

    def __init__(self, root: Path, env: dict[str, str], args: list[str]) -> None:
        self.sock = root / f"tmux-{uuid.uuid4().hex[:6]}.sock"
        self.session = "bench"
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        self.command = f"exec env -i {envs} {shlex.join([str(MTP_TUNE), *args])}"

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", str(self.sock), *args], capture_output=True, text=True,
                              timeout=20, check=True).stdout

    def start(self) -> float:
        t0 = time.monotonic()
        self.tmux("new-session", "-d", "-s", self.session, "-x", "120", "-y", "40", self.command)
        return t0

    def screen(self) -> str:
        try:
            return self.tmux("capture-pane", "-p", "-t", self.session)
        except subprocess.CalledProcessError:
            return ""

    def wait(self, needle: str, timeout: float, poll: float = 0.01) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.screen():
                return time.monotonic()
            time.sleep(poll)
        raise SystemExit(f"bench_ui: {needle!r} did not appear in {timeout} s:\n{self.screen()}")

    def pid(self) -> int:
        return int(self.tmux("display", "-p", "-t", self.session, "#{pane_pid}").strip())

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.session, *keys)

    def close(self) -> None:
        subprocess.run(["tmux", "-S", str(self.sock), "kill-server"], capture_output=True, timeout=20)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def base_env(root: Path, server: Path) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "xterm-256color", "COLORTERM": "truecolor",
        "HOME": os.environ.get("HOME", str(root)), "MTP_TUNE_LLAMA_SERVER": str(server),
        "MTP_TUNE_CONFIG_DIR": str(root / "config"), "MTP_TUNE_DATA_DIR": str(root / "data"),
        "XDG_CONFIG_HOME": str(root / "xdg"), "LLAMA_CACHE": str(root / "llama-cache"),
    }
    if "MTP_TUNE_CACHE_DIR" in os.environ:
        env["MTP_TUNE_CACHE_DIR"] = os.environ["MTP_TUNE_CACHE_DIR"]
    return env


def bench_startup(root: Path, env: dict[str, str], starts: int) -> list[float]:
    """Process start -> the first complete frame on the terminal (VRAM panel and server state drawn)."""
    out = []
    for _ in range(starts):
        term = Term(root, env, ["--demo", "--no-launch"])
        try:
            t0 = term.start()
            t1 = term.wait("STOPPED", 30)
            out.append(t1 - t0)
            term.keys("q")
        finally:
            term.close()
    return out


BREAKDOWN = r"""
import asyncio, json, time
t0 = time.perf_counter()
import tui.cli
tui.cli._commands()
t1 = time.perf_counter()
import textual.app
from textual.widgets import Button, DataTable, Footer, Header, Input, Label, ProgressBar, Select, Static, Switch
t2 = time.perf_counter()
import tui.ui.app
from tui.cli._app_options import demo_settings
from tui.ui.options import AppOptions
t3 = time.perf_counter()
from tui.core.demo.prepare import prepare_demo
setup = prepare_demo()
t4 = time.perf_counter()

async def first_frame():
    app = tui.ui.app.make_app(AppOptions(settings=demo_settings(setup.model), server_bin=setup.server,
                                         hardware=setup.hardware, simulate=True))
    async with app.run_test(size=(120, 40)) as pilot:
        mounted = time.perf_counter()
        await pilot.pause()
        return mounted, time.perf_counter()

t5, t6 = asyncio.run(first_frame())
print(json.dumps({"cli discovery (all subcommand modules)": t1 - t0, "textual and its widgets": t2 - t1,
                  "tui.ui (ours)": t3 - t2, "prepare_demo": t4 - t3, "compose and mount (first frame)": t5 - t4,
                  "after the first frame (rest of the form, plots, sampler)": t6 - t5}))
"""


def bench_breakdown(runs: int) -> dict[str, list[float]]:
    """Where the start-up goes, in a fresh interpreter each time (in-process clocks)."""
    import json

    out: dict[str, list[float]] = {}
    for _ in range(runs):
        res = subprocess.run([sys.executable, "-c", BREAKDOWN], capture_output=True, text=True, cwd=ROOT,
                             timeout=120, check=True)
        for k, v in json.loads(res.stdout.strip().splitlines()[-1]).items():
            out.setdefault(k, []).append(v)
    return out


def bench_idle(root: Path, env: dict[str, str], seconds: float) -> dict[str, float]:
    """CPU of the mtp-tune process over `seconds` of idling: server running, sampler at 1 Hz, a plot with data."""
    suite = root / "bench-short.toml"
    suite.write_text(SUITE)
    term = Term(root, env, ["--demo", "--suite", str(suite), "--probe-repeat", "2", "--probe-n-predict", "16"])
    try:
        term.start()
        term.wait("READY", 60, poll=0.1)
        term.keys("p")
        term.wait("ok: ", 300, poll=0.2)
        pid = term.pid()
        time.sleep(2.0)  # let the last redraws settle before the window opens
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(seconds)  # the measurement window itself
        c1, t1 = cpu_seconds(pid), time.monotonic()
        term.keys("q")
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        term.close()
    return {"cpu_s": c1 - c0, "wall_s": t1 - t0, "percent": 100.0 * (c1 - c0) / (t1 - t0)}


async def _tg(url: str, n: int) -> list[float]:
    from tui.core.server.client import LlamaClient

    out = []
    async with LlamaClient(url) as c:
        for _ in range(n):
            r = await c.complete(PROMPT, n_predict=N_PREDICT, temperature=0.0, seed=42, cache_prompt=False)
            out.append(float(r.timings["predicted_per_second"]))
    return out


def bench_watching(root: Path, env: dict[str, str], server: Path, model: Path, pairs: int) -> dict[str, object]:
    """TG of one server with `mtp-tune --attach URL` watching it, vs the same process frozen (SIGSTOP).

    Freezing instead of quitting keeps everything else identical and lets the two sides alternate
    request by request (paired, order alternating), so drift of the shared machine cancels out.
    """
    import signal

    from tui.core.options.argv import settings_from_argv
    from tui.core.server.supervisor import Supervisor

    args = ["-m", str(model), "-c", "4096", "-np", "1", "-t", "1", "-tb", "1", "--metrics",
            "--spec-type", "draft-mtp"]
    off: list[float] = []
    on: list[float] = []
    pair_diffs: list[float] = []
    watcher_cpu: list[float] = []
    with Supervisor(server, settings_from_argv(args).settings, log_dir=root / "logs") as sup:
        sup.start()
        if sup.wait_ready(60).value != "ready":
            raise SystemExit(f"bench_ui: the server did not start: {sup.failure}")
        url = sup.base_url
        asyncio.run(_tg(url, 2))  # warm-up
        term = Term(root, env, ["--attach", url])
        try:
            term.start()
            term.wait("READY", 30, poll=0.1)
            time.sleep(5.0)  # start-up work done; sampling and polling in full swing
            pid = term.pid()
            for i in range(pairs):
                results: dict[str, float] = {}
                for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
                    os.kill(pid, signal.SIGSTOP if mode == "off" else signal.SIGCONT)
                    if mode == "on":
                        time.sleep(1.0)  # let it catch up on what it missed while frozen
                    c0, t0 = cpu_seconds(pid), time.monotonic()
                    results[mode] = statistics.median(asyncio.run(_tg(url, REQUESTS)))
                    if mode == "on":
                        watcher_cpu.append(100.0 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0))
                os.kill(pid, signal.SIGCONT)
                off.append(results["off"])
                on.append(results["on"])
                pair_diffs.append(100.0 * (results["on"] - results["off"]) / results["off"])
            term.keys("q")
        finally:
            try:
                os.kill(term.pid(), signal.SIGCONT)
            except (OSError, subprocess.CalledProcessError, ValueError):
                pass
            term.close()
    return {"off": off, "on": on, "pair_diffs": pair_diffs, "watcher_cpu": watcher_cpu}


def fmt(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} (min {min(values):.{digits}f}, max {max(values):.{digits}f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("bench_ui: tmux is required")

    from tui.core.demo.prepare import prepare_demo

    setup = prepare_demo()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="mtp-bench-ui-") as tmp:
        root = Path(tmp)
        env = base_env(root, setup.server)
        starts = bench_startup(root, env, args.starts)
        print(f"first frame: {fmt(starts, 3)} s")
        breakdown = bench_breakdown(3)
        for k, v in breakdown.items():
            print(f"  {k}: {fmt(v, 3)} s")
        idle = bench_idle(root, env, args.idle_seconds)
        print(f"idle: {idle['percent']:.2f} % of one core ({idle['cpu_s']:.2f} s CPU in {idle['wall_s']:.1f} s)")
        watch = bench_watching(root, env, setup.server, setup.model, args.pairs)
        off, on, diffs, wcpu = watch["off"], watch["on"], watch["pair_diffs"], watch["watcher_cpu"]
        print(f"TG off {fmt(off)} on {fmt(on)}; paired diffs {', '.join(f'{d:+.1f}' for d in diffs)} %")

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = f"""
### {now}

Command: `{shlex.join([Path(sys.executable).name, *sys.argv])}`  
Machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, load average
{load:.2f} at start (other work shares the machine: wall times include preemption). Everything real:
`mtp-tune` in a private tmux server (120x40), the demo's CPU llama-server and model ({setup.model.name}).

| measure | result | goal |
|---|---|---|
| process start -> first complete frame (`mtp-tune --demo --no-launch`, {len(starts)} starts), s | {fmt(starts, 3)} | < 1 s |
| CPU of mtp-tune idling {idle['wall_s']:.0f} s (server ready, sampler 1 Hz, plots with data) | **{idle['percent']:.2f} %** of one core ({idle['cpu_s']:.2f} s) | < 2 % |
| server TG, the watching mtp-tune frozen (SIGSTOP) ({len(off)} x median of {REQUESTS} requests, {N_PREDICT} tokens), t/s | {fmt(off)} | |
| server TG, `mtp-tune --attach` watching (same process, running), t/s | {fmt(on)} | |
| CPU of the watching mtp-tune during those requests, % of one core | {fmt(wcpu, 2)} | |
| paired difference (watching - not), % | median {statistics.median(diffs):+.2f} (pairs: {', '.join(f'{d:+.1f}' for d in diffs)}) | within 1 % |

Start-up breakdown (fresh interpreter, in-process clocks, median of 3, s):

| part | time |
|---|---|
""" + "".join(f"| {k} | {fmt(v, 3)} |\n" for k, v in breakdown.items())
    publish(HEADING, section, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
