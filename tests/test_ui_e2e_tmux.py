"""End to end in a real terminal: `mtp-tune --demo` in tmux against the real llama-server.

Launch with `l`, run the task suite with `p`, see TG and acceptance on screen, quit with `q`, and
check no server is left running. Synchronisation is bounded polling of `tmux capture-pane`.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.tmux import SUITE, Tmux, alive, tmux  # noqa: F401 - tmux is the fixture

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
MTP_TUNE = Path(sys.executable).parent / "mtp-tune"


def test_demo_in_a_real_terminal(tmux: Tmux, server_bin: Path, tmp_path: Path) -> None:
    env = {k: os.environ[k] for k in os.environ if k.startswith(("XDG_", "MTP_TUNE_", "LLAMA_CACHE"))}
    env |= {"MTP_TUNE_LLAMA_SERVER": str(server_bin), "TERM": "xterm-256color", "COLORTERM": "truecolor",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    marker = tmp_path / "exit-code"
    suite = tmp_path / "short.toml"  # short prompts: the shared CI CPU stays within minutes
    suite.write_text(SUITE)
    args = [str(MTP_TUNE), "--demo", "--no-launch", "--suite", str(suite), "--probe-repeat", "2",
            "--probe-n-predict", "24"]
    inner = f"cd {shlex.quote(str(REPO))} && {shlex.join(args)}; echo $? > {shlex.quote(str(marker))}; sleep 60"
    tmux.start("env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " sh -c " + shlex.quote(inner))

    tmux.wait_for(lambda s: "VRAM" in s and "SIMULATED" in s and "STOPPED" in s, "the first frame", 60)
    tmux.keys("l")
    screen = tmux.wait_for(lambda s: "READY" in s, "the server to be ready", 120)
    pid = int(re.search(r"READY\s+http://127\.0\.0\.1:\d+\s+pid (\d+)", screen).group(1))  # type: ignore[union-attr]
    assert alive(pid)

    tmux.keys("p")
    screen = tmux.wait_for(lambda s: re.search(r"ok: \d+ request", s) is not None, "the probe run to end", 300)
    row = next((line for line in screen.splitlines() if "MTP n3" in line and "%" in line), None)
    assert row is not None, screen
    tg = re.search(r"MTP n3 c\d+\s+(\d+)\s+(\d+(?:\.\d)?) \(", row)  # label, n, TG median (spread)
    assert tg is not None and float(tg.group(2)) > 0, row  # TG t/s median on screen
    assert "100 %" in row, row  # acceptance of the demo model's draft head

    tmux.keys("q")
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), tmux.screen()
    assert marker.read_text().strip() == "0"
    assert not alive(pid), "llama-server outlived mtp-tune"
