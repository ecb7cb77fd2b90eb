"""A private tmux server for the end-to-end TUI tests: keys in, bounded polling of the pane out."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
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


REPO = Path(__file__).resolve().parents[2]
MTP_TUNE = Path(sys.executable).parent / "mtp-tune"


def start_demo(tmux: Tmux, server_bin: Path, tmp_path: Path, width: int = 120, height: int = 40) -> tuple[Path, int]:
    """`mtp-tune --demo --no-launch` with the short suite in `tmux`, in a clean environment (only the
    test's XDG/MTP_TUNE/LLAMA_CACHE dirs and the real server); returns (the file its exit code lands
    in, the pane's pid: the root of every process the app starts)."""
    env = {k: os.environ[k] for k in os.environ if k.startswith(("XDG_", "MTP_TUNE_", "LLAMA_CACHE"))}
    env |= {"MTP_TUNE_LLAMA_SERVER": str(server_bin), "TERM": "xterm-256color", "COLORTERM": "truecolor",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    marker = tmp_path / "exit-code"
    suite = tmp_path / "short.toml"  # short prompts: the shared CI CPU stays within minutes
    suite.write_text(SUITE)
    args = [str(MTP_TUNE), "--demo", "--no-launch", "--suite", str(suite), "--probe-repeat", "2",
            "--probe-n-predict", "24"]
    inner = f"cd {shlex.quote(str(REPO))} && {shlex.join(args)}; echo $? > {shlex.quote(str(marker))}; sleep 60"
    tmux.start("env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " sh -c " + shlex.quote(inner),
               width=width, height=height)
    return marker, int(tmux.cmd("list-panes", "-t", tmux.session, "-F", "#{pane_pid}").strip())


def wait_exit(tmux: Tmux, marker: Path, timeout: float = 60) -> str:
    """The app's exit code, once it has quit (bounded polling of the marker file)."""
    deadline = time.monotonic() + timeout
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)  # polling interval: the marker decides
    assert marker.exists(), tmux.screen()
    return marker.read_text().strip()


def children(pid: int) -> set[int]:
    """Every descendant of `pid` (children of all its threads: workers start the servers)."""
    out: set[int] = set()
    try:  # a process that exits while it is walked (a probe's server stopping) has no /proc entry left
        tasks = list(Path(f"/proc/{pid}/task").glob("*"))
    except OSError:
        return out
    for task in tasks:
        try:
            text = (task / "children").read_text()
        except OSError:
            continue
        for c in text.split():
            out.add(int(c))
            out |= children(int(c))
    return out


def servers_under(root: int) -> set[int]:
    """llama-server processes descending from `root` (the tmux pane's shell)."""
    found = set()
    for pid in children(root):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "llama-server":
                found.add(pid)
        except OSError:
            continue
    return found
