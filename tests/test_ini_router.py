"""An exported preset, loaded by the real llama-server in router mode, serves requests with the
exported settings; `profile check` agrees with the real server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tui.cli import main
from tui.core.presets import read_preset
from tui.core.presets.profiles import save_profile
from tui.core.options.settings import Settings
from tui.core.server.process import child_env


LISTEN = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
PRESET_HEAD = "version = 1\n\n; shared by every model\n[*]\nt = 1\ntb = 1\nnp = 1\n"


@dataclass
class Router:
    url: str
    proc: subprocess.Popen[str]
    log: list[str]

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 120.0) -> dict | list:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, Path]) -> Iterator[Path]:
    """Two profiles exported with `mtp-tune profile export --ini` into an existing preset file."""
    root = tmp_path_factory.mktemp("router")
    mp = pytest.MonkeyPatch()
    mp.setenv("MTP_TUNE_CONFIG_DIR", str(root / "config"))  # module scope: the autouse env is per test
    ini = root / "models.ini"
    ini.write_text(PRESET_HEAD)
    save_profile("mtp", Settings(model=str(tiny_models["tiny-mtp"]), ctx_size=2048, spec_type=["draft-mtp"],
                                 spec_draft_n_max=2, spec_draft_n_min=1, cache_type_k_draft="q8_0",
                                 cache_type_v_draft="q8_0", metrics=True))
    save_profile("plain", Settings(model=str(tiny_models["tiny-nomtp"]), ctx_size=1024, metrics=False))
    assert main(["profile", "export", "mtp", "--ini", str(ini), "--section", "tiny-mtp"]) == 0
    assert main(["profile", "export", "plain", "--ini", str(ini), "--section", "tiny-plain"]) == 0
    assert ini.read_text().startswith(PRESET_HEAD)
    yield ini
    mp.undo()


@pytest.fixture(scope="module")
def router(exported: Path, server_bin: Path) -> Iterator[Router]:
    """`llama-server --models-preset FILE` with no model: router mode; stopped with its children."""
    root = exported.parent
    env = child_env()
    env["XDG_CONFIG_HOME"] = str(root / "xdg")
    env["LLAMA_CACHE"] = str(root / "llama-cache")
    cmd = [str(server_bin), "--models-preset", str(exported), "--host", "127.0.0.1", "--port", "0", "--log-colors", "off"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True, stdin=subprocess.DEVNULL)
    log: list[str] = []
    port: list[str] = []
    listening = threading.Event()

    def drain() -> None:  # keeps the pipe empty for the whole module
        assert proc.stdout is not None
        for line in proc.stdout:
            log.append(line)
            if not port and (m := LISTEN.search(line)):
                port.append(m.group(1))
                listening.set()
        listening.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        assert listening.wait(timeout=60) and port, "router did not start:\n" + "".join(log[-20:])
        r = Router(f"http://127.0.0.1:{port[0]}", proc, log)
        models = r.request("GET", "/models", timeout=10)  # readiness: the router lists the presets
        assert {m["id"] for m in models["data"]} == {"tiny-mtp", "tiny-plain"}  # type: ignore[index]
        yield r
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_routed_request_uses_the_exported_mtp_settings(router: Router) -> None:
    chat = router.request("POST", "/v1/chat/completions", {
        "model": "tiny-mtp", "messages": [{"role": "user", "content": "The quick brown fox"}],
        "max_tokens": 16, "temperature": 0,
    })
    assert chat["choices"][0]["message"]["content"]  # type: ignore[index]
    done = router.request("POST", "/completion", {"model": "tiny-mtp", "prompt": "The quick brown fox", "n_predict": 16,
                                                  "temperature": 0, "cache_prompt": False})
    assert "draft-mtp" in done["generation_settings"]["speculative.types"]  # type: ignore[index]
    assert done["timings"].get("draft_n", 0) > 0  # type: ignore[index]  # the MTP head really drafted
    slots = router.request("GET", "/slots?model=tiny-mtp", timeout=30)
    assert len(slots) == 1  # np = 1 from [*]
    assert slots[0]["n_ctx"] == 2048 and slots[0]["speculative"] is True  # type: ignore[index]
    models = {m["id"]: m for m in router.request("GET", "/models", timeout=10)["data"]}  # type: ignore[index]
    args = models["tiny-mtp"]["status"]["args"]
    for flag, value in (("--spec-draft-n-max", "2"), ("--cache-type-k-draft", "q8_0"), ("--ctx-size", "2048"), ("--threads", "1")):
        assert args[args.index(flag) + 1] == value
    assert "--metrics" in args


def test_routed_request_uses_the_exported_plain_settings(router: Router) -> None:
    done = router.request("POST", "/completion", {"model": "tiny-plain", "prompt": "Hello", "n_predict": 4, "temperature": 0})
    assert "draft-mtp" not in done["generation_settings"]["speculative.types"]  # type: ignore[index]
    slots = router.request("GET", "/slots?model=tiny-plain", timeout=30)
    assert slots[0]["n_ctx"] == 1024 and slots[0]["speculative"] is False  # type: ignore[index]
    with pytest.raises(urllib.error.HTTPError) as e:
        router.request("POST", "/completion", {"model": "nope", "prompt": "x"}, timeout=10)
    assert e.value.code == 400


def test_check_agrees_with_the_real_server(exported: Path, server_bin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "check", str(exported), "--json", "--server-bin", str(server_bin)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == {"ok": True, "problems": [], "server_accepts": True}
    bad = Path(__file__).parent / "data" / "ini" / "unknown_keys.ini"
    assert main(["profile", "check", str(bad), "--server-bin", str(server_bin)]) == 1
    out = capsys.readouterr().out
    assert "REFUSES the file: failed to initialize router models: option 'mmap' not recognized in preset '*'" in out
    assert read_preset(exported).server_accepts
