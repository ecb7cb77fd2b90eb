"""Router mode (`--models-preset FILE` + a model name) with the real llama-server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.supervisor_util import FINAL, Recorder, make_supervisor, pid_gone
from tui.core.server.client import LlamaClient
from tui.core.server.failures import FailureKind
from tui.core.server.events import ServerState
from tui.core.server.supervisor import Supervisor


@pytest.fixture(scope="module")
def preset(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, Path]) -> Path:
    path = tmp_path_factory.mktemp("router") / "models.ini"
    path.write_text(
        "version = 1\n\n[*]\nc = 4096\nparallel = 1\nthreads = 1\nthreads-batch = 1\nmetrics = true\n\n"
        f"[tiny-mtp]\nmodel = {tiny_models['tiny-mtp']}\nalias = mtp\nspec-type = draft-mtp\nspec-draft-n-max = 2\n\n"
        f"[tiny-nomtp]\nmodel = {tiny_models['tiny-nomtp']}\n\n"
        "[broken]\nmodel = /nonexistent/dir/x.gguf\n\n"
        f"[nomtp-with-mtp]\nmodel = {tiny_models['tiny-nomtp']}\nspec-type = draft-mtp\n"
    )
    return path


@pytest.fixture(scope="module")
def router(server_bin: Path, preset: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    sup = make_supervisor(server_bin, ["--models-preset", str(preset)], tmp_path_factory.mktemp("router-logs"),
                          router_model="tiny-mtp")
    rec = Recorder()
    sup.add_state_listener(rec)
    sup.start()
    assert sup.wait_ready(60) == ServerState.READY, sup.tail(30)
    sup.recorder = rec  # type: ignore[attr-defined]
    yield sup
    sup.close()


async def test_ready_means_the_model_is_loaded(router: Supervisor) -> None:
    router.events.flush()
    states = router.recorder.states()  # type: ignore[attr-defined]
    assert states[0] == ServerState.STARTING and states[-1] == ServerState.READY
    assert ServerState.LOADING in states  # router up (/health 200) but the model still loading
    async with LlamaClient(router.base_url, model="tiny-mtp") as c:  # type: ignore[arg-type]
        st = await c.model_status()
        assert st is not None and st["value"] == "loaded"
        assert (await c.model_status("tiny-nomtp"))["value"] == "unloaded"  # type: ignore[index]
        assert await c.load_model() is False  # already running
        r = await c.complete("Hello world", n_predict=32, temperature=0)
        assert r.draft_n > 0 and r.acceptance == 1.0
        m = await c.metrics()  # proxied to the child with ?model=
        assert sorted(m.accepted_per_position) == [0, 1]  # spec-draft-n-max = 2 from the preset
        assert await c.speculative_enabled() is True


async def test_model_without_drafts_has_no_draft_keys(router: Supervisor) -> None:
    async with LlamaClient(router.base_url, model="tiny-nomtp") as c:  # type: ignore[arg-type]
        r = await c.complete("Hello world", n_predict=16, temperature=0)  # autoloads the model
        assert "draft_n" not in r.timings and "draft_n_accepted" not in r.timings
        assert r.draft_n == 0 and r.acceptance is None
        assert await c.speculative_enabled() is False


def test_alias_is_accepted(server_bin: Path, preset: Path, tmp_path: Path) -> None:
    sup = make_supervisor(server_bin, ["--models-preset", str(preset)], tmp_path, router_model="mtp")
    try:
        sup.start()
        assert sup.wait_ready(60) == ServerState.READY
    finally:
        sup.close()


@pytest.mark.parametrize(
    ("model", "kind", "needle"),
    [
        ("broken", FailureKind.MISSING_MODEL, "/nonexistent/dir/x.gguf"),
        ("nomtp-with-mtp", FailureKind.NO_MTP_LAYERS, "MTP"),
        ("nope", FailureKind.ROUTER_MODEL_NOT_FOUND, "tiny-mtp"),
    ],
)
def test_router_model_failures(server_bin: Path, preset: Path, tmp_path: Path, model: str, kind: FailureKind,
                               needle: str) -> None:
    sup = make_supervisor(server_bin, ["--models-preset", str(preset)], tmp_path, router_model=model)
    try:
        launch = sup.start()
        assert sup.wait_for(FINAL, 60) == ServerState.FAILED, sup.tail(20)
        f = sup.failure
        assert f is not None and f.kind == kind and needle in f.message, f
        assert pid_gone(launch.pid)  # type: ignore[arg-type]  # the router was stopped, children with it
    finally:
        sup.close()


def test_bad_preset_key_fails_at_startup(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    ini = tmp_path / "bad.ini"
    ini.write_text(f"version = 1\n[a]\nmodel = {tiny_models['tiny-mtp']}\nmmap = 1\n")
    sup = make_supervisor(server_bin, ["--models-preset", str(ini)], tmp_path, router_model="a")
    try:
        sup.start()
        assert sup.wait_for(FINAL, 60) == ServerState.FAILED
        f = sup.failure
        assert f is not None and f.kind == FailureKind.PRESET_ERROR and f.flag_or_file == "mmap"
        assert "load-mode" in f.fix
    finally:
        sup.close()


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def test_model_child_crash_after_ready_is_a_failure(server_bin: Path, preset: Path, tmp_path: Path) -> None:
    """The router stays up when its model's child dies; the supervisor must not keep saying READY."""
    import os
    import signal

    sup = make_supervisor(server_bin, ["--models-preset", str(preset)], tmp_path, router_model="tiny-mtp")
    try:
        sup.start()
        assert sup.wait_ready(60) == ServerState.READY
        children = _children(sup.pid)  # type: ignore[arg-type]
        assert children, "the router should have spawned the model's child"
        for child in children:
            os.kill(child, signal.SIGKILL)
        assert sup.wait_for(FINAL, 30) == ServerState.FAILED, sup.tail(10)
        assert sup.failure is not None and sup.failure.kind == FailureKind.ROUTER_MODEL_FAILED, sup.failure
        assert "tiny-mtp" in sup.failure.message
    finally:
        sup.close()
    assert pid_gone(sup.launch.pid, 10)  # type: ignore[union-attr]
