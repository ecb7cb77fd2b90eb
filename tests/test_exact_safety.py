"""Exact mode made safe: the dry run never reads the user's tensor data nor sends a weight to an RPC
server, a server that never prints fit's decision is stopped by the log's progress (not the
timeout), a refusal says its own reason, and the sparse copies are pruned and never left behind.

Reads are watched from outside: mincore() on the user's model file after its pages were evicted
(no data page may come back), and a real ggml-rpc-server with GGML_RPC_DEBUG=1, whose own log
names every command it served (no set_tensor may appear)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tui.core.options.argv import settings_from_argv
from tui.core.options.settings import Settings
from tui.core.planning import dryrun, sparse
from tui.core.planning.devices import DeviceSpec
from tui.core.planning.dryrun import run_dry
from tui.core.planning.exact import exact_plan
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.sparse import sparse_copy, write_sparse
from tui.core.server.process import free_port
from tui.core.demo.tiny_model import PRESETS, write_tiny_model
from tests.helpers.residency import evict as _evict, resident_after as _resident_after

#: the filter a wrapper applies to hide fit's decision (another build's wording)
DECISION = ("no changes needed", "successfully fit params", "fitting params to free memory took",
            "failed to fit params", "can be fit by reducing context")
RPC_DATA = re.compile(r"\[(set_tensor|set_tensor_hash|copy_tensor|memset_tensor|graph_compute|graph_recompute)\]")


def _wrapper(tmp_path: Path, server_bin: Path) -> Path:
    """The real llama-server with fit's decision filtered out of its log."""
    p = tmp_path / "llama-server"
    pattern = " ".join(f"-e '{d}'" for d in DECISION)
    p.write_text(f"#!/bin/sh\n'{server_bin}' \"$@\" 2>&1 | grep --line-buffered -v {pattern}\n")
    p.chmod(0o755)
    return p


