"""Starting children: the one spawner thread, the parent-death signal, the file reaper.

Every child (llama-server, ggml-rpc-server, the preset check's router) starts in its own session and
process group, and on Linux with the parent-death signal set to SIGKILL, so it dies with mtp-tune even
when mtp-tune is killed with SIGKILL. The signal is set by util-linux's `setpriv --pdeathsig KILL`
where it exists, so no Python runs in the forked child (a preexec_fn forces fork() and can deadlock
on a lock another thread held; that stalled CI). The fork happens on one long-lived thread, because
the kernel sends the parent-death signal when the *thread* that forked exits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


class SpawnError(RuntimeError):
    """The spawner thread did not start the child in time (fork/exec stalled)."""


def _make_preexec() -> Callable[[], None] | None:
    """A preexec_fn that asks the kernel to SIGKILL the child when its parent dies (Linux only).

    Only where setpriv is missing: a preexec_fn makes CPython fork() (not vfork) and run Python in
    the child, which can deadlock on a lock another thread held at the fork (the Python docs' warning;
    seen in CI as a spawner stuck for good in Popen)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        return None
    parent = os.getpid()
    sig = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        # The parent may have died between fork and prctl: then no signal will ever come.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


@functools.cache
def pdeathsig_prefix() -> tuple[str, ...]:
    """`setpriv --pdeathsig KILL --` where util-linux's setpriv has it (asked once), else ().

    setpriv sets the parent-death signal and execs the command, which keeps it, so no Python runs
    between fork and exec and CPython can use vfork."""
    if not sys.platform.startswith("linux"):
        return ()
    exe = shutil.which("setpriv")
    if not exe:
        return ()
    prefix = (exe, "--pdeathsig", "KILL", "--")
    try:
        ok = subprocess.run([*prefix, "/bin/sh", "-c", ":"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=10, close_fds=True).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return prefix if ok else ()


def check_executable(argv0: str, env: Mapping[str, str] | None, cwd: str | Path | None) -> None:
    """Raise what Popen would (FileNotFoundError, PermissionError) if `argv0` cannot be executed.

    Needed because a wrapper (setpriv) is what Popen starts: the command's own absence would only
    show as the wrapper's exit code. Searched like execvp: a name with a slash as is (from `cwd`),
    a bare name along the child's PATH."""
    if "/" in argv0:
        candidates = [Path(cwd or ".") / argv0]
    else:
        search = (os.environ if env is None else env).get("PATH", os.defpath)
        candidates = [Path(d or ".") / argv0 for d in search.split(os.pathsep)]
    if any(c.is_file() and os.access(c, os.X_OK) for c in candidates):
        return
    if any(c.exists() for c in candidates):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), argv0)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv0)


def unexeced_forks() -> list[int]:
    """Children of this process that are still a copy of it: forked, never exec'd (a wedged spawn).

    Read from /proc: parent pid ours and the command line ours (an exec'd child has its own)."""
    me = os.getpid()
    try:
        mine = Path("/proc/self/cmdline").read_bytes()
        entries = os.listdir("/proc")
    except OSError:
        return []
    found = []
    for name in entries:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid == me and Path(f"/proc/{name}/cmdline").read_bytes() == mine:
                found.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return found


class _Worker:
    """One long-lived thread and its queue; abandoned (never reused) once a call on it stalls."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="llama-server-spawner", daemon=True)
        self.thread.start()

    def call(self, fn: Callable[[], Any], timeout: float) -> Any:
        box: list[Any] = []
        done = threading.Event()
        self._q.put((fn, box, done))
        if not done.wait(timeout):
            raise SpawnError(f"starting the child process took more than {timeout:g} s (fork/exec stalled)")
        ok, value = box[0]
        if ok:
            return value
        raise value

    def _run(self) -> None:
        while True:
            fn, box, done = self._q.get()
            try:
                box.append((True, fn()))
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                box.append((False, e))
            done.set()


class _Spawner:
    """Runs every Popen on one thread that lives as long as the process.

    PR_SET_PDEATHSIG fires when the forking *thread* exits, so forking from a short-lived worker
    thread (as a UI does) would kill the server as soon as that worker finished. A call that stalls
    abandons its thread (left alive, so its children keep their signal) and the next call gets a new
    one, so one wedged fork cannot fail every later launch.
    """

    def __init__(self) -> None:
        self._worker: _Worker | None = None
        self._lock = threading.Lock()

    @property
    def thread(self) -> threading.Thread | None:
        return self._worker.thread if self._worker else None

    def call(self, fn: Callable[[], Any], timeout: float = 30.0) -> Any:
        with self._lock:
            if self._worker is None or not self._worker.thread.is_alive():
                self._worker = _Worker()
            worker = self._worker
        try:
            return worker.call(fn, timeout)
        except SpawnError:
            with self._lock:
                if self._worker is worker:
                    self._worker = None
            raise


_SPAWNER = _Spawner()


def spawn(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
          capture: bool = True, timeout: float = 30.0) -> subprocess.Popen[bytes]:
    """Start `argv` in its own process group with the parent-death signal, from the spawner thread.

    `env` is used as given (pass it through `child_env`); `capture` pipes stdout+stderr to the
    caller, otherwise both go to /dev/null. A spawn that stalls has its unexec'd fork killed and is
    tried once more on a fresh thread. Raises OSError (missing binary...) or SpawnError.
    """
    cmd = [str(a) for a in argv]
    prefix = pdeathsig_prefix()
    preexec = None if prefix else _make_preexec()
    if prefix:
        check_executable(cmd[0], env, cwd)
    out = subprocess.PIPE if capture else subprocess.DEVNULL
    err = subprocess.STDOUT if capture else subprocess.DEVNULL

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen([*prefix, *cmd], stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=dict(env) if env is not None else None, cwd=cwd,
                                start_new_session=True, preexec_fn=preexec, close_fds=True)

    try:
        return _SPAWNER.call(popen, timeout)
    except SpawnError as first:
        wedged = unexeced_forks()
        for pid in wedged:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        log.warning("spawning %s stalled (%s); killed %d unexec'd fork(s), trying once more", cmd[0], first,
                    len(wedged))
        return _SPAWNER.call(popen, timeout)


#: The reaper: waits for EOF on stdin (mtp-tune closed it, or died and the kernel closed it), then
#: removes its file. POSIX sh only: no interpreter start per launch.
_REAPER_SCRIPT = 'while read -r _; do :; done; rm -f -- "$1"'


def spawn_reaper(path: str | Path) -> subprocess.Popen[bytes]:
    """A child that removes `path` once mtp-tune closes its stdin or dies, even by SIGKILL.

    The one child meant to outlive mtp-tune, briefly: the parent-death signal kills the server with
    mtp-tune, but a file needs someone alive to remove it. It runs in its own session (a terminal's
    SIGINT/SIGHUP do not reach it) and only ever sees EOF on its stdin pipe, whose write end the
    kernel closes when mtp-tune ends, however it ends.
    """
    return subprocess.Popen(["/bin/sh", "-c", _REAPER_SCRIPT, "mtp-tune-reaper", str(path)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={"PATH": "/usr/bin:/bin"}, start_new_session=True, close_fds=True)
