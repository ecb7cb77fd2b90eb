"""No orphans: a real process supervising a real server is killed (or exits); the server must go too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import server_env
from tests.helpers.supervisor_util import BASE_ARGS, pid_cmdline, pid_gone, read_line

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "exit"])
def test_server_dies_with_its_supervisor(how: str, server_bin: Path, tiny_models: dict[str, Path],
                                         tmp_path: Path) -> None:
    mode = "exit" if how == "exit" else "wait"
    cmd = [sys.executable, "-m", "tests.helpers.supervised_parent", mode, str(server_bin), str(tmp_path / "logs"),
           "-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS]
    parent = subprocess.Popen(cmd, cwd=REPO, env=server_env(tmp_path), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    server_pid = None
    try:
        line = read_line(parent, 60)
        state, pid_s, exe = line.split()
        assert state == "ready" and exe == "llama-server", line
        server_pid = int(pid_s)
        # the parent waits on its stdin in `exit` mode, so the server surely runs while it is read here
        assert "llama-server" in pid_cmdline(server_pid)
        assert os.getpgid(server_pid) == server_pid  # its own process group
        if how == "exit":
            assert parent.stdin is not None
            parent.stdin.close()
        elif how == "SIGKILL":
            parent.kill()  # no handler, no atexit: only the kernel's parent-death signal can help
        elif how == "SIGTERM":
            parent.terminate()
        assert parent.wait(30) is not None
        assert pid_gone(server_pid, timeout=10), f"llama-server {server_pid} outlived its supervisor ({how})"
        if how == "SIGTERM":
            assert parent.returncode == -signal.SIGTERM  # cleaned up, then died of the signal as usual
        if how == "exit":
            assert parent.returncode == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if server_pid is not None and not pid_gone(server_pid, timeout=0.5):
            os.kill(server_pid, signal.SIGKILL)  # the test failed; do not leave the server running