def _script(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "fake-server"
    p.write_text(f"#!{sys.executable}\n{body}\n")
    p.chmod(0o755)
    return p


def _tiny(tmp_path: Path, name: str = "tiny-mtp") -> Path:
    return write_tiny_model(tmp_path / f"{name}.gguf", PRESETS[name])


# ---- no tensor data read, none sent ----------------------------------------------------------


def test_exact_mode_reads_none_of_the_users_tensor_data(server_bin: Path, tmp_path: Path) -> None:
    model = _tiny(tmp_path)
    meta = read_gguf(model)
    _evict(model)
    assert _resident_after(model, meta.data_offset) == 0  # the observer works on this filesystem
    s = settings_from_argv(["-m", str(model), "-c", "4096", "--spec-type", "draft-mtp"]).settings
    res = exact_plan(s, [], server_bin, meta=meta, use_cache=False, root=tmp_path / "exact")
    assert res.available, res.reason
    assert res.plan.device("Host").components["kv"] > 0  # type: ignore[union-attr]
    assert _resident_after(model, meta.data_offset) == 0
    assert res.sparse_copy


def test_a_decision_never_read_sends_no_weight_to_the_users_rpc_server(server_bin: Path, rpc_server_bin: Path,
                                                                      tmp_path: Path) -> None:
    """The real load that follows an unread decision reaches the RPC device through the guard: its
    first weight upload is held, the run is stopped at once, the user's server received no tensor
    data and still serves the next dry run."""
    port = free_port()
    rpc_log = tmp_path / "rpc.log"
    with open(rpc_log, "wb") as out:
        rpc = subprocess.Popen([str(rpc_server_bin), "-H", "127.0.0.1", "-p", str(port), "-t", "1"], stdout=out,
                               stderr=subprocess.STDOUT, env={**os.environ, "GGML_RPC_DEBUG": "1"})
    try:
        deadline = time.monotonic() + 20
        while True:  # bounded: until it listens
            assert rpc.poll() is None and time.monotonic() < deadline, rpc_log.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        ep = f"127.0.0.1:{port}"
        model = _tiny(tmp_path, "tiny-moe-mtp")
        s = settings_from_argv(["-m", str(model), "-c", "4096", "--rpc", ep, "--spec-type", "draft-mtp"]).settings
        devs = [DeviceSpec(f"RPC0[{ep}]", "RPC0", 24000, 24000, remote=True)]
        t0 = time.monotonic()
        res = exact_plan(s, devs, _wrapper(tmp_path, server_bin), use_cache=False, timeout_s=40, root=tmp_path / "x")
        assert time.monotonic() - t0 < 20
        assert res.status == "unavailable" and "before mtp-tune read --fit's decision" in res.reason, res.reason
        seen = rpc_log.read_text(errors="replace")
        assert "[get_alloc_size]" in seen or "[get_device_memory]" in seen  # the observer sees commands
        assert not RPC_DATA.search(seen), RPC_DATA.search(seen)
        assert rpc.poll() is None
        again = exact_plan(s, devs, server_bin, use_cache=False, root=tmp_path / "x")
        assert again.status == "exact" and again.sources[f"RPC0[{ep}]"].exact, again.reason
        assert not RPC_DATA.search(rpc_log.read_text(errors="replace"))
    finally:
        rpc.kill()
        rpc.wait(10)


# ---- bounded by the log's progress ------------------------------------------------------------


def test_a_decision_never_read_on_the_cpu_stops_at_the_real_load_and_keeps_the_file_unread(
        server_bin: Path, tmp_path: Path) -> None:
    model = _tiny(tmp_path)
    meta = read_gguf(model)
    _evict(model)
    s = settings_from_argv(["-m", str(model), "-c", "4096"]).settings
    t0 = time.monotonic()
    res = exact_plan(s, [], _wrapper(tmp_path, server_bin), meta=meta, use_cache=False, timeout_s=40, root=tmp_path / "x")
    assert time.monotonic() - t0 < 20
    assert res.status == "unavailable" and "before mtp-tune read --fit's decision" in res.reason, res.reason
    assert _resident_after(model, meta.data_offset) == 0
    assert not list((tmp_path / "x" / "sparse").glob("*"))  # the copy made for the failed run is gone


def test_a_server_that_goes_silent_is_stopped_by_the_logs_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dryrun, "LOG_IDLE_S", 1.0)
    quiet = _script(tmp_path, "import sys, time\nprint('cmn  common_init_: fitting params to device memory ...', flush=True)\n"
                              "time.sleep(120)")
    t0 = time.monotonic()
    res = exact_plan(Settings(model=str(_tiny(tmp_path))), [], quiet, use_cache=False, timeout_s=40, root=tmp_path / "x")
    assert time.monotonic() - t0 < 10
    assert res.status == "unavailable" and "printed nothing for 1 s after --fit started" in res.reason, res.reason
    assert "fitting params to device memory" in res.reason  # its last line


def test_the_server_is_stopped_at_fits_first_word_of_decision(tmp_path: Path) -> None:
    """A log that ends at "no changes needed" (nothing after it) is a complete dry run."""
    body = "\n".join(f"print({line!r}, flush=True)" for line in (
        "cmn  common_init_: fitting params to device memory ...",
        "common_params_fit_impl: getting device memory data for initial parameters:",
        '{"type": "fit_memory_breakdown", "data": {"unit": "MiB", "rows": [{"kind": "host", "name": "Host", "self": 9, '
        '"model": 1, "context": 2, "compute": 6}]}}',
        "common_params_fit_impl: will leave 24088 >= 1024 MiB of system memory, no changes needed"))
    fake = _script(tmp_path, f"import time\n{body}\ntime.sleep(120)")
    t0 = time.monotonic()
    log, outcome = run_dry(fake, [], timeout_s=40, cancel=None, log_dir=tmp_path / "logs")
    assert time.monotonic() - t0 < 10
    assert outcome == "" and log.fit.status == "none" and log.step1()[0] is not None


