"""`mtp-tune serve`: a real run in a subprocess, stopped with Ctrl-C (SIGINT), and a failed launch."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import server_env
from tests.helpers.supervisor_util import pid_gone, read_line

pytestmark = pytest.mark.server
REPO = Path(__file__).resolve().parent.parent
ENTRY = "import sys; from tui.cli import main; sys.exit(main())"


def _env(root: Path, server_bin: Path) -> dict[str, str]:
    env = server_env(root)
    env["MTP_TUNE_LLAMA_SERVER"] = str(server_bin)
    env["MTP_TUNE_DATA_DIR"] = str(root / "data")
    return env


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background shell may have ignored it for us


def test_serve_until_ctrl_c(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", ENTRY, "serve", "-m", str(tiny_models["tiny-mtp"]), "-c", "4096", "-np", "1",
           "-t", "1", "-tb", "1", "--spec-type", "draft-mtp", "--ready-timeout", "60"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(tmp_path, server_bin), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    server_pid = None
    try:
        lines = []
        for _ in range(20):
            line = read_line(proc, 60)
            lines.append(line)
            if line.startswith("ready at") or not line:
                break
        m = re.match(r"ready at (http://127\.0\.0\.1:\d+) after [\d.]+ s \(pid (\d+)\)", lines[-1])
        assert m, lines
        server_pid = int(m.group(2))
        out = "\n".join(lines)
        assert "starting:" in out and "--spec-type draft-mtp" in out and "-lv 4" in out
        assert f"log: {tmp_path / 'data' / 'logs'}" in out
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "stopped (exit code 0)" in rest
        assert pid_gone(server_pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if server_pid is not None and not pid_gone(server_pid, 0.5):
            os.kill(server_pid, signal.SIGKILL)


def test_serve_explains_a_failed_launch(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", ENTRY, "serve", "-m", str(tiny_models["tiny-mtp"]), "-t", "1", "--no-mmap"]
    res = subprocess.run(cmd, cwd=REPO, env=_env(tmp_path, server_bin), capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "failed" in res.stdout
    err = res.stderr.strip()
    assert err.startswith("mtp-tune: llama-server no longer accepts --no-mmap") and "--load-mode none" in err
    assert "Full server log:" in err and "Traceback" not in err


def test_serve_without_model_is_a_usage_error(tmp_path: Path, server_bin: Path) -> None:
    res = subprocess.run([sys.executable, "-c", ENTRY, "serve", "-c", "4096"], cwd=REPO,
                         env=_env(tmp_path, server_bin), capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "serve needs a model" in res.stderr
