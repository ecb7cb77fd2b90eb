"""The one spawner: no Python between fork and exec, the parent-death signal, and no wedge for good.

CI once saw every launch after one fail with "fork/exec stalled": a preexec_fn makes CPython fork()
(not vfork) and run Python in the child, which can deadlock on a lock another thread held, and the
one spawner thread then waited on that child forever. These tests pin the replacement: setpriv sets
the signal, a stalled call abandons its thread, and the stalled fork is found and killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tui.core.server import spawn as spawnmod
from tui.core.server.spawn import SpawnError, _Spawner, check_executable, pdeathsig_prefix, spawn, unexeced_forks

needs_setpriv = pytest.mark.skipif(not pdeathsig_prefix(), reason="util-linux setpriv with --pdeathsig not here")

#: A child that prints its own parent-death signal (prctl PR_GET_PDEATHSIG = 2).
_PRINT_PDEATHSIG = ("import ctypes, ctypes.util; libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6'); "
                    "v = ctypes.c_int(-1); libc.prctl(2, ctypes.byref(v), 0, 0, 0); print(v.value)")


@needs_setpriv
def test_the_child_gets_sigkill_as_its_parent_death_signal_without_a_preexec_fn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    real = subprocess.Popen

    def recording(*a: Any, **kw: Any) -> subprocess.Popen[bytes]:
        seen.append(kw)
        return real(*a, **kw)

    monkeypatch.setattr(spawnmod.subprocess, "Popen", recording)
    proc = spawn([sys.executable, "-c", _PRINT_PDEATHSIG])
    out, _ = proc.communicate(timeout=30)
    assert out.decode().strip() == str(int(signal.SIGKILL))
    assert seen and seen[-1]["preexec_fn"] is None and seen[-1]["start_new_session"] is True


@needs_setpriv
def test_a_missing_or_unexecutable_binary_raises_what_popen_would(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        spawn([str(tmp_path / "no-such-llama-server")])
    plain = tmp_path / "llama-server"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError):
        spawn([str(plain)])
    with pytest.raises(FileNotFoundError):
        spawn(["no-such-binary-anywhere"], env={"PATH": str(tmp_path)})


def test_check_executable_searches_the_childs_path_like_execvp(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    check_executable("tool", {"PATH": f"/nonexistent:{tmp_path}"}, None)
    check_executable("./tool", None, tmp_path)
    with pytest.raises(FileNotFoundError):
        check_executable("tool", {"PATH": "/nonexistent"}, None)


def test_a_stalled_call_abandons_its_thread_and_the_next_call_gets_a_fresh_one() -> None:
    spawner = _Spawner()
    release = threading.Event()
    with pytest.raises(SpawnError, match="stalled"):
        spawner.call(lambda: release.wait(30), timeout=0.2)
    first = spawner.thread
    try:
        assert first is None  # abandoned: not reused for the next call
        thread = spawner.call(threading.current_thread, timeout=10)
        assert thread.name == "llama-server-spawner" and thread is spawner.thread
        assert spawner.call(threading.current_thread, timeout=10) is thread  # one thread from then on
    finally:
        release.set()


def test_spawn_kills_the_unexeced_fork_and_tries_once_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spawnmod, "_SPAWNER", _Spawner())
    release = threading.Event()
    calls: list[str] = []
    real = subprocess.Popen

    def first_stalls(*a: Any, **kw: Any) -> subprocess.Popen[bytes]:
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            release.wait(30)
        return real(*a, **kw)

    looked: list[bool] = []
    monkeypatch.setattr(spawnmod.subprocess, "Popen", first_stalls)
    monkeypatch.setattr(spawnmod, "unexeced_forks", lambda: looked.append(True) or [])
    try:
        proc = spawn([sys.executable, "-c", "print('up')"], timeout=0.3)
        out, _ = proc.communicate(timeout=30)
    finally:
        release.set()
    assert out.decode().strip() == "up"
    assert len(calls) == 2 and looked == [True]


def test_unexeced_forks_finds_a_fork_that_never_exec_d_and_not_an_exec_d_child() -> None:
    exec_d = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a copy of this process that waits (never execs) until killed
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    try:
        found = unexeced_forks()
        assert pid in found
        assert exec_d.pid not in found
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(w)
        exec_d.kill()
        exec_d.wait(10)
