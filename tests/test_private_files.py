"""What mtp-tune keeps for its user is readable by that user only (issue 29): the results database,
launch logs, history, profiles, sweep and tune states and the caches are created 0600 in 0700
folders, and older ones left world-readable are tightened; folders that are not mtp-tune's are left
as they are. Each check follows a real write through the module that makes the file."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tui.core.config import paths
from tui.core.options.settings import Settings
from tui.core.presets import profiles, write_section
from tui.core.remote import cache
from tui.core.remote.header import RemoteHeader
from tui.core.results.store import Store
from tui.core.server.history import new_log_path, open_launch_log
from tui.core.lab.journal import Journal, JournalLock, Kind, journal_path

CANARY = "hf_CANARYprivatefiles0123456789abcdefgh"


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """mtp-tune's three folders under tmp_path, not made yet; the remote and exact caches at their
    defaults (inside the cache folder)."""
    out = {name: tmp_path / "home" / name for name in ("config", "data", "cache")}
    for name, p in out.items():
        monkeypatch.setenv(f"MTP_TUNE_{name.upper()}_DIR", str(p))
    monkeypatch.delenv("MTP_TUNE_REMOTE_DIR", raising=False)
    monkeypatch.delenv("MTP_TUNE_EXACT_DIR", raising=False)
    return out


def test_a_new_results_database_is_private_wal_and_shm_included(roots: dict[str, Path]) -> None:
    with Store() as st:
        st.begin_run(suite="s", settings={"extra_args": ["-hft", CANARY]}, server={"argv": ["x", "--hf-token", CANARY]})
        db = paths.data_dir() / "results.sqlite"
        sides = [db.with_name(db.name + s) for s in ("-wal", "-shm")]
        assert all(p.exists() for p in sides)  # WAL mode: both exist while the connection is open
        assert mode(roots["data"]) == 0o700 and mode(db) == 0o600
        assert [mode(p) for p in sides] == [0o600, 0o600]
        row = st.list_runs()[0]
    # the database is the last writer: an argv in a run's JSON is redacted whatever the caller passed
    assert row.settings == {"extra_args": ["-hft", "<redacted>"]} and row.server == {"argv": ["x", "--hf-token", "<redacted>"]}


def test_an_older_world_readable_database_and_folder_are_tightened(roots: dict[str, Path]) -> None:
    roots["data"].mkdir(parents=True)
    os.chmod(roots["data"], 0o755)
    db = roots["data"] / "results.sqlite"
    sqlite3.connect(db).close()
    wal = db.with_name(db.name + "-wal")
    wal.write_bytes(b"")
    for p in (db, wal):
        os.chmod(p, 0o644)
    with Store():  # sqlite removes the -wal on the last close: look while it is open
        assert (mode(roots["data"]), mode(db), mode(wal)) == (0o700, 0o600, 0o600)


def test_launch_logs_and_history_are_private_and_hold_no_token(roots: dict[str, Path]) -> None:
    log = new_log_path(None, 1)
    assert log is not None
    f = open_launch_log(log, 1, ["llama-server", "-m", "x.gguf", "-hft", CANARY])
    assert f is not None
    f.close()
    assert mode(log.parent) == 0o700 and mode(roots["data"]) == 0o700 and mode(log) == 0o600
    assert CANARY not in log.read_text() and "-hft <redacted>" in log.read_text()
    entry = profiles.record_launch(Settings(model="/m.gguf", extra_args=["--hf-token", CANARY]), {"pid": 1})
    assert mode(entry.parent) == 0o700 and mode(roots["config"]) == 0o700 and mode(entry) == 0o600
    assert CANARY not in entry.read_text()


def test_profiles_and_their_backups_are_private(roots: dict[str, Path]) -> None:
    first = profiles.save_profile("p", Settings(model="/m.gguf"))
    profiles.save_profile("p", Settings(model="/m.gguf", ctx_size=4096))
    (backup,) = profiles.backups_dir().glob("p.*.toml")
    assert [mode(p) for p in (roots["config"], first.parent, backup.parent)] == [0o700] * 3
    assert mode(first) == 0o600 and mode(backup) == 0o600


def test_a_kept_token_goes_only_into_a_private_profile(roots: dict[str, Path]) -> None:
    s = Settings(model="/m.gguf", extra_args=["-hft", CANARY])
    plain = profiles.save_profile("plain", s)
    assert CANARY not in plain.read_text() and "token is not stored" in plain.read_text()
    kept = profiles.save_profile("kept", s, include_hf_token=True)
    assert CANARY in kept.read_text() and mode(kept) == 0o600
    assert profiles.load_profile("kept").extra_args == ["-hft", CANARY]
    ini = roots["config"] / "presets.ini"  # every preset writer (profile export --ini, --save-best) goes here
    write_section(ini, "kept", profiles.load_profile("kept"))
    assert CANARY not in ini.read_text() and "hf-token" not in ini.read_text()


@pytest.mark.parametrize("kind", ["sweep", "tune"])
def test_sweep_and_tune_journals_and_their_locks_are_private(roots: dict[str, Path], kind: Kind) -> None:
    st = Journal(kind, "sw-1", {"base": {}}, path=journal_path(kind, "sw-1"))
    saved = st.save()
    lock = JournalLock(kind, "sw-1")
    lock.acquire()
    try:
        assert mode(saved.parent) == 0o700 and mode(saved) == 0o600 and mode(lock.path) == 0o600
    finally:
        lock.release()


def test_the_remote_caches_are_private_inside_a_tightened_cache_folder(roots: dict[str, Path]) -> None:
    roots["cache"].mkdir(parents=True)
    os.chmod(roots["cache"], 0o755)  # made by an older mtp-tune (or another tool) with the umask's mode
    cache.save_listing("k", {"commit": "c", "files": [{"path": "m.gguf", "size": 10}]})
    hdr = b"GGUF" + bytes(60)
    cache.store("url|http://127.0.0.1/m.gguf", [RemoteHeader("http://127.0.0.1/m.gguf", "m.gguf", 4096, "e", hdr, 1)])
    remote = roots["cache"] / "remote"
    dirs = [roots["cache"], remote, remote / "listings", remote / "headers"]
    dirs += [p for p in (remote / "headers").iterdir() if p.is_dir()]
    assert [mode(d) for d in dirs] == [0o700] * len(dirs), [(d, oct(mode(d))) for d in dirs]


def test_folders_that_are_not_mtp_tunes_are_left_alone(roots: dict[str, Path], tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    made = paths.private_dir(shared / "mine" / "leaf")  # an MTP_TUNE_REMOTE_DIR elsewhere, say
    assert mode(shared) == 0o755 and mode(made) == 0o700
    paths.private_dir(paths.data_dir() / "x")
    assert mode(tmp_path / "home") == stat.S_IMODE(0o777 & ~_umask())  # above the root: not ours to tighten
    assert mode(roots["data"]) == 0o700 and mode(roots["data"] / "x") == 0o700


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old
