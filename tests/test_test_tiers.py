"""The fast tier (`pytest -m "not server"`) never builds or uses llama-server: tests that use the server's
fixtures are marked `server` from those fixtures, and whatever still reaches for a server stops in one
sentence naming the test, instead of a silent 6-minute build (tests/conftest.py).

The checks run a small inner suite that loads this suite's conftest, so the hooks are tested as pytest
runs them; its cmake and compiler are stand-ins that fail, so even a broken guard cannot build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

INNER = '''
import subprocess, sys
from tui.core.server import provision

def test_uses_the_server(server_bin):
    pass

def test_asks_for_the_server_late(request):
    request.getfixturevalue("server_bin")

def test_sees_no_cached_server():
    assert provision.cached_server() is None

def test_builds_in_process():
    provision.ensure_server()

def test_builds_in_a_child():
    out = subprocess.run([sys.executable, "-m", "tui.cli", "doctor", "--build"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
'''


def _inner(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the inner suite with a cmake and a C++ compiler that fail."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for tool in ("cmake", "c++"):
        (bindir / tool).write_text("#!/bin/sh\nexit 1\n")
        (bindir / tool).chmod(0o755)
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F401,F403\n")
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MTP_TUNE_"))}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", "--rootdir",
                           str(tmp_path), "-c", str(REPO / "pyproject.toml"), *args, str(tmp_path)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path, env=env)


def test_the_server_marker_comes_from_the_fixtures(tmp_path: Path) -> None:
    out = _inner(tmp_path, "-m", "server", "--collect-only")
    assert "test_inner.py::test_uses_the_server" in out.stdout, out.stdout + out.stderr
    assert "1/5 tests collected (4 deselected)" in out.stdout, out.stdout


def test_the_fast_tier_stops_every_way_to_a_server_in_one_sentence_naming_the_test(tmp_path: Path) -> None:
    out = _inner(tmp_path, "-m", "not server")
    text = out.stdout
    assert "1 deselected" in text and "test_uses_the_server" not in text.split("short test summary")[-1], text
    assert "PASSED test_inner.py::test_sees_no_cached_server" in text, text
    assert ("test_inner.py::test_asks_for_the_server_late reaches llama-server in the fast tier "
            '(-m "not server"), which never builds or uses one') in text, text
    never = 'the fast tier (-m "not server") never builds llama-server, yet this test did'
    for name in ("test_builds_in_process", "test_builds_in_a_child"):
        assert f"{never}/test_inner.py::{name}: no such source package" in text, text
    assert "3 failed, 1 passed, 1 deselected" in text, text
