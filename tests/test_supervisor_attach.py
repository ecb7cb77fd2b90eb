"""Attach mode: the same states and client against a server mtp-tune did not start."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.helpers.supervisor_util import BASE_ARGS, MTP_ARGS, Recorder, make_supervisor
from tui.core.server.attach import Attachment
from tui.core.server.failures import FailureKind
from tui.core.server.memreport import parse_log
from tui.core.server.events import ServerState


async def test_attach_follows_a_running_server(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    # Another "user" starts the server; we only know its URL and log file.
    owner = make_supervisor(server_bin, ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS, *MTP_ARGS], tmp_path)
    owner.start()
    assert owner.wait_ready(60) == ServerState.READY
    assert owner.log_path is not None
    rec = Recorder()
    att = Attachment(owner.base_url, log_file=owner.log_path, poll_interval=0.05, gone_after=2)  # type: ignore[arg-type]
    att.add_state_listener(rec)
    try:
        with att:
            assert att.wait_ready(30) == ServerState.READY
            async with att.client() as c:
                r = await c.complete("Hello world", n_predict=16, temperature=0)
                assert r.draft_n > 0
            # The memory report comes from tailing the log file from its start.
            assert att.sync_log(10)
            snap = att.memory_snapshot()
            assert snap is not None and snap["totals"]["weights"] > 0
            assert snap == parse_log(owner.log_path.read_text()).to_dict()
            assert any("listening on" in ln for ln in att.tail())
            owner.stop()  # the server goes away under us
            assert att.wait_for([ServerState.EXITED], 30) == ServerState.EXITED
            f = att.failure
            assert f is not None and f.kind == FailureKind.EXITED and owner.base_url in f.message  # type: ignore[operator]
        assert att.state == ServerState.STOPPED
    finally:
        owner.close()
    att.events.flush()
    states = rec.states()
    assert states[0] == ServerState.STARTING and ServerState.READY in states
    assert states[-2:] == [ServerState.EXITED, ServerState.STOPPED]


def test_attach_to_nothing_stays_starting_and_has_no_memory_report() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Attachment(f"http://127.0.0.1:{port}", poll_interval=0.05) as att:
        assert att.wait_ready(0.3) == ServerState.STARTING
        assert att.memory_report() is None and att.memory_snapshot() is None


def test_attach_to_router_model(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    ini = tmp_path / "p.ini"
    ini.write_text(f"version = 1\n[*]\nc = 4096\nthreads = 1\nthreads-batch = 1\nparallel = 1\n"
                   f"[m]\nmodel = {tiny_models['tiny-mtp']}\nload-on-startup = true\n")
    owner = make_supervisor(server_bin, ["--models-preset", str(ini)], tmp_path, router_model="m")
    owner.start()
    try:
        assert owner.wait_ready(60) == ServerState.READY
        with Attachment(owner.base_url, model="m", poll_interval=0.05) as att:  # type: ignore[arg-type]
            assert att.wait_ready(30) == ServerState.READY
        with Attachment(owner.base_url, model="zzz", poll_interval=0.05) as att:  # type: ignore[arg-type]
            assert att.wait_for([ServerState.FAILED], 30) == ServerState.FAILED
            assert att.failure is not None and att.failure.kind == FailureKind.ROUTER_MODEL_NOT_FOUND
    finally:
        owner.close()
