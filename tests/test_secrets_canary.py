"""A canary Hugging Face token, given once as `-hft` and once as HF_TOKEN, turns up nowhere (issue 29).

Each test runs the CLI as a user does (a child process, mtp-tune's config, data and cache folders,
llama.cpp's cache and HF_HOME under tmp_path), then searches every file there (binary ones too: the
results database and its WAL), every output and log for the token. The loopback Hub's repository is
gated on the canary, so the token is known to have been used where it belongs (the Hub's routes):
a test cannot pass by never sending it. A second loopback host, not the Hub, must never receive it;
llama-server gets it in its environment, never in /proc/PID/cmdline.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.range_server import LoopbackHub, serve
from tests.helpers.remote_cli import child_env
from tests.helpers.supervisor_util import end_child, lines_until
from tui.core.options.settings import Settings

REPO = Path(__file__).resolve().parent.parent
#: llama-server accepts a token as "hf_" and at least 34 letters and digits (it ignores others).
CANARY = "hf_CANARY0123456789abcdefghijklmnopqrstuv"
NEEDLE = CANARY[3:]  # also found in a text that cut the "hf_" off
GATED = "org/tiny-GGUF"
CHILD_TIMEOUT_S = 120


@dataclass
class Canary:
    """One way of giving the token, the environment every command runs in, and what they printed."""

    how: str  # "-hft" or "HF_TOKEN"
    home: Path
    env: dict[str, str]
    hub: LoopbackHub
    outputs: list[str] = field(default_factory=list)

    @property
    def token_args(self) -> list[str]:
        return ["-hft", CANARY] if self.how == "-hft" else []

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`python -m tui.cli ARGS` (bounded), its output kept for the search; no traceback."""
        out = subprocess.run([sys.executable, "-m", "tui.cli", *args], cwd=REPO, env=self.env, capture_output=True,
                             text=True, timeout=CHILD_TIMEOUT_S, stdin=subprocess.DEVNULL)
        self.outputs += [out.stdout, out.stderr]
        assert "Traceback" not in out.stderr, out.stderr
        return out

    def leaks(self) -> list[str]:
        """Every file under the test's home and every output that holds the token."""
        found = [str(p) for p in sorted(self.home.rglob("*"))
                 if p.is_file() and not p.is_symlink() and NEEDLE.encode() in p.read_bytes()]
        return found + [f"output {i}: {o[:300]}" for i, o in enumerate(self.outputs) if NEEDLE in o]


@pytest.fixture(params=["-hft", "HF_TOKEN"])
def canary(request: pytest.FixtureRequest, tmp_path: Path, tiny_models: dict[str, Path]) -> Iterator[Canary]:
    home = tmp_path / "home"
    env = child_env()
    for var in ("MTP_TUNE_REMOTE_DIR", "MTP_TUNE_EXACT_DIR", "MTP_TUNE_LLAMA_SERVER", "HF_TOKEN"):
        env.pop(var, None)  # the remote and exact caches at their defaults: inside the searched cache folder
    for var, sub in (("MTP_TUNE_CONFIG_DIR", "config"), ("MTP_TUNE_DATA_DIR", "data"), ("MTP_TUNE_CACHE_DIR", "cache"),
                     ("LLAMA_CACHE", "llama-cache"), ("HF_HOME", "hf-home"), ("XDG_CONFIG_HOME", "xdg-config")):
        env[var] = str(home / sub)
    if request.param == "HF_TOKEN":
        env["HF_TOKEN"] = CANARY
    with serve() as hub:
        hub.add_repo(GATED, {"tiny-Q8_0.gguf": tiny_models["tiny-mtp"]}, token=CANARY)
        env["HF_ENDPOINT"] = hub.url
        yield Canary(request.param, home, env, hub)


def test_plan_variants_and_profiles_keep_the_token_to_themselves(canary: Canary, tiny_models: dict[str, Path]) -> None:
    plan = canary.cli("plan", "-hf", f"{GATED}:Q8_0", *canary.token_args, "--gpus", "cpu", "-c", "1024", "--json")
    assert plan.returncode == 0, plan.stderr  # the gated repo let it in: the token went to the Hub
    assert json.loads(plan.stdout)["model"]
    variants = canary.cli("variants", GATED, *canary.token_args, "--gpus", "cpu", "-c", "1024")
    assert variants.returncode == 0, variants.stderr
    hub_auth = {h.auth for h in canary.hub.log if "/api/models/" in h.path}
    assert hub_auth == {f"Bearer {CANARY}"}, hub_auth
    # the token in a pasted command (as a flag, or as an environment assignment in front of it)
    given = "-hft " + CANARY if canary.how == "-hft" else ""
    front = f"HF_TOKEN={CANARY} " if canary.how == "HF_TOKEN" else ""
    imp = canary.cli("profile", "import", "--command", f"{front}llama-server -m {tiny_models['tiny-mtp']} {given} -c 512",
                     "--name", "p")
    assert imp.returncode == 0, imp.stderr
    assert "token was not stored" in imp.stdout, imp.stdout
    out = canary.home / "out"
    out.mkdir()
    for how in (["--argv"], ["--toml", str(out / "p.toml")], ["--ini", str(out / "presets.ini")]):
        exp = canary.cli("profile", "export", "p", *how)
        assert exp.returncode == 0, exp.stderr
    assert canary.cli("profile", "show", "p").returncode == 0
    assert canary.leaks() == []


