"""Predicted vs reported memory, per device and component, as data (shown to the user and stored).

After every launch the supervisor's memory report (tui.core.memreport) is compared with the plan
(tui.core.planner); the differences are kept as plain numbers so the planner's error is always
visible. `probe_launch()` is the calibration probe used by the benchmark and the real-server tests:
start llama-server with `-lv 4`, read its log until it listens (or exits), stop it, parse the report.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.core.memreport import MemoryReport
from tui.core.planner import COMPONENT_KEYS, Plan

#: Tolerances of the goals: absolute MiB or relative, whichever is larger.
EXACT_COMPONENTS: tuple[str, ...] = ("weights", "kv", "draft_kv", "recurrent")
APPROX_COMPONENTS: tuple[str, ...] = ("compute", "draft_compute")


@dataclass
class Diff:
    device: str
    component: str
    predicted_mib: float
    reported_mib: float

    @property
    def error_mib(self) -> float:
        return round(self.predicted_mib - self.reported_mib, 2)

    @property
    def error_rel(self) -> float:
        """Relative error against the report (0 when both are 0)."""
        if self.reported_mib == 0:
            return 0.0 if abs(self.predicted_mib) < 0.005 else float("inf")
        return (self.predicted_mib - self.reported_mib) / self.reported_mib

    def within(self, rel: float, abs_mib: float) -> bool:
        return abs(self.error_mib) <= max(abs_mib, rel * abs(self.reported_mib))

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device, "component": self.component, "predicted_mib": round(self.predicted_mib, 2),
            "reported_mib": round(self.reported_mib, 2), "error_mib": self.error_mib,
            "error_pct": None if self.error_rel == float("inf") else round(100 * self.error_rel, 2),
        }


@dataclass
class Reconciliation:
    diffs: list[Diff] = field(default_factory=list)
    unmatched_devices: list[str] = field(default_factory=list)

    def for_component(self, component: str) -> list[Diff]:
        return [d for d in self.diffs if d.component == component]

    def max_abs_error(self, component: str) -> float:
        return max((abs(d.error_mib) for d in self.for_component(component)), default=0.0)

    def max_rel_error(self, component: str, min_mib: float = 0.0) -> float:
        vals = [abs(d.error_rel) for d in self.for_component(component) if d.reported_mib > min_mib]
        return max(vals, default=0.0)

    def failures(self, exact_rel: float = 0.01, exact_abs: float = 1.0, approx_rel: float = 0.10, approx_abs: float = 1.0) -> list[Diff]:
        """Diffs outside the goals: exact components 1 % or 1 MiB, compute 10 % (or 1 MiB)."""
        out = []
        for d in self.diffs:
            if d.component in EXACT_COMPONENTS and not d.within(exact_rel, exact_abs):
                out.append(d)
            elif d.component in APPROX_COMPONENTS and not d.within(approx_rel, approx_abs):
                out.append(d)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"diffs": [d.to_dict() for d in self.diffs], "unmatched_devices": list(self.unmatched_devices)}


def reconcile(plan: Plan, report: MemoryReport) -> Reconciliation:
    """Compare component by component. Plan devices are matched to report devices by their key
    (`Host`, `CUDA0`, `RPC0[host:port]`); a device present on one side only compares against 0."""
    reported = report.per_device()
    rec = Reconciliation()
    planned = {d.key: d for d in plan.devices}
    keys = list(planned) + [k for k in reported if k not in planned]
    for key in keys:
        pd = planned.get(key)
        rd = reported.get(key)
        if pd is None or rd is None:
            rec.unmatched_devices.append(key)
        for comp in COMPONENT_KEYS:
            pv = pd.components.get(comp, 0.0) if pd else 0.0
            rv = (rd or {}).get(comp, 0.0)
            if comp == "output" and rd is not None:
                rv += rd.get("draft_output", 0.0)
            if pd is None and rv == 0:
                continue
            rec.diffs.append(Diff(key, comp, pv, rv))
    return rec


# ---- the calibration probe ---------------------------------------------------------------------


@dataclass
class LaunchResult:
    argv: list[str]
    log: str
    report: MemoryReport
    returncode: int | None
    ready: bool
    seconds: float


def probe_launch(server: str | Path, argv: list[str], timeout_s: float = 120.0, env: dict[str, str] | None = None) -> LaunchResult:
    """Start `server argv... -lv 4 --log-colors off` on 127.0.0.1:0, read the log until it listens
    (or exits, or `timeout_s`), stop it (SIGTERM, then SIGKILL) and parse the memory report."""
    extra = ["--host", "127.0.0.1", "--port", "0", "-lv", "4", "--log-colors", "off"]
    cmd = [str(server), *argv, *extra]
    child_env = dict(env if env is not None else os.environ)
    for k in [k for k in child_env if k.startswith("LLAMA_ARG_")]:
        del child_env[k]
    tmpdir = None
    if "XDG_CONFIG_HOME" not in child_env:  # llama-server reads llama.cpp/config.ini there: keep it empty
        tmpdir = tempfile.mkdtemp(prefix="mtp-tune-probe-")
        child_env["XDG_CONFIG_HOME"] = tmpdir
    report = MemoryReport()
    lines: list[str] = []
    t0 = time.monotonic()
    ready = False
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env,
                            errors="replace", start_new_session=True)
    assert proc.stdout is not None
    deadline = t0 + timeout_s
    q: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:  # a thread, so a quiet child cannot block the deadline
        assert proc.stdout is not None
        for ln in proc.stdout:
            q.put(ln)
        q.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    eof = False
    try:
        while not eof:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                line = q.get(timeout=min(1.0, left))
            except queue.Empty:
                continue
            if line is None:
                eof = True
                break
            lines.append(line)
            report.feed(line)
            if "listening on http" in line:
                ready = True
                break
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        reader.join(timeout=15)
        while True:
            try:
                line = q.get_nowait()
            except queue.Empty:
                break
            if line is None:
                continue
            lines.append(line)
            report.feed(line)
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
    return LaunchResult(cmd, "".join(lines), report, proc.returncode, ready, time.monotonic() - t0)


class RpcServers:
    """Loopback `ggml-rpc-server` processes (one per device) for multi-device tests and benchmarks.

    Use as a context manager; `endpoints` is the `--rpc` value. Ports are picked free at start.
    """

    def __init__(self, rpc_bin: str | Path, count: int = 2, threads: int = 1, timeout_s: float = 20.0) -> None:
        self.rpc_bin = str(rpc_bin)
        self.count = count
        self.threads = threads
        self.timeout_s = timeout_s
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ports: list[int] = []

    @property
    def endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def __enter__(self) -> "RpcServers":
        import socket

        for _ in range(self.count):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            proc = subprocess.Popen([self.rpc_bin, "-H", "127.0.0.1", "-p", str(port), "-t", str(self.threads)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            self.procs.append(proc)
            self.ports.append(port)
        deadline = time.monotonic() + self.timeout_s
        for port, proc in zip(self.ports, self.procs):
            while True:
                if proc.poll() is not None:
                    self.__exit__(None, None, None)
                    raise RuntimeError(f"ggml-rpc-server on port {port} exited with {proc.returncode}")
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        self.__exit__(None, None, None)
                        raise RuntimeError(f"ggml-rpc-server on port {port} did not listen within {self.timeout_s} s") from None
                    time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
