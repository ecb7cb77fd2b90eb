"""End to end in a real terminal: `mtp-tune --demo` in tmux against the real llama-server.

Launch with `l`, run the task suite with `p`, see TG and acceptance on screen, quit with `q`, and
check no server is left running. Synchronisation is bounded polling of `tmux capture-pane`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.tmux import Tmux, alive, start_demo, tmux, wait_exit  # noqa: F401 - tmux is the fixture

pytestmark = pytest.mark.slow


def test_demo_in_a_real_terminal(tmux: Tmux, server_bin: Path, tmp_path: Path) -> None:
    marker, _pane = start_demo(tmux, server_bin, tmp_path)

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
    assert wait_exit(tmux, marker) == "0"
    assert not alive(pid), "llama-server outlived mtp-tune"
