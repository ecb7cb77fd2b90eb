"""Secrets and one version of "what is running": the API key never in the argv, only in a 0600 file
that goes with the launch (also when mtp-tune is SIGKILLed), and history and labels from the Settings
the supervisor carries, never from its argv read back."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from tests.conftest import server_env
from tests.helpers.supervisor_util import BASE_ARGS, make_supervisor, pid_cmdline, pid_gone, read_line
from tui.core.options import argv as argv_mod
from tui.core.options.settings import Settings
from tui.core.server.events import ServerState
from tui.core.server.keyfile import KeyFile, KeyFileError, split_keys

REPO = Path(__file__).resolve().parent.parent
KEY = "s3cret-key-42"


def key_file_of(pid: int) -> Path:
    """The `--api-key-file` a running server was given, from its /proc cmdline."""
    words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return Path(words[words.index(b"--api-key-file") + 1].decode())


def gone(path: Path, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)  # polling the file system with a bounded deadline
    return True


def test_the_key_reaches_the_server_through_a_private_file(server_bin: Path, tiny_models: dict[str, Path],
                                                          tmp_path: Path) -> None:
    args = ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS, "--api-key", f"{KEY},second-key"]
    sup = make_supervisor(server_bin, args, tmp_path)
    try:
        launch = sup.start()
        assert sup.wait_ready(60) == ServerState.READY, sup.tail(20)  # readiness sent the key too
        assert launch.pid is not None
        cmdline = pid_cmdline(launch.pid)
        assert KEY not in cmdline and "--api-key " not in cmdline and KEY not in " ".join(launch.argv)
        path = key_file_of(launch.pid)
        st = path.stat()
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
        assert path.read_text() == f"{KEY}\nsecond-key\n"
        url = f"{sup.base_url}/v1/models"
        assert httpx.get(url, timeout=10).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
        for key in (KEY, "second-key"):
            assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
        assert sup.api_key == KEY
        second = sup.restart()
        assert sup.wait_ready(60) == ServerState.READY
        assert second.pid is not None and key_file_of(second.pid) != path and not path.exists()
        path = key_file_of(second.pid)
    finally:
        sup.close()
    assert not path.exists()  # removed on stop, before stop() returned
    assert launch.log_path is not None and KEY not in launch.log_path.read_text()


def test_a_failed_launch_leaves_no_key_file(server_bin: Path, tmp_path: Path) -> None:
    sup = make_supervisor(server_bin, ["-m", str(tmp_path / "missing.gguf"), "--api-key", KEY], tmp_path)
    try:
        launch = sup.start()
        assert sup.wait_for([ServerState.FAILED, ServerState.EXITED], 60) == ServerState.FAILED
        assert launch.key_file is not None and not launch.key_file.path.exists()
    finally:
        sup.close()


@pytest.mark.parametrize("how", ["SIGKILL", "exit"])
def test_the_key_file_goes_even_when_mtp_tune_is_killed(how: str, server_bin: Path, tiny_models: dict[str, Path],
                                                        tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "tests.helpers.supervised_parent", "wait" if how == "SIGKILL" else "exit",
           str(server_bin), str(tmp_path / "logs"), "-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS, "--api-key", KEY]
    # stdin is a pipe the parent waits on in `exit` mode: the server is read here while it surely runs, then
    # closing the pipe lets the parent exit (it used to exit right after printing, racing this read)
    parent = subprocess.Popen(cmd, cwd=REPO, env=server_env(tmp_path), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    server_pid = None
    try:
        state, pid_s, _ = read_line(parent, 60).split()
        assert state == "ready"
        server_pid = int(pid_s)
        path = key_file_of(server_pid)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and KEY not in pid_cmdline(server_pid)
        if how == "SIGKILL":
            parent.kill()  # no atexit, no handler: only the key file's reaper can remove it
        else:
            assert parent.stdin is not None
            parent.stdin.close()  # now the parent returns from main: only its atexit hook can remove it
        assert parent.wait(30) is not None
        assert pid_gone(server_pid, timeout=10)
        assert gone(path), f"{path} outlived mtp-tune ({how})"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if server_pid is not None and not pid_gone(server_pid, timeout=0.5):
            os.kill(server_pid, 9)


def test_keys_the_file_cannot_carry_are_refused() -> None:
    assert split_keys("a,,b") == ["a", "b"]  # llama-server drops empty keys too
    for bad in ("#comment-like", "ok,#no", "two\nlines"):
        with pytest.raises(KeyFileError, match="api-key"):
            split_keys(bad)
    kf = KeyFile("only-me")
    try:
        assert stat.S_IMODE(kf.path.stat().st_mode) == 0o600 and kf.path.read_text() == "only-me\n"
    finally:
        kf.remove()
    assert not kf.path.exists()
    kf.remove()  # idempotent


def test_history_and_labels_come_from_the_carried_settings(server_bin: Path, tiny_models: dict[str, Path],
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.core.presets.profiles import list_history

    given = Settings(model=str(tiny_models["tiny-mtp"]), ctx_size=4096, parallel=1, threads=1, threads_batch=1,
                     spec_type=["draft-mtp"], spec_draft_n_max=2, metrics=True, api_key=KEY,
                     extra_args=["--no-warmup", "--alias", "carried"])
    sup = make_supervisor(server_bin, given, tmp_path)

    def no_reading_back(*a: object, **kw: object) -> None:
        raise AssertionError("the supervisor read an argv back into Settings")

    try:
        with monkeypatch.context() as m:
            m.setattr(argv_mod, "settings_from_argv", no_reading_back)
            launch = sup.start()
            given.extra_args.append("--changed-after-start")  # the caller's object is not the launch's
            assert sup.wait_ready(60) == ServerState.READY, sup.tail(20)
            running = sup.running_settings()
        assert running is not None and running.source == "launched" and running.label() == "MTP n2"
        assert running.settings == replace(given, extra_args=["--no-warmup", "--alias", "carried"])
        assert sup.settings == running.settings and launch.settings == running.settings
        assert "--alias" in launch.argv and "--no-warmup" in launch.argv
        names = httpx.get(f"{sup.base_url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
        assert "carried" in names.text  # the extra arguments reached the server verbatim
    finally:
        sup.close()
    newest = list_history()[0].settings
    assert newest.extra_args == ["--no-warmup", "--alias", "carried"] and newest.spec_draft_n_max == 2
    assert newest.api_key != KEY


TOKEN = "hf_supervisorCanary0123456789abcdefghij"  # the shape llama-server accepts (hf_ + 34 or more)


def test_the_hf_token_reaches_the_server_by_its_environment_only(server_bin: Path, tiny_models: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    """`-hft` is a secret like the API key (issue 29): the server's environment carries it, never its
    argv, the "starting:" line, the log or the history; a masked token read back from a history entry
    is dropped and leaves the user's own HF_TOKEN alone."""
    from tests.helpers.supervisor_util import Recorder
    from tui.core.presets.profiles import list_history

    sup = make_supervisor(server_bin, ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS, "-hft", TOKEN], tmp_path)
    seen = Recorder()
    sup.add_state_listener(seen)
    try:
        launch = sup.start()
        assert sup.wait_ready(60) == ServerState.READY, sup.tail(20)
        assert launch.pid is not None and launch.token_given
        environ = Path(f"/proc/{launch.pid}/environ").read_bytes().split(b"\0")
        assert f"HF_TOKEN={TOKEN}".encode() in environ and TOKEN not in pid_cmdline(launch.pid)
        assert TOKEN not in " ".join(launch.argv)
        masked = replace(sup.settings, extra_args=["-hft", "<redacted>"])
        sup.restart(masked)
        assert sup.wait_ready(60) == ServerState.READY, sup.tail(20)
        again = sup.launch
        assert again is not None and again.pid is not None and "<redacted>" not in pid_cmdline(again.pid)
        environ = Path(f"/proc/{again.pid}/environ").read_bytes().split(b"\0")
        assert not any(e.startswith(b"HF_TOKEN=") for e in environ)  # server_env has none: none was made up
    finally:
        sup.close()
    sup.events.flush()
    details = " ".join(e.detail or "" for e in seen.events)
    assert "starting" in " ".join(str(e.state.value) for e in seen.events) and "--model" in details
    assert TOKEN not in details
    logs = [p.read_text() for p in (tmp_path / "logs").glob("*.log")]
    assert len(logs) == 2 and not any(TOKEN in text for text in logs)
    assert all(TOKEN not in h.path.read_text() for h in list_history())


def test_a_refused_token_given_by_environment_is_named(server_bin: Path, tiny_models: dict[str, Path],
                                                      tmp_path: Path, hub: object) -> None:
    """The download failure knows a token was given from the launch (its environment), not the argv."""
    hub.add_repo("u/gated", {"m-Q8_0.gguf": tiny_models["tiny-mtp"]}, token="hf_theRightOne0123456789abcdefghijklmn")  # type: ignore[attr-defined]
    sup = make_supervisor(server_bin, ["-hf", "u/gated:Q8_0", *BASE_ARGS, "-hft", TOKEN], tmp_path)
    try:
        sup.start()
        assert sup.wait_ready(60) == ServerState.FAILED, sup.tail(20)
        failure = sup.failure
    finally:
        sup.close()
    assert failure is not None and "token given (-hft or HF_TOKEN) was refused" in failure.fix, failure
    assert TOKEN not in failure.explain()
