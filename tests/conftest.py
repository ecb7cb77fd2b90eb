"""Shared fixtures: the real llama-server (found or built once), generated tiny models, and a
hermetic environment so no user config, cache or LLAMA_ARG_* variable leaks into a test.

Test tiers: a test that uses a fixture in SERVER_FIXTURES (directly or through another fixture) is marked
`server` at collection, so `pytest -m "not server"` (the fast tier) never needs llama-server; a hand-written
`server` marker is kept only where a test reaches the server some other way. In the fast tier the build cache
is an empty folder and any build stops in one sentence naming the test, so a test that still reaches the
server fails loudly instead of building llama-server (6 minutes) or leaning on a cached build.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _pytest.mark.expression import Expression  # how `-m` reads its expression: the tier is decided alike

from tests.helpers.range_server import LoopbackHub, serve
from tui.core.server import provision
from tui.core.demo.tiny_model import PRESETS, write_tiny_model

#: Models generated once per session; small-mtp-q8_0 (25 MB) only on request.
DEFAULT_MODELS = ("tiny-mtp", "tiny-nomtp", "tiny-mtp-a50", "tiny-mtp-random", "tiny-mtp-q8_0", "tiny-moe-mtp")

_REAL_CACHE = provision.cache_dir()  # captured before any test redirects XDG dirs

#: Fixtures that need the real llama-server binary (found, or built on first use).
SERVER_FIXTURES = frozenset({"server_bin"})

_FAST_TIER = pytest.StashKey[bool]()
_CURRENT_TEST = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """The fast tier is any run whose `-m` expression leaves out `server` tests."""
    markexpr = config.getoption("markexpr", "") or ""
    config.stash[_FAST_TIER] = bool(markexpr) and not Expression.compile(markexpr).evaluate(
        lambda name, **_: name == "server")
    config.stash[_CURRENT_TEST] = ""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `server` from the fixtures a test uses, before `-m` deselects: no hand marker to forget."""
    for item in items:
        if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Remember the test being set up, so a session fixture's refusal can name it."""
    item.config.stash[_CURRENT_TEST] = item.nodeid


_FAST_TIER_BUILDS = 'the fast tier (-m "not server") never builds llama-server, yet this test did'


def _fast_tier_refusal(config: pytest.Config) -> str:
    return (f"{config.stash[_CURRENT_TEST]} reaches llama-server in the fast tier (-m \"not server\"), which "
            "never builds or uses one: give it the server_bin fixture or a `server` marker.")


@pytest.fixture(autouse=True)
def hermetic_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                 request: pytest.FixtureRequest) -> Iterator[Path]:
    """Temp XDG dirs and LLAMA_CACHE, no LLAMA_ARG_* (llama-server reads all of these); in the fast tier
    also no build cache and no build (see the module's docstring)."""
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
        ("MTP_TUNE_HEADER_DIR", "mtp-headers"),  # parsed GGUF headers, not the real cache
        ("MTP_TUNE_QUALITY_DIR", "mtp-quality"),  # reference logits and quality results, not the real cache
    ):
        (root / sub).mkdir()
        monkeypatch.setenv(var, str(root / sub))
    monkeypatch.delenv(provision.ENV_SERVER, raising=False)
    if request.config.stash[_FAST_TIER]:
        (root / "cache").mkdir()
        monkeypatch.setenv("MTP_TUNE_CACHE_DIR", str(root / "cache"))
        # A build, in this process or a child mtp-tune, reads its source package from here first: a path that
        # is not there stops it at once, and the path says why and names the test.
        monkeypatch.setenv(provision.ENV_SDIST, str(root / _FAST_TIER_BUILDS / request.node.nodeid))
    else:
        # The build cache stays the real one: rebuilding llama-server per test would take 15 minutes.
        monkeypatch.setenv("MTP_TUNE_CACHE_DIR", str(_REAL_CACHE))
    yield root


@pytest.fixture(scope="session")
def server_bin(request: pytest.FixtureRequest) -> Path:
    """The real llama-server: $MTP_TUNE_TEST_SERVER, else the cached build (built on first use); a refusal
    naming the test in the fast tier, which a test reaches only through `request.getfixturevalue`."""
    if request.config.stash[_FAST_TIER]:
        pytest.fail(_fast_tier_refusal(request.config), pytrace=False)
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
    """Every Settings the lab's supervisor launcher launched, in order, as sent (on stand-ins: translated
    onto them); the real launch still runs."""
    from tui.core.lab.launcher import SupervisorLauncher

    seen: list[Any] = []
    real = SupervisorLauncher.launch

    def spy(self: SupervisorLauncher, settings: Any, cancel: Any) -> Any:
        seen.append(self.translate(settings))
        return real(self, settings, cancel)

    monkeypatch.setattr(SupervisorLauncher, "launch", spy)
    return seen
