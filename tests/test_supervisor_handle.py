"""One way to launch, one handle: every llama-server start goes through `server.spawn.spawn`
(own process group, parent-death signal), and both handles report what the server really runs with."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.launch import probe_launch
from tests.helpers.llama import llama_server
from tests.helpers.supervisor_util import BASE_ARGS, settings_of
from tui.core.server import supervisor as supmod
from tui.core.server.attach import Attachment
from tui.core.server.events import ServerState
from tui.core.server.handle import RunningSettings, ServerHandle
from tui.core.server.preset_check import check_with_server
from tui.core.server.process import child_env
from tui.core.server.supervisor import Supervisor


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The argv of every child the supervisor spawns (through the one spawner)."""
    seen: list[list[str]] = []
    real = supmod.spawn

    def recording(argv, **kw):  # noqa: ANN001, ANN003, ANN202 - mirrors spawn.spawn
        seen.append([str(a) for a in argv])
        return real(argv, **kw)

    monkeypatch.setattr(supmod, "spawn", recording)
    return seen


def test_child_env_is_the_one_sanitiser() -> None:
    env = child_env({"LLAMA_ARG_CTX_SIZE": "1", "LLAMA_API_KEY": "k", "PATH": "/bin", "LLAMA_CACHE": "/c"})
    assert env == {"PATH": "/bin", "LLAMA_CACHE": "/c"}


def test_preset_check_runs_through_the_supervisor(server_bin: Path, tmp_path: Path, spawned: list[list[str]]) -> None:
    ini = tmp_path / "p.ini"
    ini.write_text("version = 1\n\n[*]\nmmap = false\n\n[a]\nmodel = /nowhere.gguf\n")
    ok, msg = check_with_server(server_bin, ini)
    assert not ok and msg == "failed to initialize router models: option 'mmap' not recognized in preset '*'"
    assert len(spawned) == 1 and "--models-preset" in spawned[0] and "--no-models-autoload" in spawned[0]
    ini.write_text("version = 1\n\n[a]\nmodel = /nowhere.gguf\n")
    assert check_with_server(server_bin, ini) == (True, "llama-server loaded the preset and started in router mode.")
    assert len(spawned) == 2


def test_calibration_launch_runs_through_the_supervisor(server_bin: Path, tiny_models: dict[str, Path],
                                                         spawned: list[list[str]]) -> None:
    res = probe_launch(server_bin, ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS], timeout_s=60)
    assert res.ready and res.returncode == 0 and "listening on" in res.log
    assert spawned and spawned[0][0] == str(server_bin) and res.report.to_dict()["totals"]["weights"] > 0


def test_running_settings_from_settings_follow_llama_cpp() -> None:
    rs = RunningSettings.from_settings(settings_of(["-m", "m.gguf", "-c", "2048", "-np", "2", "--spec-type", "draft-mtp"]))
    assert (rs.source, rs.model, rs.ctx, rs.slots, rs.mtp, rs.n_max) == ("launched", "m.gguf", 2048, 2, True, 3)
    assert rs.label() == "MTP n3"
    off = RunningSettings.from_settings(settings_of(["-m", "m.gguf", "--spec-type", "none,draft-mtp"]))  # `none` disables all
    assert off.mtp is False and off.n_max is None and off.label() == "no MTP"


def test_running_settings_from_server_mark_unknowns() -> None:
    props = {"model_path": "/m.gguf", "total_slots": 2, "build_info": "b11434-x",
             "default_generation_settings": {"n_ctx": 4096}}
    slots = [{"id": 0, "n_ctx": 4096, "speculative": True}, {"id": 1, "n_ctx": 4096, "speculative": True}]
    rs = RunningSettings.from_server(props, slots)
    assert (rs.source, rs.model, rs.ctx, rs.slots, rs.mtp, rs.n_max) == ("server", "/m.gguf", 4096, 2, True, None)
    assert rs.label() == "MTP n?"
    assert RunningSettings.from_server(props, slots, {0: 4.0, 1: 3.0}).label() == "MTP n2"
    unknown = RunningSettings.from_server(props, None)  # --no-slots: speculation is not told
    assert unknown.mtp is None and unknown.label() == "MTP?"


def test_both_handles_report_what_the_server_runs(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    extra = ["--spec-type", "draft-mtp", "--spec-draft-n-max", "2"]
    with llama_server(server_bin, tiny_models["tiny-mtp"], extra, tmp_path) as srv:
        sup: Supervisor = srv.sup
        assert isinstance(sup, ServerHandle)
        launched = sup.running_settings()
        assert launched is not None and launched.source == "launched"
        assert (launched.mtp, launched.n_max, launched.ctx, launched.slots) == (True, 2, 4096, 1)
        with Attachment(srv.url, poll_interval=0.05) as att:
            assert isinstance(att, ServerHandle)
            assert att.wait_ready(30) == ServerState.READY
            told = att.running_settings()
            assert told is not None and told.source == "server"
            assert (told.mtp, told.ctx, told.slots, told.model) == (True, 4096, 1, str(tiny_models["tiny-mtp"]))
            assert told.n_max is None  # not told before a speculative request ran
            srv.post("/completion", {"prompt": "Hello there", "n_predict": 8})
            after = att.running_settings()
            assert after is not None and after.n_max == 2 and after.label() == "MTP n2"


def test_cli_attached_probe_is_labelled_from_the_server(server_bin: Path, tiny_models: dict[str, Path],
                                                         tmp_path: Path) -> None:
    """`mtp-tune probe --attach URL` (probe_attached): no settings are known, the stored run still says MTP n3."""
    from tui.core.probes.run_types import RunConfig
    from tui.core.probes.session import probe_attached
    from tui.core.probes.suites import ProbePrompt, Suite
    from tui.core.results.store import Store

    extra = ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]
    with llama_server(server_bin, tiny_models["tiny-mtp"], extra, tmp_path) as srv, \
            Store(tmp_path / "r.sqlite") as store:
        suite = Suite("one", (ProbePrompt(name="capital", raw="The capital of France is"),))
        run = probe_attached(srv.url, suite, RunConfig(repeat=1, n_predict=16), store=store)
        assert run.status == "ok", run.error
        row = store.require(run.run_id)
        assert row.mtp is True and row.label == "MTP n3"
        assert row.server is not None and row.server["running"]["n_max"] == 3
