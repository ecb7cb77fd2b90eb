"""The results store: schema and migrations, WAL readers, persistence across processes, stale runs, errors."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import tui.core.results.store as store_mod
from tui.core.config.paths import data_dir
from tui.core.results.store import SCHEMA_VERSION, Store, StoreError, default_path, open_store

REQ = {
    "seq": 0, "prompt": "code_python", "kind": "tg", "repeat": 0, "n_predict": 512, "started_at": 1.0,
    "ttft_ms": 12.5, "wall_ms": 900.0, "metrics_delta": {"spec_decode_num_drafts_total": 10.0},
    "timings": {"cache_n": 0, "prompt_n": 79, "predicted_n": 512, "draft_n": 30, "draft_n_accepted": 20,
                "predicted_per_second": 41.25, "extra_future_field": [1, 2]},
    "finish_reason": "length", "error": None, "content_chars": 2000,
}


def test_default_path_is_in_the_data_dir() -> None:
    assert default_path() == data_dir() / "results.sqlite"
    with Store() as s:  # the hermetic env points the data dir at a temp directory
        assert s.path.is_file() and s.path.parent == data_dir()


def test_new_database_has_current_schema_and_wal(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as s:
        assert s.schema_version == SCHEMA_VERSION
        mode = s._conn.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
        # a bounded page cache, smaller than SQLite's 2 MB default (it filled over a long session)
        assert s._conn.execute("PRAGMA cache_size").fetchone()[0] == -store_mod.CACHE_KIB
        assert store_mod.CACHE_KIB < 2000


def test_run_round_trip_keeps_everything_verbatim(tmp_path: Path) -> None:
    settings = {"model": "/m.gguf", "spec_type": ["draft-mtp"], "ubatch_size": 512, "api_key": "<redacted>"}
    with Store(tmp_path / "r.sqlite") as s:
        rid = s.begin_run(suite="tasks", url="http://127.0.0.1:1", model="/m.gguf", mtp=True, settings=settings,
                          config={"repeat": 3}, server={"version": 11434, "capabilities": {"draft_mtp": True}},
                          hardware={"source": "simulated", "devices": [{"name": "RTX 3090 (simulated)"}]},
                          plan={"totals": {"kv_mib": 40.0}}, memory={"totals": {"kv": 40.0}})
        assert s.get(rid).status == "running"  # type: ignore[union-attr]
        s.add_request(rid, REQ)
        s.add_request(rid, {**REQ, "seq": 1, "repeat": 1, "timings": None, "error": "HTTP 400: too long"})
        s.update_run(rid, label="baseline", server={"version": 11434, "total_slots": 1})
        s.finish_run(rid, "ok", summary={"tg_tps_median": 41.25}, warnings=[{"code": "few_repeats", "message": "m"}])
        row = s.require(rid)
    assert row.status == "ok" and row.finished_at is not None and row.label == "baseline" and row.mtp is True
    assert row.settings == settings and row.server == {"version": 11434, "total_slots": 1}
    assert row.hardware["devices"][0]["name"] == "RTX 3090 (simulated)"  # type: ignore[index]
    assert row.plan == {"totals": {"kv_mib": 40.0}} and row.memory == {"totals": {"kv": 40.0}}
    assert row.summary == {"tg_tps_median": 41.25}
    assert row.warnings == [{"code": "few_repeats", "message": "m"}]
    assert row.requests[0]["timings"] == REQ["timings"]  # the server's object, unknown keys included
    assert row.requests[0]["metrics_delta"] == REQ["metrics_delta"]
    assert row.requests[1]["error"] == "HTTP 400: too long" and row.requests[1]["timings"] is None
    j = row.to_json()
    assert j["run_id"] == rid and len(j["requests"]) == 2


def test_list_filters_and_orders_newest_first(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as s:
        ids = [s.begin_run(suite="tasks") for _ in range(3)]
        s.finish_run(ids[0], "ok")
        s.finish_run(ids[1], "cancelled")
        assert [r.id for r in s.list_runs()] == ids[::-1]
        assert [r.id for r in s.list_runs(status="ok")] == [ids[0]]
        assert len(s.list_runs(limit=2)) == 2
        assert s.delete_run(ids[2]) and s.get(ids[2]) is None
        with pytest.raises(ValueError):
            s.finish_run(ids[0], "running")
        with pytest.raises(ValueError):
            s.update_run(ids[0], colour="red")


_WRITER = """
import sys
from tui.core.results.store import open_store
s = open_store(sys.argv[1])
rid = s.begin_run(suite="tasks", model="/m.gguf", mtp=False, settings={"parallel": 1})
s.add_request(rid, {"seq": 0, "prompt": "p", "kind": "tg", "repeat": 0, "timings": {"predicted_n": 512}})
if sys.argv[2] == "finish":
    s.finish_run(rid, "ok", summary={"tg_tps_median": 30.5})
    s.close()
