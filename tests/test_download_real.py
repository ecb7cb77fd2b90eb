"""The real llama-server downloads its model (`-mu URL -m DEST`, `-hf user/repo:QUANT`) from the loopback
Hub (tests/helpers/range_server.py) under the supervisor: the progress is seen while it arrives, a
refused download is one explained sentence, and a stop mid-download leaves no process and the partial
file that the next launch resumes, as llama.cpp does.

`hub.rate_bps` slows the served bodies so that a 1.7 MB model takes a few seconds: it is the link's
speed, not a wait for anything. Every wait is a deadline loop on the supervisor's own state.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import server_env
from tests.helpers.range_server import LoopbackHub, closed_port_url
from tests.helpers.supervisor_util import pid_gone, read_line, settings_of
from tui.core.remote.fetch import fetch_model
from tui.core.remote.source import ModelSource, source_of
from tui.core.server.download import TEMP_SUFFIX, DownloadSnapshot, human_bytes
from tui.core.server.events import ServerState
from tui.core.server.failures import FailureKind
from tui.core.server.supervisor import Supervisor

REPO = Path(__file__).resolve().parent.parent
ARGS = ["-c", "256", "-np", "1", "-t", "1", "-tb", "1"]
DEADLINE_S = 60.0


def _env(root: Path, hub: LoopbackHub | None = None, endpoint: str | None = None) -> dict[str, str]:
    env = server_env(root)
    env["HF_ENDPOINT"] = endpoint or (hub.url if hub else "")
    return env


def supervise(server_bin: Path, args: list[str], root: Path, env: dict[str, str],
              ready_timeout: float = DEADLINE_S) -> Supervisor:
    """A supervisor whose server sees `env` (server_env: no user config, the cache under `root`)."""
    return Supervisor(server_bin, settings_of(args), env=env, log_dir=root / "logs", ready_timeout=ready_timeout,
                      poll_interval=0.05)


def follow(sup: Supervisor) -> list[DownloadSnapshot]:
    """The download's summaries while the server starts (deadline loop on the supervisor's state)."""
    seen = []
    deadline = time.monotonic() + DEADLINE_S
    while sup.state == ServerState.STARTING and time.monotonic() < deadline:
        s = sup.downloads.summary() if sup.downloads else None
        if s is not None and (not seen or (s.bytes, s.phase) != (seen[-1].bytes, seen[-1].phase)):
            seen.append(s)
        time.sleep(0.05)  # polling, bounded by the deadline
    return seen


def _grew(seen: list[DownloadSnapshot], total: int) -> list[int]:
    under_way = [s.bytes for s in seen if s.phase == "downloading" and s.total == total and 0 < s.bytes < total]
    assert len(under_way) >= 2 and under_way == sorted(under_way), seen
    return under_way


def test_model_url_downloads_to_m_with_progress(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
                                                hub: LoopbackHub) -> None:
    src = tiny_models["tiny-mtp"]
    size = src.stat().st_size
    url = hub.add_file("x.gguf", src)
    got = fetch_model(ModelSource("url", url))  # the plan's remote header record (what the TUI keeps)
    assert got.size == size
    hub.rate_bps = 600_000
    dest = tmp_path / "models" / "x.gguf"
    told = []
    with supervise(server_bin, ["-mu", url, "-m", str(dest), *ARGS], tmp_path, _env(tmp_path)) as sup:
        sup.add_download_listener(lambda dl: told.append(dl.describe()))
        launch = sup.start()
        assert launch.downloads is not None
        launch.downloads.expect({got.name: got.size})
        seen = follow(sup)
        assert sup.wait_ready() == ServerState.READY, sup.failure and sup.failure.explain()
        _grew(seen, size)
        assert seen[-1].rate is None or seen[-1].rate > 0
        done = sup.downloads.summary()
        assert done is not None and done.phase == "done" and done.bytes == size
        assert sup.downloads.describe() == "downloaded x.gguf (1.7 MiB)"
        assert dest.read_bytes() == src.read_bytes() and not Path(str(dest) + TEMP_SUFFIX).exists()
        assert any(re.match(r"downloading x\.gguf \d+% \([\d.]+ of 1\.7 MiB", t) for t in told), told


def test_hf_repo_downloads_into_the_hub_cache(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
                                              hub: LoopbackHub, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tiny_models["tiny-mtp"]
    size = src.stat().st_size
    repo = hub.add_repo("user/repo", {"m-Q4_K_M.gguf": src})
    monkeypatch.setenv("HF_ENDPOINT", hub.url)  # mtp-tune's own plan asks the same Hub
    settings = ["-hf", "user/repo:Q4_K_M", *ARGS]
    with supervise(server_bin, settings, tmp_path, _env(tmp_path, hub)) as sup:
        got = fetch_model(source_of(sup.settings))  # listing + header by ranges, as `plan` does
        assert (got.name, got.size) == ("m-Q4_K_M.gguf", size)
        hub.rate_bps = 600_000
        launch = sup.start()
        assert launch.downloads is not None
        launch.downloads.expect({got.name: got.size})
        seen = follow(sup)
        assert sup.wait_ready() == ServerState.READY, sup.failure and sup.failure.explain()
        _grew(seen, size)
        assert all(s.name == "m-Q4_K_M.gguf" for s in seen)  # the blob (named by its hash) took the plan's name
        assert sup.downloads.describe() == "downloaded m-Q4_K_M.gguf (1.7 MiB)"
    link = tmp_path / "llama-cache" / "models--user--repo" / "snapshots" / repo.commit / "m-Q4_K_M.gguf"
    assert link.is_symlink() and link.resolve().read_bytes() == src.read_bytes()  # hf-cache.cpp finalize_file


@pytest.mark.parametrize("case", ["missing", "gated", "no-network", "file-404"])
def test_a_refused_download_is_one_explained_sentence(server_bin: Path, tiny_models: dict[str, Path],
                                                      tmp_path: Path, hub: LoopbackHub, case: str) -> None:
    src = tiny_models["tiny-mtp"]
    hub.add_repo("user/gated", {"m-Q4_K_M.gguf": src}, token="hf_" + "a" * 40)
    endpoint = closed_port_url().split("/files/")[0] if case == "no-network" else hub.url
    if case == "file-404":
        args = ["-mu", f"{hub.url}/files/missing.gguf", "-m", str(tmp_path / "x.gguf")]
    else:
        args = ["-hf", {"missing": "user/nope", "gated": "user/gated"}.get(case, "user/repo") + ":Q4_K_M"]
    with supervise(server_bin, [*args, *ARGS], tmp_path, _env(tmp_path, endpoint=endpoint)) as sup:
        sup.start()
        assert sup.wait_ready() == ServerState.FAILED
        f = sup.failure
    assert f is not None and f.kind == FailureKind.DOWNLOAD_FAILED, f
    assert f.message.startswith("llama-server could not download ") and f.message.endswith(".")
    want = {
        "missing": "user/nope: the Hub has no repository user/nope (404 Repository not found).",
        "gated": "user/gated: the Hub answered 401 (Access to model is restricted. You must have access to it.), so "
                 "the repository is gated or private.",
        "no-network": "user/repo: it could not reach the Hugging Face Hub (Could not establish connection).",
        "file-404": f"missing.gguf: {hub.url}/files/missing.gguf answered 404 (no such file).",
    }[case]
    assert f.message == "llama-server could not download " + want
    if case == "gated":
        assert "-hft TOKEN or the HF_TOKEN environment variable" in f.fix
    assert str(f.raw_log_path) in f.explain()


def test_stop_mid_download_leaves_no_server_and_the_part_llama_cpp_resumes(
        server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path, hub: LoopbackHub) -> None:
    src = tiny_models["tiny-mtp"]
    url = hub.add_file("x.gguf", src)
    dest = tmp_path / "models" / "x.gguf"
    temp = Path(str(dest) + TEMP_SUFFIX)
    hub.rate_bps = 250_000  # about 7 s for the whole file
    with supervise(server_bin, ["-mu", url, "-m", str(dest), *ARGS], tmp_path, _env(tmp_path)) as sup:
        launch = sup.start()
        deadline = time.monotonic() + DEADLINE_S
        while (sup.downloads is None or sup.downloads.summary() is None
               or sup.downloads.summary().bytes < 100_000) and time.monotonic() < deadline:
            assert sup.state == ServerState.STARTING, sup.failure
            time.sleep(0.05)  # polling, bounded by the deadline
        sup.stop()
        assert sup.state == ServerState.STOPPED and launch.pid is not None and pid_gone(launch.pid)
        part = temp.stat().st_size  # llama.cpp dies on SIGTERM before its handler exists: the part stays
        assert 100_000 <= part < src.stat().st_size and not dest.exists()
        assert sup.downloads.describe() == f"download of x.gguf stopped at {human_bytes(part)}"
        hub.rate_bps = None
        hub.clear()
        sup.start()
        assert sup.wait_ready() == ServerState.READY, sup.failure and sup.failure.explain()
    assert dest.read_bytes() == src.read_bytes()
    gets = [h for h in hub.hits("/files/x.gguf") if h.method == "GET"]
    assert gets and gets[0].range == f"bytes={part}-" and gets[0].status == 206  # resumed, not started over


def test_the_ready_timeout_counts_from_the_downloads_last_progress(
        server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path, hub: LoopbackHub) -> None:
    """A download longer than the ready timeout is not stopped while bytes arrive; one that stalls is,
    with the reason."""
    src = tiny_models["tiny-mtp"]
    url = hub.add_file("x.gguf", src)
    hub.rate_bps = 400_000  # about 4.5 s, more than twice the timeout
    args = ["-mu", url, "-m", str(tmp_path / "a" / "x.gguf"), *ARGS]
    with supervise(server_bin, args, tmp_path, _env(tmp_path), ready_timeout=2.0) as sup:
        sup.start()
        assert sup.wait_ready(DEADLINE_S) == ServerState.READY, sup.failure and sup.failure.explain()
        assert sup.launch.seconds_to_ready > 2.0
    hub.rate_bps = 1_000  # 4 KiB, then nothing for 4 s: longer than the timeout
    args = ["-mu", url, "-m", str(tmp_path / "b" / "x.gguf"), *ARGS]
    with supervise(server_bin, args, tmp_path, _env(tmp_path), ready_timeout=2.0) as sup:
        launch = sup.start()
        assert sup.wait_ready(DEADLINE_S) == ServerState.FAILED
        f = sup.failure
        assert f is not None and f.kind == FailureKind.DOWNLOAD_FAILED, f
        assert re.fullmatch(r"llama-server's download of x\.gguf made no progress for 2 s \(it stopped at "
                            r"[\d.]+ K?i?B\), so mtp-tune stopped it\.", f.message), f.message
        assert launch.pid is not None and pid_gone(launch.pid)


def test_serve_prints_the_download_on_stderr(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
                                             hub: LoopbackHub, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mtp-tune serve -hf ...`: the first news, a line every few seconds, the end; the total from the plan's cache."""
    src = tiny_models["tiny-mtp"]
    hub.add_repo("user/cli", {"m-Q4_K_M.gguf": src})
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    fetch_model(ModelSource("hf", "user/cli:Q4_K_M"))  # `mtp-tune plan -hf user/cli:Q4_K_M` cached the listing
    hub.rate_bps = 500_000
    env = _env(tmp_path, hub)
    env["MTP_TUNE_LLAMA_SERVER"] = str(server_bin)
    cmd = [sys.executable, "-c", "import sys; from tui.cli import main; sys.exit(main())", "serve",
           "-hf", "user/cli:Q4_K_M", *ARGS, "--ready-timeout", "60"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        out = []
        for _ in range(20):
            line = read_line(proc, DEADLINE_S)
            out.append(line)
            if not line or line.startswith("ready at") or "failed" in line:
                break
        assert out[-1].startswith("ready at"), out
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    lines = [ln for ln in err.splitlines() if "download" in ln]
    assert any(re.search(r"\] downloading m-Q4_K_M\.gguf \d+% \([\d.]+ of 1\.7 MiB", ln) for ln in lines), err
    assert lines[-1].endswith("downloaded m-Q4_K_M.gguf (1.7 MiB)") and len(lines) <= 4, lines
