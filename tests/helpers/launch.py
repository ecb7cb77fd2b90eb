"""Calibration launches for the planner's real-server tests and benchmarks.

`probe_launch()` starts llama-server through the product's Supervisor (own process group,
parent-death signal), waits until it is ready or ends, stops it and hands back the log and the
memory report. Loopback ggml-rpc-servers: `tui.core.planning.standin.RpcServers`.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tui.core.options.argv import settings_from_argv
from tui.core.server.memreport import MemoryReport
from tui.core.server.process import child_env
from tui.core.server.events import ServerState
from tui.core.server.supervisor import Supervisor


@dataclass
class LaunchResult:
    argv: list[str]
    log: str
    report: MemoryReport
    returncode: int | None
    ready: bool
    seconds: float


def probe_launch(server: str | Path, argv: list[str], timeout_s: float = 120.0, env: dict[str, str] | None = None) -> LaunchResult:
    """Start `server argv... -lv 4 --log-colors off` on a free 127.0.0.1 port, wait until it is ready
    (or ends, or `timeout_s`), stop it and parse the memory report of the whole log."""
    child = child_env(env)
    tmpdir = Path(tempfile.mkdtemp(prefix="mtp-tune-probe-"))
    if "XDG_CONFIG_HOME" not in child:  # llama-server reads llama.cpp/config.ini there: keep it empty
        child["XDG_CONFIG_HOME"] = str(tmpdir / "xdg")
    t0 = time.monotonic()
    sup = Supervisor(server, settings_from_argv(list(argv)).settings, env=child, ready_timeout=timeout_s, log_dir=tmpdir / "logs",
                     record_history=False, memreport_factory=None)
    try:
        launch = sup.start()
        ready = sup.wait_ready(timeout_s + 10.0) == ServerState.READY
        rc = sup.stop()
        text = launch.log_path.read_text(errors="replace") if launch.log_path and launch.log_path.exists() else ""
        lines = [ln for ln in text.splitlines(keepends=True) if not ln.startswith("# ")]
        report = MemoryReport()
        for ln in lines:
            report.feed(ln)
        return LaunchResult(launch.argv, "".join(lines), report, rc, ready, time.monotonic() - t0)
    finally:
        sup.close()
        shutil.rmtree(tmpdir, ignore_errors=True)