else:
    import os
    os._exit(0)  # killed mid-run: no finish, no close
print(rid)
"""

_READER = """
import json, sys
from tui.core.results.store import open_store
s = open_store(sys.argv[1])
print(json.dumps([r.to_json() for r in (s.require(r.id) for r in s.list_runs())]))
"""


def _py(code: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                         env={**os.environ})
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_runs_survive_across_processes(tmp_path: Path) -> None:
    db = str(tmp_path / "r.sqlite")
    _py(_WRITER, db, "finish")
    runs = json.loads(_py(_READER, db))
    assert len(runs) == 1
    assert runs[0]["status"] == "ok" and runs[0]["summary"] == {"tg_tps_median": 30.5}
    assert runs[0]["requests"][0]["timings"] == {"predicted_n": 512}


def test_a_run_whose_process_died_is_marked_failed_with_its_requests(tmp_path: Path) -> None:
    db = str(tmp_path / "r.sqlite")
    _py(_WRITER, db, "die")
    runs = json.loads(_py(_READER, db))  # open_store recovers stale runs
    assert runs[0]["status"] == "failed"
    assert "interrupted" in runs[0]["error"]
    assert len(runs[0]["requests"]) == 1


def test_live_running_run_is_not_touched(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as s:
        rid = s.begin_run(suite="tasks")  # owned by this (live) process
        assert s.recover_stale() == []
        assert s.require(rid).status == "running"


def test_readers_see_consistent_data_while_a_writer_writes(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    writer = Store(db)
    rid = writer.begin_run(suite="tasks")
    n = 200
    errors: list[BaseException] = []
    counts: list[int] = []

    def write() -> None:
        try:
            for i in range(n):
                writer.add_request(rid, {**REQ, "seq": i})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=write)
    t.start()
    with Store(db) as reader:
        while t.is_alive():
            row = reader.get(rid)
            assert row is not None
            counts.append(len(row.requests))
        t.join(timeout=60)
        assert len(reader.require(rid).requests) == n
    writer.close()
    assert not errors
    assert counts == sorted(counts)  # never a torn or shrinking view


def test_upgrade_applies_new_migrations_and_keeps_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "r.sqlite"
    with Store(db) as s:
        rid = s.begin_run(suite="tasks")
    extra = (SCHEMA_VERSION + 1, "ALTER TABLE runs ADD COLUMN notes TEXT; CREATE INDEX runs_status ON runs(status);")
    monkeypatch.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS + (extra,))
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with Store(db) as s:
        assert s.schema_version == SCHEMA_VERSION + 1
        cols = [r[1] for r in s._conn.execute("PRAGMA table_info(runs)").fetchall()]
        assert "notes" in cols
        assert s.require(rid).suite == "tasks"


def test_failed_migration_leaves_the_database_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "r.sqlite"
    with Store(db) as s:
        s.begin_run(suite="tasks")
    bad = (SCHEMA_VERSION + 1, "ALTER TABLE runs ADD COLUMN notes TEXT; THIS IS NOT SQL;")
    monkeypatch.setattr(store_mod, "MIGRATIONS", store_mod.MIGRATIONS + (bad,))
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match=r"to schema \d+ failed .*left as it was"):
        Store(db)
    monkeypatch.undo()
    with Store(db) as s:
        assert s.schema_version == SCHEMA_VERSION
        cols = [r[1] for r in s._conn.execute("PRAGMA table_info(runs)").fetchall()]
        assert "notes" not in cols and len(s.list_runs()) == 1


def test_database_from_a_newer_mtp_tune_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.close()
    with pytest.raises(StoreError, match=r"newer mtp-tune .*Upgrade mtp-tune"):
        Store(db)


def test_garbage_file_gives_a_clear_error(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    db.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StoreError, match=r"r\.sqlite is not a usable results database.*Move it aside"):
        open_store(db)


def test_unwritable_location_gives_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="MTP_TUNE_DATA_DIR"):
        Store(blocker / "sub" / "r.sqlite")