# ---- a refusal in the server's own words ------------------------------------------------------


@pytest.mark.parametrize(("extra", "words"), [
    (["--ctx-sizee", "4096"], "rejected --ctx-sizee"),
    (["--cache-type-k", "q9"], "rejected --cache-type-k: Unsupported cache type: q9"),
])
def test_a_typo_is_named_with_the_servers_reason_not_too_old(extra: list[str], words: str, server_bin: Path,
                                                             tmp_path: Path) -> None:
    s = Settings(model=str(_tiny(tmp_path)), extra_args=extra)
    res = exact_plan(s, [], server_bin, use_cache=False, root=tmp_path / "x")
    assert res.status == "unavailable" and words in res.reason and "too old" not in res.reason, res.reason
    assert not list((tmp_path / "x" / "sparse").glob("*"))


# ---- the sparse copies: pruned, and never left behind --------------------------------------------


def _fake_copy(root: Path, name: str, mtime: float, header: int = 1 << 20) -> Path:
    p = write_sparse(os.urandom(header), 64 << 20, root / "sparse" / f"{name}.gguf")
    os.utime(p, (mtime, mtime))
    return p


def test_prune_removes_the_oldest_copies_down_to_the_cap(tmp_path: Path) -> None:
    copies = [_fake_copy(tmp_path, f"c{i}", 1_000_000 + i) for i in range(4)]
    stale = tmp_path / "sparse" / "c9.gguf.123.tmp"
    stale.write_bytes(b"x")
    os.utime(stale, (1000, 1000))
    removed = sparse.prune_sparse(tmp_path, cap_bytes=int(2.5 * (1 << 20)), keep=copies[0])
    assert set(removed) == {copies[1], copies[2], stale}
    assert [c.exists() for c in copies] == [True, False, False, True]


def test_exact_mode_prunes_the_cache_and_keeps_the_copy_it_used(server_bin: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "x"
    old = _fake_copy(root, "old", 1_000_000)
    monkeypatch.setattr(sparse, "SPARSE_CACHE_CAP_BYTES", 0)
    model = _tiny(tmp_path)
    res = exact_plan(Settings(model=str(model), ctx_size=4096), [], server_bin, use_cache=False, root=root)
    assert res.available, res.reason
    assert not old.exists() and len(list((root / "sparse").glob("*.gguf"))) == 1


@pytest.mark.parametrize("server", ["too-old", "hangs", "cancelled"])
def test_no_sparse_copy_is_left_behind_when_exact_mode_fails(server: str, tmp_path: Path) -> None:
    import threading

    bodies = {"too-old": "import sys\nprint('error: invalid argument: --log-jsonl', file=sys.stderr)\nsys.exit(1)",
              "hangs": "import time\nprint('starting', flush=True)\ntime.sleep(120)", "cancelled": "import time\ntime.sleep(120)"}
    cancel = threading.Event()
    res = exact_plan(Settings(model=str(_tiny(tmp_path))), [], _script(tmp_path, bodies[server]), use_cache=False,
                     timeout_s=1.5, root=tmp_path / "x", cancel=cancel, sparse=True, progress=lambda _m: server == "cancelled" and cancel.set())
    assert not res.available
    assert not list((tmp_path / "x" / "sparse").glob("*"))


def test_a_copy_that_cannot_be_written_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    meta = read_gguf(_tiny(tmp_path))

    def full(*_a: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sparse.os, "replace", full)
    with pytest.raises(OSError):
        sparse_copy(meta, tmp_path / "x")
    assert not list((tmp_path / "x" / "sparse").glob("*"))
    res = exact_plan(Settings(model=str(meta.path)), [], _script(tmp_path, "pass"), meta=meta, use_cache=False,
                     root=tmp_path / "x")
    assert res.status == "unavailable" and "No space left" in res.reason
    assert not list((tmp_path / "x" / "sparse").glob("*"))
