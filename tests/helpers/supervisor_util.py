"""Shared bits of the supervisor/client/failure tests: argv, hermetic supervisors, process checks."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import server_env
from tui.core.options.argv import settings_from_argv
from tui.core.options.settings import Settings
from tui.core.server.events import ServerState, StateEvent
from tui.core.server.supervisor import Supervisor

#: Small and steady on a busy 2-core runner.
BASE_ARGS = ["-c", "4096", "-np", "1", "-t", "1", "-tb", "1", "--metrics"]
MTP_ARGS = ["--spec-type", "draft-mtp"]
FINAL = [ServerState.STOPPED, ServerState.EXITED, ServerState.FAILED]


def settings_of(args: Sequence[str] | Settings) -> Settings:
    """llama-server arguments read into Settings by the one reader (as `serve` does); Settings as given."""
    return args if isinstance(args, Settings) else settings_from_argv([str(a) for a in args]).settings


def as_given(args: Sequence[str]) -> Settings:
    """Settings that pass `args` to the binary exactly as given (stand-in binaries, and flags the
    reader would translate or refuse but the test wants the server itself to see)."""
    return Settings(metrics=False, extra_args=[str(a) for a in args])


def make_supervisor(server_bin: Path, args: Sequence[str] | Settings, root: Path, **kw: object) -> Supervisor:
    """A supervisor whose server sees no user config, cache or LLAMA_ARG_* and logs under `root`."""
    kw.setdefault("ready_timeout", 60.0)
    kw.setdefault("poll_interval", 0.05)
    return Supervisor(server_bin, settings_of(args), env=server_env(root), log_dir=root / "logs", **kw)  # type: ignore[arg-type]


class Recorder:
    """Collects state events (delivered on the supervisor's dispatcher thread)."""

    def __init__(self) -> None:
        self.events: list[StateEvent] = []
        self._lock = threading.Lock()

    def __call__(self, ev: StateEvent) -> None:
        with self._lock:
            self.events.append(ev)

    def states(self, launch_id: int | None = None) -> list[ServerState]:
        with self._lock:
            return [e.state for e in self.events if launch_id is None or e.launch_id == launch_id]


def pid_gone(pid: int, timeout: float = 10.0) -> bool:
    """True once `pid` no longer runs (absent from /proc, or a zombie waiting to be reaped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return True
        if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return True
        time.sleep(0.02)  # polling /proc with a bounded deadline
    return False


def pid_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """One line of the child's stdout, or '' if none came within `timeout` (or it exited)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        ch = os.read(fd, 1)
        if not ch:
            break
        if ch == b"\n":
            return buf.decode()
        buf += ch
    return buf.decode()


def lines_until(proc: subprocess.Popen[str], prefix: str, timeout: float, most: int = 40) -> list[str]:
    """The child's stdout lines up to the first that starts with `prefix` (the last one), or up to its
    end or a `timeout` s silence (the last one is then ''); `most` lines at the most."""
    lines: list[str] = []
    for _ in range(most):
        lines.append(read_line(proc, timeout))
        if lines[-1].startswith(prefix) or not lines[-1]:
            break
    return lines


def end_child(proc: subprocess.Popen[str], server_pid: int | None) -> None:
    """Kill what a test's CLI child left running: itself, and the server it started (bounded)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
    if server_pid is not None and not pid_gone(server_pid, 0.5):
        os.kill(server_pid, signal.SIGKILL)


def servers_of(model: Path) -> list[int]:
    """Pids of the llama-server processes whose command line names `model` (give each test its own
    copy of a model, so no other test's server is counted): what a stopped command must leave none of."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"llama-server") and str(model).encode() in argv:
                out.append(int(d.name))
    return out
