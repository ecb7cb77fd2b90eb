"""The supervisor against the real llama-server: start, ready, completion, restart, stop, logs."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import server_env
from tests.helpers.supervisor_util import (BASE_ARGS, FINAL, MTP_ARGS, Recorder, as_given, make_supervisor, pid_gone,
                                           settings_of)
from tui.core.options.redact import redact_argv
from tui.core.server import supervisor as supmod
from tui.core.server.client import LlamaClient
from tui.core.server.failures import FailureKind
from tui.core.server.memreport import parse_log
from tui.core.server.process import child_env
from tui.core.server.events import ServerState
from tui.core.server.supervisor import Supervisor, SupervisorError

HELPERS = Path(__file__).parent / "helpers"


def n_max_args(model: Path, n: int) -> list[str]:
    return ["-m", str(model), *BASE_ARGS, *MTP_ARGS, "--spec-draft-n-max", str(n)]


async def one_completion(url: str) -> tuple[dict, dict[int, float]]:
    async with LlamaClient(url) as c:
        r = await c.complete("Hello world", n_predict=48, temperature=0)
        m = await c.metrics()
    return r.timings, m.accepted_per_position


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lifecycle")


@pytest.fixture(scope="module")
def sup(server_bin: Path, tiny_models: dict[str, Path], root: Path) -> Iterator[Supervisor]:
    s = make_supervisor(server_bin, n_max_args(tiny_models["tiny-mtp"], 3), root, tail_lines=50)
    yield s
    s.close()


def test_start_ready_complete_restart_stop(sup: Supervisor, tiny_models: dict[str, Path]) -> None:
    rec = Recorder()
    sup.add_state_listener(rec)
    first = sup.start()
    assert sup.wait_ready(60) == ServerState.READY, sup.tail(20)
    assert first.seconds_to_ready is not None and first.seconds_to_ready > 0
    assert first.url == sup.base_url and first.host == "127.0.0.1"
    assert "-lv" in first.argv and "--log-colors" in first.argv and first.argv[0] == str(sup.binary)
    timings, per_pos = asyncio.run(one_completion(first.url))
    assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"]
    assert sorted(per_pos) == [0, 1, 2]  # one counter per draft position: n_max = 3
    assert any("n_max=3" in ln for ln in sup.tail()) or "n_max=3" in first.log_path.read_text()  # type: ignore[union-attr]

    second = sup.restart(settings_of(n_max_args(tiny_models["tiny-mtp"], 1)))
    assert sup.wait_ready(60) == ServerState.READY
    assert second.id != first.id and second.pid != first.pid
    assert pid_gone(first.pid)  # type: ignore[arg-type]
    assert second.port == first.port  # a stable URL across restarts
    timings, per_pos = asyncio.run(one_completion(second.url))
    assert sorted(per_pos) == [0]  # the new value is in effect: drafts are one token long
    assert "n_max=1" in second.log_path.read_text()  # type: ignore[union-attr]
    assert timings["draft_n"] > 0

    assert sup.stop() == 0
    assert sup.state == ServerState.STOPPED and sup.failure is None
    assert pid_gone(second.pid)  # type: ignore[arg-type]
    with pytest.raises(httpx.ConnectError):
        httpx.get(second.url + "/health", timeout=2, trust_env=False)

    assert sup.events.flush()
    for launch in (first, second):
        states = rec.states(launch.id)
        assert states[0] == ServerState.STARTING and states[-1] == ServerState.STOPPED
        assert states[-3:-1] == [ServerState.READY, ServerState.STOPPING]
        assert set(states) <= {ServerState.STARTING, ServerState.LOADING, ServerState.READY,
                               ServerState.STOPPING, ServerState.STOPPED}


def test_log_file_tail_and_memory_report(sup: Supervisor) -> None:
    launch = sup.start()
    assert sup.wait_ready(60) == ServerState.READY
    sup.stop()
    text = launch.log_path.read_text()  # type: ignore[union-attr]
    assert text.startswith(f"# mtp-tune launch {launch.id}")
    assert "llama_server: listening on" in text and text.rstrip().endswith("# exit code 0")
    tail = sup.tail()
    assert 0 < len(tail) <= 50 and tail[-1] in text
    assert launch.n_lines > 50  # more lines than the tail keeps
    # What the supervisor fed the memory parser line by line equals parsing the whole log afterwards.
    snap = sup.memory_snapshot()
    assert snap is not None and snap == parse_log(text).to_dict()
    assert snap["totals"]["weights"] > 0 and snap["draft"] is not None


def test_start_while_running_is_refused(sup: Supervisor) -> None:
    sup.start()
    try:
        with pytest.raises(SupervisorError, match="already"):
            sup.start()
    finally:
        sup.stop()


def test_log_listener_and_failing_listener(sup: Supervisor) -> None:
    lines: list[str] = []

    def boom(ev: object) -> None:
        raise RuntimeError("listener bug")

    undo_boom = sup.add_state_listener(boom)
    undo_lines = sup.add_log_listener(lambda ln: lines.append(ln.text))
    try:
        sup.start()
        assert sup.wait_ready(60) == ServerState.READY
        sup.stop()
        assert sup.events.flush(timeout=60), "event delivery stalled"
        assert any("listening on" in ln for ln in lines), lines[-5:]
    finally:
        undo_boom()
        undo_lines()


def test_started_from_short_lived_thread_keeps_running(sup: Supervisor) -> None:
    """The parent-death signal follows the forking thread; a UI worker thread must not take the server with it."""
    t = threading.Thread(target=sup.start)
    t.start()
    t.join(30)
    assert not t.is_alive()
    try:
        assert sup.wait_ready(60) == ServerState.READY
        timings, _ = asyncio.run(one_completion(sup.base_url))  # type: ignore[arg-type]
        assert timings["predicted_n"] == 48
        assert sup.state == ServerState.READY
    finally:
        sup.stop()


def test_llama_arg_env_is_stripped_unless_kept(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    env = server_env(tmp_path) | {"LLAMA_ARG_DRAFT_MAX": "4"}  # a removed option: the server refuses to start
    args = ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS]
    for keep, expect in ((False, ServerState.READY), (True, ServerState.FAILED)):
        s = Supervisor(server_bin, settings_of(args), env=env, keep_llama_env=keep, log_dir=tmp_path / "logs", ready_timeout=60)
        try:
            s.start()
            assert s.wait_ready(60) == expect
            if keep:
                assert s.failure is not None and s.failure.kind == FailureKind.REMOVED_ARG
                assert s.failure.flag_or_file == "LLAMA_ARG_DRAFT_MAX"
        finally:
            s.close()
    assert "LLAMA_ARG_X" not in child_env({"LLAMA_ARG_X": "1", "PATH": "/bin"})
    assert child_env({"LLAMA_ARG_X": "1"}, keep_llama_env=True) == {"LLAMA_ARG_X": "1"}


def test_free_port_taken_between_choice_and_bind_is_retried(server_bin: Path, tiny_models: dict[str, Path],
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        real = supmod.free_port
        picks = iter([taken])
        monkeypatch.setattr(supmod, "free_port", lambda host="127.0.0.1": next(picks, None) or real(host))
        s = make_supervisor(server_bin, ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS], tmp_path)
        rec = Recorder()
        s.add_state_listener(rec)
        try:
            s.start()
            assert s.wait_ready(60) == ServerState.READY
            assert s.port != taken and s.launch is not None and s.launch.port_retries == 1
        finally:
            s.close()
    s.events.flush()
    assert ServerState.FAILED not in rec.states()


def test_ready_timeout_stops_a_server_that_never_answers(tmp_path: Path) -> None:
    """A stand-in binary that never listens and ignores SIGTERM: timeout, then SIGTERM, then SIGKILL."""
    s = Supervisor(sys.executable, as_given([str(HELPERS / "hang_server.py"), "--stubborn"]), log_dir=tmp_path,
                   ready_timeout=2.0, stop_grace=0.3, poll_interval=0.05)
    try:
        launch = s.start()
        assert s.wait_for(FINAL, 30) == ServerState.FAILED
        f = s.failure
        assert f is not None and f.kind == FailureKind.READY_TIMEOUT
        assert "2 s" in f.message and "starting" in f.message and "slow.gguf" in f.message
        assert launch.exit_code == -9  # SIGTERM was ignored: SIGKILL after the grace period
        assert pid_gone(launch.pid)  # type: ignore[arg-type]
    finally:
        s.close()


def test_exit_seen_even_if_a_grandchild_keeps_the_pipe_open(tmp_path: Path) -> None:
    s = Supervisor(sys.executable, as_given([str(HELPERS / "exit_leaving_child.py")]), log_dir=tmp_path, ready_timeout=30)
    try:
        launch = s.start()
        assert s.wait_for(FINAL, 20) == ServerState.FAILED  # long before the grandchild's 60 s sleep ends
        assert launch.exit_code == 3
        line = next(ln for ln in s.tail() if "grandchild" in ln)
        assert pid_gone(int(line.split()[-1]))  # the straggler in the server's process group is killed
        assert s.failure is not None and s.failure.kind == FailureKind.UNKNOWN and "exit code 3" in s.failure.message
    finally:
        s.close()


def test_argv_building() -> None:
    s = Supervisor("/bin/llama-server", settings_of(["-m", "x.gguf", "--port", "9000", "-lv", "3", "--api-key", "k1,k2"]))
    argv, host, port = s.build_argv()
    assert (host, port) == ("127.0.0.1", 9000)
    assert argv.count("-lv") == 1 and "4" not in argv[argv.index("-lv") + 1]
    assert argv[-2:] == ["--log-colors", "off"] and "--port" not in argv  # host/port are added at launch
    assert "--api-key" not in argv and "k1,k2" not in argv  # the key goes through a file at spawn
    assert s.api_key == "k1"
    argv, host, port = Supervisor("/bin/s", settings_of(["--host=0.0.0.0", "-m", "x"])).build_argv()
    assert host == "0.0.0.0" and port is None and argv[1:] == ["--model", "x", "-lv", "4", "--log-colors", "off"]
    with pytest.raises(SupervisorError, match="api-key"):
        Supervisor("/bin/s", settings_of(["-m", "x", "--api-key", "#k"])).build_argv()
    assert redact_argv(["a", "--api-key", "secret", "--api-key=s2"], mask="***") == ["a", "--api-key", "***", "--api-key=***"]


def test_stop_when_nothing_runs() -> None:
    s = Supervisor("/bin/true")
    assert s.stop() is None and s.state == ServerState.STOPPED and s.wait_ready(0.01) == ServerState.STOPPED


def test_every_launch_is_kept_in_history(sup: Supervisor) -> None:
    from tui.core.presets.profiles import list_history

    before = len(list_history())
    sup.start()
    try:
        assert sup.wait_ready(60) == ServerState.READY
    finally:
        sup.stop()
    entries = list_history()
    assert len(entries) == before + 1
    newest = entries[0]
    assert newest.settings.model and newest.settings.model.endswith(".gguf")
