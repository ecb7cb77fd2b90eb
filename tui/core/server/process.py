"""Child processes that never outlive mtp-tune: the live registry, stopping groups, cleanup on exit.

Children are started by `spawn.spawn` (own process group, parent-death signal). An atexit hook and
SIGTERM/SIGHUP handlers stop everything registered as live on the way out; `kill_group` and
`pump_output` stop a child's whole group and read its output without blocking on a grandchild.
"""

from __future__ import annotations

import atexit
import logging
import os
import select
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from tui.core.server.spawn import spawn

log = logging.getLogger(__name__)


class Stoppable(Protocol):
    """What the live registry stops on the way out."""

    def _terminate_now(self, grace: float) -> None: ...


def child_env(base: Mapping[str, str] | None = None, keep_llama_env: bool = False,
              secrets: Mapping[str, str] | None = None) -> dict[str, str]:
    """The one environment sanitiser: a child's environment without LLAMA_ARG_* and LLAMA_API_KEY,
    plus `secrets` (a launch's `-hft` as HF_TOKEN: never in the argv, `launch.secret_env`).

    Every LLAMA_ARG_* variable is a llama-server option; a tuner must run exactly the argv it shows.
    """
    env = dict(os.environ if base is None else base)
    if not keep_llama_env:
        for k in [k for k in env if k.startswith("LLAMA_ARG_") or k == "LLAMA_API_KEY"]:
            del env[k]
    env.update(secrets or {})
    return env


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (bind to port 0 and read what the kernel picked)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def exited_nowait(pid: int) -> bool:
    """True if the process has ended, without reaping it (its pid and group stay reserved)."""
    try:
        res = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return res is not None


def kill_group(proc: subprocess.Popen[bytes], grace: float = 5.0,
               ended: Callable[[float], bool] | None = None) -> bool:
    """SIGTERM the child's process group, wait `grace` s, then SIGKILL it; True once it has ended.

    `ended(timeout)` waits for the end; by default `proc.wait`, but a child whose output a reader
    thread pumps (and reaps) passes that reader's event instead."""
    def reaped(timeout: float) -> bool:
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    wait = ended or reaped
    for sig, timeout in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        if wait(0):
            return True
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:  # pragma: no cover - group gone and pid reused elsewhere
            proc.send_signal(sig)
        if wait(timeout):
            return True
    log.warning("child pid %s did not go away after SIGKILL", proc.pid)
    return False


# ---- the live registry and cleanup on exit ----------------------------------------------------

_LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()
_ATEXIT_DONE = False
_SIGNALS_DONE = False


def register(obj: Stoppable) -> None:
    """Stop `obj` (its `_terminate_now(grace)`) at exit or on SIGTERM/SIGHUP, while it lives."""
    with _LIVE_LOCK:
        _LIVE.add(obj)
    install_cleanup()


def unregister(obj: Stoppable) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(obj)


def stop_all(grace: float = 2.0) -> None:
    """Stop every live child of this process (atexit and signal handlers call this)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for s in live:
        try:
            s._terminate_now(grace)
        except Exception:  # pragma: no cover - best effort on the way out
            pass


def install_cleanup() -> None:
    """Stop live children at interpreter exit and on SIGTERM/SIGHUP (handlers only where unset).

    Every registration calls this; signal handlers can only be installed from the main thread, so an
    app that creates supervisors in worker threads should call it once at startup as well.
    """
    global _ATEXIT_DONE, _SIGNALS_DONE
    with _LIVE_LOCK:
        if not _ATEXIT_DONE:
            atexit.register(stop_all)
            _ATEXIT_DONE = True
        if _SIGNALS_DONE or threading.current_thread() is not threading.main_thread():
            return
        _SIGNALS_DONE = True
    for signum in (signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _on_fatal_signal)
        except (ValueError, OSError):  # pragma: no cover - not the main interpreter
            pass


def _on_fatal_signal(signum: int, frame: Any) -> None:
    stop_all(grace=1.0)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


class Child:
    """A plain supervised child (e.g. ggml-rpc-server): spawned here, stopped with its group.

    For servers that need log reading and readiness use the Supervisor; this is for helpers
    whose only contract is "listen on a port until stopped".
    """

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> None:
        self.argv = [str(a) for a in argv]
        self.proc = spawn(self.argv, env=child_env(env), capture=False)
        register(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_listening(self, host: str, port: int, timeout: float) -> None:
        """Block until `host:port` accepts a connection (bounded); RuntimeError if it exits or times out."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{Path(self.argv[0]).name} on port {port} exited with {self.proc.returncode}")
            try:
                with socket.create_connection((host, port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{Path(self.argv[0]).name} on port {port} did not listen within "
                                       f"{timeout:g} s") from None
                try:  # pace the connection attempts, but notice an exit at once
                    self.proc.wait(timeout=0.05)
                except subprocess.TimeoutExpired:
                    pass

    def stop(self, grace: float = 5.0) -> int | None:
        kill_group(self.proc, grace)
        unregister(self)
        return self.proc.poll()

    def _terminate_now(self, grace: float) -> None:
        kill_group(self.proc, grace)


def pump_output(proc: subprocess.Popen[bytes], logf: Any, on_line: Callable[[bytes], None]) -> int:
    """Copy the child's output to `logf` and `on_line` (one call per line) until it ends; reap it.

    Notices the end at once even when a grandchild keeps the pipe open (EOF, or the leader exiting,
    whichever comes first), then kills what is left of the group. Returns the exit code.
    """
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    poller = select.poll()  # not select(): fds above 1024 are normal in a long-running app
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    buf = b""
    rc: int | None = None
    try:
        ended = False
        while not ended:
            if poller.poll(200):
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
            elif exited_nowait(proc.pid):
                # Ended, but a grandchild may hold the pipe open: take what is there and stop.
                chunk, ended = _drain(fd), True
            else:
                continue
            if logf:
                try:
                    logf.write(chunk)
                except OSError:
                    pass
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                on_line(raw)
        if buf:
            on_line(buf)
    finally:
        rc = _reap(proc)
        if logf:
            try:
                logf.write(f"# exit code {rc}\n".encode())
                logf.close()
            except OSError:
                pass
        try:
            proc.stdout.close()
        except OSError:
            pass
    return rc


def _drain(fd: int) -> bytes:
    """Whatever is readable right now (bounded, in case a writer keeps going)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    out = b""
    while len(out) < 16 * 1024 * 1024 and poller.poll(0):
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk
    return out


def _reap(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the leader without reaping, kill what is left of its group, then reap it."""
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        pass
    except InterruptedError:  # pragma: no cover - PEP 475 retries
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers (router children); leader is a zombie
    except (ProcessLookupError, PermissionError):
        pass
    return proc.wait()
