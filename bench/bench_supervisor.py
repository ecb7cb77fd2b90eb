"""Supervisor timings with the real llama-server and the tiny MTP model.

Measures, over N launches (default 10) of `tiny-mtp` with `--spec-type draft-mtp -t 1 -tb 1`:
* launch -> ready: from `Supervisor.start()` to the READY state (what a user waits for), split into
  the server's own time to its "listening" log line and the supervisor's detection delay after it;
* stop latency: `Supervisor.stop()` call -> returned (SIGTERM, exit, process reaped, STOPPED), and
  until the port refuses connections;
* restart: `restart()` with another --spec-draft-n-max -> READY.
Appends the results, with the date and the command, to bench/RESULTS.md under "## Supervisor".

Usage: python bench/bench_supervisor.py [--launches N] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _results import append_under  # noqa: E402

from tui.core.options.argv import settings_from_argv  # noqa: E402
from tui.core.server.provision import ensure_server  # noqa: E402
from tui.core.server.events import ServerState  # noqa: E402
from tui.core.server.supervisor import Supervisor  # noqa: E402
from tui.core.demo.tiny_model import preset, write_tiny_model  # noqa: E402

RESULTS = ROOT / "bench" / "RESULTS.md"
HEADING = "## Supervisor"
ARGS = ["-c", "4096", "-np", "1", "-t", "1", "-tb", "1", "--metrics", "--spec-type", "draft-mtp"]


def refused_after(host: str, port: int, t0: float, limit: float = 5.0) -> float | None:
    """Seconds from t0 until connecting to host:port is refused (None if still accepted after limit)."""
    while time.monotonic() - t0 < limit:
        with socket.socket() as s:
            if s.connect_ex((host, port)) != 0:
                return time.monotonic() - t0
    return None


def stats(xs: list[float]) -> str:
    ms = sorted(x * 1000 for x in xs)
    return (f"{statistics.median(ms):.1f} | {ms[0]:.1f} | {ms[-1]:.1f} | "
            f"{statistics.quantiles(ms, n=10, method='inclusive')[-1] if len(ms) >= 2 else ms[0]:.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=10)
    ap.add_argument("--no-write", action="store_true", help="print only, do not append to RESULTS.md")
    a = ap.parse_args()

    server = ensure_server().path
    work = Path(tempfile.mkdtemp(prefix="bench-supervisor-"))
    model = write_tiny_model(work / "tiny-mtp.gguf", preset("tiny-mtp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    env["XDG_CONFIG_HOME"] = str(work / "xdg")
    env["LLAMA_CACHE"] = str(work / "llama-cache")
    load_start = os.getloadavg()[0]

    to_ready: list[float] = []
    server_part: list[float] = []
    detect: list[float] = []
    stop_lat: list[float] = []
    refused: list[float] = []
    restart_ready: list[float] = []
    sup = Supervisor(server, settings_from_argv(["-m", str(model), *ARGS]).settings, env=env, log_dir=work / "logs")
    listened: dict[int, float] = {}
    sup.add_log_listener(lambda ln: listened.setdefault(ln.launch_id, ln.at) if "listening on" in ln.text else None)
    try:
        for _ in range(a.launches):
            launch = sup.start()
            if sup.wait_ready(60) != ServerState.READY:
                print(f"launch failed: {sup.failure.explain() if sup.failure else sup.state}", file=sys.stderr)
                return 1
            to_ready.append(launch.seconds_to_ready or 0.0)
            sup.events.flush()
            if launch.id in listened and launch.ready_at is not None:
                server_part.append(listened[launch.id] - launch.started_at)
                detect.append(max(0.0, launch.ready_at - listened[launch.id]))
            t0 = time.monotonic()
            sup.stop()
            stop_lat.append(time.monotonic() - t0)
            r = refused_after(launch.host, launch.port, t0)
            if r is not None:
                refused.append(r)
        for n in (1, 2, 3):
            sup.start(settings_from_argv(["-m", str(model), *ARGS, "--spec-draft-n-max", "3"]).settings)
            sup.wait_ready(60)
            t0 = time.monotonic()
            sup.restart(settings_from_argv(["-m", str(model), *ARGS, "--spec-draft-n-max", str(n)]).settings)
            if sup.wait_ready(60) == ServerState.READY:
                restart_ready.append(time.monotonic() - t0)
            sup.stop()
    finally:
        sup.close()

    now = dt.datetime.now(dt.timezone.utc)
    lines = [
        f"### {now:%Y-%m-%d %H:%M} UTC",
        "",
        f"Command: `python bench/bench_supervisor.py --launches {a.launches}`  ",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load average {load_start:.2f} at start. Model: generated `tiny-mtp` (1.7 MB), "
        f"args `{' '.join(ARGS)}`, `-lv 4` added by the supervisor, default poll settings.",
        "",
        "| measure (ms) | median | min | max | p90 |",
        "|---|---|---|---|---|",
        f"| launch -> ready (start() to READY), {len(to_ready)} launches | {stats(to_ready)} |",
    ]
    if server_part:
        lines.append(f"| of which: start() -> server's `listening on` line | {stats(server_part)} |")
        lines.append(f"| of which: `listening on` -> READY (supervisor detection) | {stats(detect)} |")
    lines.append(f"| stop latency (stop() call -> STOPPED, process reaped) | {stats(stop_lat)} |")
    if refused:
        lines.append(f"| stop() call -> port refuses connections | {stats(refused)} |")
    if restart_ready:
        lines.append(f"| restart() with another --spec-draft-n-max -> READY, {len(restart_ready)} restarts | "
                     f"{stats(restart_ready)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not a.no_write:
        append_under(HEADING, text)
        print(f"appended to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