def test_a_url_on_another_host_gets_no_token(canary: Canary, tiny_models: dict[str, Path]) -> None:
    """`plan -mu` of a file on a second loopback host (not HF_ENDPOINT's) sends it no Authorization."""
    with serve() as other:
        url = other.add_file("m.gguf", tiny_models["tiny-mtp"])
        out = canary.cli("plan", "-mu", url, *canary.token_args, "--gpus", "cpu", "-c", "1024", "--json")
        assert out.returncode == 0, out.stderr
        hits = other.log
    assert hits and [h.auth for h in hits] == [""] * len(hits), [(h.path, h.auth) for h in hits]
    assert canary.leaks() == []


def _server_env(canary: Canary, server_bin: Path) -> dict[str, str]:
    return {**canary.env, "MTP_TUNE_LLAMA_SERVER": str(server_bin)}


@contextmanager
def _served(canary: Canary, server_bin: Path, *args: str) -> Iterator[int]:
    """`mtp-tune serve ARGS` until ready, yielding the server's pid; then Ctrl-C, and it must stop cleanly."""
    cmd = [sys.executable, "-m", "tui.cli", "serve", *args, *canary.token_args, "-c", "1024", "-np", "1", "-t", "1",
           "-tb", "1", "--ready-timeout", "60"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=_server_env(canary, server_bin), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    server_pid = None
    try:
        lines = lines_until(proc, "ready at", 90)
        m = re.match(r"ready at \S+ after [\d.]+ s \(pid (\d+)\)", lines[-1])
        assert m, lines
        server_pid = int(m.group(1))
        yield server_pid
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
        canary.outputs += [*lines, rest, err]
        assert proc.returncode == 0, err
    finally:
        end_child(proc, server_pid)


def test_serve_gives_the_token_in_the_environment_never_the_argv(canary: Canary, server_bin: Path,
                                                                tiny_models: dict[str, Path]) -> None:
    with _served(canary, server_bin, "-m", str(tiny_models["tiny-mtp"])) as server_pid:
        cmdline = Path(f"/proc/{server_pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{server_pid}/environ").read_bytes().split(b"\0")
        assert NEEDLE.encode() not in cmdline and b"--model" in cmdline
        assert f"HF_TOKEN={CANARY}".encode() in environ  # the flag's token reached it, by its environment
    assert canary.leaks() == []


@pytest.mark.timeout(240)
def test_a_tune_downloads_with_the_token_and_keeps_it_nowhere(canary: Canary, server_bin: Path, tmp_path: Path) -> None:
    """A short tune of the gated repo: the real llama-server downloads it with the token (the Hub lets
    nobody else in), and the state, the database, the report, the saved profile, the launch logs and
    history never hold it; a wrapper records every argv the server was started with."""
    argv_log = tmp_path / "argv.log"
    wrapper = tmp_path / "llama-server"
    wrapper.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{argv_log}'\nexec '{server_bin}' \"$@\"\n")
    wrapper.chmod(0o755)
    report = canary.home / "out" / "tune.md"
    report.parent.mkdir(parents=True)
    out = canary.cli("tune", "-hf", f"{GATED}:Q8_0", *canary.token_args, "-b", "512", "-ctk", "f16", "-ctv", "f16",
                     "-ctkd", "f16", "-ctvd", "f16", "--workload", "64:16", "--gpus", "cpu", "--axis", "ubatch=128",
                     "--ab-passes", "0", "--save-best", "tuned", "--report", str(report), "--json",
                     "--server-bin", str(wrapper))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["result"]["best"] is not None
    blobs = [h for h in canary.hub.log if h.path.startswith("/blobs/") and h.method == "GET"]
    assert blobs, "llama-server never downloaded the gated model"
    assert report.exists() and argv_log.exists()
    assert NEEDLE not in argv_log.read_text()
    assert canary.leaks() == []


def test_a_launch_downloading_from_another_host_gets_no_token(canary: Canary, server_bin: Path,
                                                            tiny_models: dict[str, Path]) -> None:
    """llama-server sends its token as the bearer of a `-mu` download wherever it points; a launch whose
    URL is off the Hub endpoint's origin gets no HF_TOKEN at all (given by `-hft` or inherited), so the
    other host's requests carry no Authorization and the server's environment holds no token."""
    with serve() as other:
        url = other.add_file("m.gguf", tiny_models["tiny-mtp"])
        dest = canary.home / "downloads" / "m.gguf"  # `-mu` downloads to `-m` (without -m: router mode)
        dest.parent.mkdir(parents=True)
        with _served(canary, server_bin, "-m", str(dest), "-mu", url) as server_pid:
            environ = Path(f"/proc/{server_pid}/environ").read_bytes()
            assert NEEDLE.encode() not in environ and b"HF_TOKEN=" not in environ
        hits = [h for h in other.log if h.method == "GET"]
    assert hits, "llama-server never downloaded the model from the other host"
    assert [h.auth for h in other.log] == [""] * len(other.log), [(h.path, h.auth) for h in other.log]
    logs = list((canary.home / "data").rglob("server-*.log"))
    assert logs and any("HF_TOKEN not passed on" in p.read_text() for p in logs), logs
    assert canary.leaks() == []


def test_a_settings_repr_shows_no_secret() -> None:
    """A Settings in a log line, an assertion message or a traceback keeps the token and key masked."""
    s = Settings(model="m.gguf", api_key="the-key", extra_args=["-hft", CANARY, "--alias", "a"])
    text = repr(s)
    assert NEEDLE not in text and "the-key" not in text
    assert "'--alias', 'a'" in text and "model='m.gguf'" in text and text.startswith("Settings(")
