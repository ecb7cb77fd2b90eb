"""`mtp-tune serve`: a real run in a subprocess, stopped with Ctrl-C (SIGINT), and a failed launch."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import server_env
from tests.helpers.supervisor_util import end_child, lines_until, pid_gone

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
           "-t", "1", "-tb", "1", "--spec-type", "draft-mtp", "--ready-timeout", "60", "--no-mmap"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(tmp_path, server_bin), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    server_pid = None
    try:
        lines = lines_until(proc, "ready at", 60, most=20)
        m = re.match(r"ready at (http://127\.0\.0\.1:\d+) after [\d.]+ s \(pid (\d+)\)", lines[-1])
        assert m, lines
        server_pid = int(m.group(2))
        out = "\n".join(lines)
        assert "starting:" in out and "--spec-type draft-mtp" in out and "-lv 4" in out
        # read into Settings by the one reader: the removed flag is translated, not passed on
        assert "--load-mode none" in out and "--no-mmap" not in out
        assert f"log: {tmp_path / 'data' / 'logs'}" in out
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "warning: --no-mmap was removed" in err and "imported --no-mmap as --load-mode none" in err
        assert "stopped (exit code 0)" in rest
        assert pid_gone(server_pid)
    finally:
        end_child(proc, server_pid)


def test_serve_explains_a_failed_launch(server_bin: Path, tmp_path: Path) -> None:
    """A launch the server itself ends (a file that is no GGUF): serve names the cause and the full log."""
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf at all, only some bytes" * 64)
    cmd = [sys.executable, "-c", ENTRY, "serve", "-m", str(broken), "-t", "1"]
    res = subprocess.run(cmd, cwd=REPO, env=_env(tmp_path, server_bin), capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr
    assert "failed" in res.stdout and str(broken) in res.stdout
    err = res.stderr.strip()
    assert err.startswith("mtp-tune: ") and "GGUF" in err, err
    assert "Full server log:" in err and "Traceback" not in err


def test_serve_refuses_an_option_llama_server_does_not_have_before_launching(tmp_path: Path) -> None:
    """An unknown flag is an error naming it (exit 2), not a warning and a launch the server refuses."""
    cmd = [sys.executable, "-c", ENTRY, "serve", "-m", str(tmp_path / "m.gguf"), "-t", "1",
           "--checkpoint-every-n-tokens", "64"]
    env = _env(tmp_path, tmp_path / "no-server-here")  # never reached: refused before any server is looked for
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stdout) == (2, ""), res.stderr
    assert res.stderr.splitlines() == [
        "mtp-tune: --checkpoint-every-n-tokens: not an option of llama-server b11434; llama-server refuses to start "
        "with an option it does not know."]


def test_serve_runs_a_router_preset(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """Router mode: `--models-preset` has no Settings field, so it reaches the router in `extra_args`."""
    ini = tmp_path / "p.ini"
    ini.write_text(f"version = 1\n\n[tiny]\nmodel = {tiny_models['tiny-mtp']}\nctx-size = 4096\nthreads = 1\n")
    cmd = [sys.executable, "-c", ENTRY, "serve", "--models-preset", str(ini), "--router-model", "tiny",
           "--ready-timeout", "60", "--api-key", "router-key"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(tmp_path, server_bin), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    try:
        lines = lines_until(proc, "ready at", 60, most=20)
        assert lines[-1].startswith("ready at"), lines
        out = "\n".join(lines)
        assert f"--models-preset {ini}" in out and "router-key" not in out and "--api-key-file" in out
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    finally:
        end_child(proc, None)


def test_serve_without_model_is_a_usage_error(tmp_path: Path, server_bin: Path) -> None:
    res = subprocess.run([sys.executable, "-c", ENTRY, "serve", "-c", "4096"], cwd=REPO,
                         env=_env(tmp_path, server_bin), capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "serve needs a model" in res.stderr
