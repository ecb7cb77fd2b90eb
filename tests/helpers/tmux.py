"""A private tmux server for the end-to-end TUI tests: keys in, bounded polling of the pane out."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

#: Two short prompts: probes that finish in seconds on the demo's tiny model.
SUITE = """\
name = "short"
[[prompts]]
name = "colours"
prompt = "Name three colours of the rainbow."
[[prompts]]
name = "capital"
prompt = "What is the capital of France?"
"""


class Tmux:
    """One private tmux server (its own socket: nothing leaks in from the user's tmux)."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.session = f"mtp-e2e-{uuid.uuid4().hex[:8]}"

    def cmd(self, *args: str) -> str:
        out = subprocess.run(["tmux", "-S", str(self.socket), *args], capture_output=True, text=True, timeout=20)
        if out.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)} failed: {out.stderr.strip()}")
        return out.stdout

    def start(self, command: str, width: int = 120, height: int = 40) -> None:
        self.cmd("new-session", "-d", "-s", self.session, "-x", str(width), "-y", str(height), command)

    def keys(self, *keys: str) -> None:
        self.cmd("send-keys", "-t", self.session, *keys)

    def screen(self) -> str:
        return self.cmd("capture-pane", "-p", "-t", self.session)

    def wait_for(self, predicate: Callable[[str], bool], what: str, timeout: float) -> str:
        """Poll the pane until `predicate(text)` (bounded); fail with the last screen otherwise."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.1)  # polling interval, not synchronisation: the predicate decides
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; screen was:\n{text}")

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True, timeout=20)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is required for the end-to-end test (apt-get install tmux)")
    t = Tmux(tmp_path / "tmux.sock")
    yield t
    t.kill()


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
