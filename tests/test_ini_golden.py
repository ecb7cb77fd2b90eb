"""Golden preset files: the tricky INI cases, read as llama-server b11434 reads them.

Each `tests/data/ini/NAME.ini` has `NAME.expected.json`: whether the router accepts the file, the
model names it lists, and every problem (line, severity, key, message fragment). The `server` tests
load each file into the real router and compare: acceptance, the refusal message, and for accepted
files the exact argument list the router renders for every model (GET /models `status.args`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tui.core.presets import read_preset, render_args
from tui.core.server.process import child_env

DATA = Path(__file__).parent / "data" / "ini"
CASES = sorted(p.stem for p in DATA.glob("*.ini"))
LISTEN = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
#: Arguments the router injects into every model (host, port, alias, log colors) with their values.
INJECTED = {"--host", "--port", "--alias", "--log-colors"}


def expected(name: str) -> dict:
    return json.loads((DATA / f"{name}.expected.json").read_text())


@pytest.mark.parametrize("name", CASES)
def test_golden_problems(name: str) -> None:
    exp = expected(name)
    pf = read_preset(DATA / f"{name}.ini")
    assert pf.server_accepts is exp["server_accepts"]
    assert [m.model_name for m in pf.models] == exp["models"]
    got = [(p.line, p.severity, p.key, p.message) for p in pf.problems]
    assert len(got) == len(exp["problems"]), got
    for (line, sev, key, msg), (eline, esev, ekey, fragment) in zip(got, exp["problems"]):
        assert (line, sev, key) == (eline, esev, ekey), (line, sev, key, msg)
        assert fragment in msg, (fragment, msg)


def test_golden_cascade_values() -> None:
    """What each model of cascade.ini really gets: [*] under the section, booleans, cuts, precedence."""
    pf = read_preset(DATA / "cascade.ini")
    assert render_args(pf, "mtp") == [
        "--metrics", "--no-mmproj-auto", "--spec-draft-n-max", "3", "--cache-type-k-draft", "q4_0",
        "--spec-type", "draft-mtp,ngram-mod", "--ctx-size", "2048", "--no-cont-batching", "--fit", "on",
        "--model", "/models/tiny-mtp.gguf", "--parallel", "1", "--threads", "1",
    ]
    plain = render_args(pf, "plain")
    assert plain[plain.index("--chat-template-kwargs") + 1] == '{"enable_thinking":false}'
    assert plain[plain.index("--temperature") + 1] == '"0.7"'
    assert "--no-mmproj-auto" in plain and "--cache-ram" in plain
    assert render_args(pf, "repo:ud-q4_k_xl") == render_args(pf, "repo:Q4_K_XL")


def _router_models(server: Path, ini: Path, root: Path) -> tuple[bool, object]:
    """Start the router on `ini`; (True, GET /models) once it listens, or (False, error line)."""
    env = child_env()
    env["XDG_CONFIG_HOME"] = str(root / "xdg")
    env["LLAMA_CACHE"] = str(root / "cache")
    cmd = [str(server), "--models-preset", str(ini), "--host", "127.0.0.1", "--port", "0", "--log-colors", "off",
           "--no-models-autoload"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True, stdin=subprocess.DEVNULL)
    log: list[str] = []
    try:
        assert proc.stdout is not None
        for n, line in enumerate(proc.stdout):  # ends when the router exits; bounded by the pytest timeout
            log.append(line)
            if m := LISTEN.search(line):
                with urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/models", timeout=10) as r:
                    return True, json.load(r)
            assert n < 2000, "router kept logging without listening"
        return False, next((l for l in log if "failed to initialize router" in l), "".join(log[-3:]))
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


@pytest.mark.parametrize("name", CASES)
def test_golden_against_real_router(name: str, server_bin: Path, tmp_path: Path) -> None:
    exp = expected(name)
    pf = read_preset(DATA / f"{name}.ini")
    accepted, data = _router_models(server_bin, DATA / f"{name}.ini", tmp_path)
    assert accepted is exp["server_accepts"], data
    if not accepted:
        assert exp["server_error"] in str(data)
        ours = [p.message for p in pf.problems if p.rejects]
        assert any(exp["server_error"] in m for m in ours), ours
        return
    got: dict[str, list[str]] = {}
    for model in data["data"]:  # type: ignore[index]
        args = model["status"]["args"][1:]
        kept, i = [], 0
        while i < len(args):
            if args[i] in INJECTED:
                i += 2
                continue
            kept.append(args[i])
            i += 1
        got[model["id"]] = kept
    assert got == {m.model_name: render_args(pf, m.name) for m in pf.models}
