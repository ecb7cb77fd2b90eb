"""Each failure class reproduced with the real llama-server and explained by the supervisor."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from tests.helpers.supervisor_util import BASE_ARGS, FINAL, as_given, make_supervisor
from tui.core.server.failures import FailureKind
from tui.core.server.events import ServerState

HELPERS = Path(__file__).parent / "helpers"


@pytest.fixture(scope="module")
def bad_models(tmp_path_factory: pytest.TempPathFactory, tiny_models: dict[str, Path]) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-models")
    data = tiny_models["tiny-mtp"].read_bytes()
    trunc = root / "truncated.gguf"
    trunc.write_bytes(data[: len(data) // 2])  # a real GGUF cut in half, as an interrupted download leaves it
    notgguf = root / "weights.gguf"
    notgguf.write_text('{"model_type": "qwen3_5", "this": "is a config.json, not a GGUF"}\n')
    return {"truncated": trunc, "not_gguf": notgguf}


def launch_and_classify(server_bin: Path, args: list[str], root: Path, **kw: object):  # type: ignore[no-untyped-def]
    sup = make_supervisor(server_bin, as_given(args), root, **kw)  # the flags at fault reach the server as given
    try:
        sup.start()
        state = sup.wait_for(FINAL, 60)
        assert state == ServerState.FAILED, (state, sup.tail(20))
        f = sup.failure
        assert f is not None
        assert f.raw_log_path == sup.log_path and f.raw_log_path is not None and f.raw_log_path.is_file()
        return f
    finally:
        sup.close()


def test_unsupported_cache_type(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    f = launch_and_classify(server_bin, ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS, "-ctv", "q3_k"], tmp_path)
    assert f.kind == FailureKind.UNSUPPORTED_CACHE_TYPE and f.flag_or_file == "-ctv q3_k"
    assert f.exit_code == 1


def test_missing_model(server_bin: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such.gguf"
    f = launch_and_classify(server_bin, ["-m", str(missing), *BASE_ARGS], tmp_path)
    assert f.kind == FailureKind.MISSING_MODEL and f.flag_or_file == str(missing)


def test_not_a_gguf(server_bin: Path, bad_models: dict[str, Path], tmp_path: Path) -> None:
    f = launch_and_classify(server_bin, ["-m", str(bad_models["not_gguf"]), *BASE_ARGS], tmp_path)
    assert f.kind == FailureKind.NOT_GGUF and f.flag_or_file == str(bad_models["not_gguf"])
    assert "'{\"mo'" in f.message  # the bytes it found instead of GGUF


def test_truncated_gguf(server_bin: Path, bad_models: dict[str, Path], tmp_path: Path) -> None:
    f = launch_and_classify(server_bin, ["-m", str(bad_models["truncated"]), *BASE_ARGS], tmp_path)
    assert f.kind == FailureKind.TRUNCATED_GGUF and f.flag_or_file == str(bad_models["truncated"])


def test_mtp_on_model_without_mtp(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    args = ["-m", str(tiny_models["tiny-nomtp"]), *BASE_ARGS, "--spec-type", "draft-mtp"]
    f = launch_and_classify(server_bin, args, tmp_path)
    assert f.kind == FailureKind.NO_MTP_LAYERS and str(tiny_models["tiny-nomtp"]) in f.message


@pytest.mark.parametrize(("flag", "replacement"), [(["--no-mmap"], "--load-mode none"),
                                                   (["--draft-max", "4"], "--spec-draft-n-max")])
def test_removed_flags(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
                       flag: list[str], replacement: str) -> None:
    f = launch_and_classify(server_bin, ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS, *flag], tmp_path)
    assert f.kind == FailureKind.REMOVED_ARG and f.flag_or_file == flag[0] and replacement in f.fix


def test_unknown_flag(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    args = ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS, "--checkpoint-every-n-tokens", "64"]
    f = launch_and_classify(server_bin, args, tmp_path)
    assert f.kind == FailureKind.UNKNOWN_ARG and f.flag_or_file == "--checkpoint-every-n-tokens"


def test_port_in_use(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        f = launch_and_classify(server_bin, ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS, "--port", str(port)], tmp_path)
    assert f.kind == FailureKind.PORT_IN_USE and f.flag_or_file == f"--port {port}"


def test_host_out_of_memory(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """A 200 MiB address-space limit and a 1M-token context: the KV allocation really fails."""
    args = [str(HELPERS / "rlimit_exec.py"), "200", str(server_bin),
            "-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS, "-c", "1000000", "--fit", "off"]
    f = launch_and_classify(Path(sys.executable), args, tmp_path)
    assert f.kind == FailureKind.OOM_HOST and "KV cache" in f.message


def test_missing_binary(tmp_path: Path) -> None:
    f = launch_and_classify(tmp_path / "llama-server", ["-m", "x.gguf"], tmp_path)
    assert f.kind == FailureKind.SERVER_NOT_FOUND and str(tmp_path / "llama-server") in f.message


def test_crash_while_serving(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """A server that aborts after it was ready is a crash while serving (SIGABRT, as an assert gives)."""
    sup = make_supervisor(server_bin, ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS], tmp_path)
    try:
        sup.start()
        assert sup.wait_ready(60) == ServerState.READY
        assert sup.pid is not None
        os.kill(sup.pid, signal.SIGABRT)
        assert sup.wait_for(FINAL, 30) == ServerState.FAILED
        f = sup.failure
        assert f is not None and f.kind == FailureKind.CRASH and f.signal == signal.SIGABRT
        assert "while serving a request" in f.message
    finally:
        sup.close()
