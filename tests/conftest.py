"""Shared fixtures: the real llama-server (found or built once), generated tiny models, and a
hermetic environment so no user config, cache or LLAMA_ARG_* variable leaks into a test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.range_server import LoopbackHub, serve
from tui.core.server import provision
from tui.core.demo.tiny_model import PRESETS, write_tiny_model

#: Models generated once per session; small-mtp-q8_0 (25 MB) only on request.
DEFAULT_MODELS = ("tiny-mtp", "tiny-nomtp", "tiny-mtp-a50", "tiny-mtp-random", "tiny-mtp-q8_0", "tiny-moe-mtp")

_REAL_CACHE = provision.cache_dir()  # captured before any test redirects XDG dirs


@pytest.fixture(autouse=True)
def hermetic_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Temp XDG dirs and LLAMA_CACHE, no LLAMA_ARG_* (llama-server reads all of these)."""
    root = tmp_path_factory.mktemp("env")
    for var in [v for v in os.environ if v.startswith("LLAMA_ARG_") or v in (
            "LLAMA_API_KEY", "CUDA_VISIBLE_DEVICES", "HF_TOKEN", "HF_ENDPOINT", "MODEL_ENDPOINT")]:
        monkeypatch.delenv(var, raising=False)
    for var, sub in (
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_STATE_HOME", "state"),
        ("LLAMA_CACHE", "llama-cache"),
        ("MTP_TUNE_CONFIG_DIR", "mtp-config"),
        ("MTP_TUNE_DATA_DIR", "mtp-data"),
        ("MTP_TUNE_EXACT_DIR", "mtp-exact"),  # exact mode's dry runs, not the real cache
        ("MTP_TUNE_REMOTE_DIR", "mtp-remote"),  # remote headers and Hub listings, not the real cache
    ):
        (root / sub).mkdir()
        monkeypatch.setenv(var, str(root / sub))
    # The build cache stays the real one: rebuilding llama-server per test would take 15 minutes.
    monkeypatch.setenv("MTP_TUNE_CACHE_DIR", str(_REAL_CACHE))
    monkeypatch.delenv(provision.ENV_SERVER, raising=False)
    yield root


@pytest.fixture(scope="session")
def server_bin() -> Path:
    """The real llama-server: $MTP_TUNE_TEST_SERVER, else the cached build (built on first use)."""
    env = os.environ.get("MTP_TUNE_TEST_SERVER")
    if env:
        return Path(env)
    cached = provision.cached_server()
    if cached:
        return cached
    return provision.build_server(progress=lambda ev: print(f"[build] {ev.phase} {ev.done}/{ev.total} {ev.message}"))


@pytest.fixture(scope="session")
def rpc_server_bin(server_bin: Path) -> Path:
    path = provision.rpc_server_for(server_bin)
    if path is None:
        pytest.fail(f"ggml-rpc-server not found next to {server_bin}; the cached build includes it")
    return path


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Generated GGUFs by preset name (see tui.core.demo.tiny_model.PRESETS)."""
    out = tmp_path_factory.mktemp("models")
    return {name: write_tiny_model(out / f"{name}.gguf", PRESETS[name]) for name in DEFAULT_MODELS}


@pytest.fixture(scope="session")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("small") / "small-mtp-q8_0.gguf", PRESETS["small-mtp-q8_0"])


def server_env(root: Path) -> dict[str, str]:
    """A child environment for llama-server: no LLAMA_ARG_*, config and cache under `root`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    env["XDG_CONFIG_HOME"] = str(root / "xdg-config")
    env["LLAMA_CACHE"] = str(root / "llama-cache")
    return env


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, hermetic_env: Path) -> Iterator[LoopbackHub]:
    """The loopback file server with the Hub's routes (tests/helpers/range_server.py), which
    `HF_ENDPOINT` points to: no test reaches the real Hugging Face Hub. `HF_HOME` is the test's own
    (no stored token, no registry cache). A module extends it with `def hub(hub): hub.add_repo(...)`."""
    with serve() as h:
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.setenv("HF_HOME", str(hermetic_env / "hf-home"))
        yield h


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every Settings the sweep's supervisor backend launched, in order (the real launch still runs)."""
    from tui.core.sweep.backend import SupervisorBackend

    seen: list[Any] = []
    real = SupervisorBackend.launch

    def spy(self: SupervisorBackend, settings: Any, cancel: Any) -> Any:
        seen.append(settings)
        return real(self, settings, cancel)

    monkeypatch.setattr(SupervisorBackend, "launch", spy)
    return seen
