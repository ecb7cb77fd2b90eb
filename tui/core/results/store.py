"""The results store: every probe run with its settings, server, hardware, memory, requests and warnings.

SQLite in `data_dir()/results.sqlite`. The schema version is `PRAGMA user_version`; `schema.MIGRATIONS`
upgrades any older file step by step when it is opened, and a file from a newer mtp-tune is refused
with a clear message rather than damaged. WAL journal mode lets the TUI, a sweep and `mtp-tune runs`
read while a probe writes. A run is written as it goes (the run row first, then each request), so a
run whose server dies, or whose mtp-tune process is killed, keeps every request done so far.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.core.config.paths import data_dir, private_file
from tui.core.config.jsonshape import ShapeError, check
from tui.core.options.redact import redact_argv
from tui.core.results.schema import MIGRATIONS, SCHEMA_VERSION, statements

DB_NAME = "results.sqlite"
STATUSES = ("running", "ok", "failed", "cancelled")


class StoreError(RuntimeError):
    """The results database cannot be used; the message says which file and what to do."""


@dataclass
class RunRow:
    """One stored run (requests loaded only by `Store.get`)."""

    id: int
    created_at: float
    finished_at: float | None
    status: str
    error: str | None
    label: str | None
    suite: str | None
    url: str | None
    model: str | None
    mtp: bool | None
    settings: dict[str, Any] | None
    config: dict[str, Any] | None
    server: dict[str, Any] | None
    hardware: dict[str, Any] | None
    plan: dict[str, Any] | None
    memory: dict[str, Any] | None
    summary: dict[str, Any] | None
    warnings: list[dict[str, Any]]
    owner_pid: int | None = None
    owner_host: str | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self, with_requests: bool = True) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "requests"}
        d["run_id"] = d.pop("id")
        if with_requests:
            d["requests"] = self.requests
        return d


def default_path() -> Path:
    return data_dir() / DB_NAME


#: JSON keys whose value is an argv (a run's settings' `extra_args`, its server's `argv`).
_ARGV_KEYS = frozenset({"extra_args", "argv"})


def _scrub(obj: Any) -> Any:
    """`obj` with every argv in it redacted: the database is the last writer, whatever a caller forgot."""
    if isinstance(obj, dict):
        return {k: redact_argv(v) if k in _ARGV_KEYS and isinstance(v, list) else _scrub(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_scrub(x) for x in obj]
    return obj


def _dumps(obj: Any) -> str | None:
    return None if obj is None else json.dumps(_scrub(obj), default=str, sort_keys=True)


def _loads(text: str | None, where: str, hint: Any = dict[str, Any] | None) -> Any:
    """A JSON column; ShapeError naming `where` when it is not JSON of that shape (a damaged row)."""
    try:
        value = None if text is None else json.loads(text)
    except (ValueError, RecursionError):
        raise ShapeError(f"{where} is not JSON") from None
    check(value, hint, where)
    return value


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """A database or row that cannot be read as one StoreError naming the file and what to do."""
    try:
        yield
    except (ValueError, TypeError) as exc:  # a column of the wrong type; ShapeError is a ValueError
        raise StoreError(f"{path} holds a damaged run ({exc}); move it aside (mtp-tune will create a new one) "
                         "or restore it from a backup.") from None
    except sqlite3.DatabaseError as exc:
        busy = "locked" in str(exc) or "busy" in str(exc)
        raise StoreError(f"{path} cannot be read ({exc}); " + ("another mtp-tune holds it: try again when it is done."
                         if busy else "move it aside (mtp-tune will create a new one) or restore it from a backup.")) from None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: The connection's page cache, in KiB (SQLite's default is 2000).
CACHE_KIB = 256


class Store:
    """A handle on the results database. Thread-safe (one connection behind a lock)."""

    def __init__(self, path: str | Path | None = None, *, timeout: float = 10.0) -> None:
        self.path = Path(path) if path is not None else default_path()
        try:
            # 0600 before sqlite opens it (it makes -wal and -shm with the database's mode); older ones tightened
            private_file(self.path)
            for side in (self.path.with_name(self.path.name + x) for x in ("-wal", "-shm")):
                if side.exists():
                    private_file(side)
            self._conn = sqlite3.connect(self.path, timeout=timeout, check_same_thread=False, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(
                f"Cannot open the results database {self.path} ({exc}). Check that the directory is "
                "writable, or point MTP_TUNE_DATA_DIR at another directory."
            ) from None
        self._lock = threading.RLock()
        self._conn.row_factory = sqlite3.Row
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
            # SQLite's default page cache (2 MB) fills as the database grows, run after run, and
            # looked like a leak in a long session (bench/bench_soak.py); the queries are small.
            self._conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise StoreError(
                f"{self.path} is not a usable results database ({exc}). Move it aside (mtp-tune will "
                "create a new one) or restore it from a backup."
            ) from None

    # ---- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        current = self.schema_version
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer mtp-tune (schema {current}; this one knows up to "
                f"{SCHEMA_VERSION}). Upgrade mtp-tune, or set MTP_TUNE_DATA_DIR to use another database."
            )
        for version, sql in MIGRATIONS:
            if version <= current:
                continue
            try:
                with self._tx() as c:
                    # executescript would COMMIT our transaction; run the statements one by one.
                    for stmt in statements(sql):
                        c.execute(stmt)
                    c.execute(f"PRAGMA user_version = {version}")
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise
                raise StoreError(
                    f"Upgrading {self.path} to schema {version} failed ({exc}); the database was left as it was "
                    f"(schema {current}). This is a bug in mtp-tune: please report it with this message."
                ) from None

    # ---- writing a run -------------------------------------------------------------------

    def begin_run(
        self,
        *,
        suite: str | None = None,
        url: str | None = None,
        label: str | None = None,
        model: str | None = None,
        mtp: bool | None = None,
        settings: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        server: dict[str, Any] | None = None,
        hardware: dict[str, Any] | None = None,
        plan: dict[str, Any] | None = None,
        memory: dict[str, Any] | None = None,
    ) -> int:
        """Create a run in state `running`; returns its id."""
        with self._tx() as c:
            cur = c.execute(
                """INSERT INTO runs (created_at, status, label, suite, url, model, mtp, owner_pid, owner_host,
                   settings_json, config_json, server_json, hardware_json, plan_json, memory_json)
                   VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    time.time(), label, suite, url, model, None if mtp is None else int(mtp), os.getpid(),
                    socket.gethostname(), _dumps(settings), _dumps(config), _dumps(server), _dumps(hardware),
                    _dumps(plan), _dumps(memory),
                ),
            )
            return int(cur.lastrowid or 0)

    def update_run(self, run_id: int, **fields: Any) -> None:
        """Set JSON sections or columns of a run (settings, server, hardware, plan, memory, label, mtp...)."""
        json_cols = {"settings", "config", "server", "hardware", "plan", "memory", "summary", "warnings"}
        plain_cols = {"label", "suite", "url", "model", "mtp", "error"}
        sets, vals = [], []
        for k, v in fields.items():
            if k in json_cols:
                sets.append(f"{k}_json = ?")
                vals.append(json.dumps(list(v or []), default=str) if k == "warnings" else _dumps(v))
            elif k in plain_cols:
                sets.append(f"{k} = ?")
                vals.append(int(v) if k == "mtp" and v is not None else v)
            else:
                raise ValueError(f"unknown run field {k!r}")
        if not sets:
            return
        with self._tx() as c:
            c.execute(f"UPDATE runs SET {', '.join(sets)} WHERE id = ?", (*vals, run_id))

    def add_request(self, run_id: int, rec: dict[str, Any]) -> None:
        """Append one request (a RequestRecord.to_json() dict) to a run."""
        with self._tx() as c:
            c.execute(
                """INSERT OR REPLACE INTO requests (run_id, seq, prompt, kind, repeat, n_predict, started_at, ttft_ms,
                   wall_ms, timings_json, metrics_json, finish_reason, error, content_chars)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    run_id, rec["seq"], rec["prompt"], rec["kind"], rec["repeat"], rec.get("n_predict"),
                    rec.get("started_at"), rec.get("ttft_ms"), rec.get("wall_ms"), _dumps(rec.get("timings")),
                    _dumps(rec.get("metrics_delta")), rec.get("finish_reason"), rec.get("error"),
                    rec.get("content_chars"),
                ),
            )

    def finish_run(
        self,
        run_id: int,
        status: str,
        *,
        summary: dict[str, Any] | None = None,
        warnings: Sequence[dict[str, Any]] = (),
        error: str | None = None,
    ) -> None:
        if status not in STATUSES or status == "running":
            raise ValueError(f"finish status must be ok, failed or cancelled, not {status!r}")
        with self._tx() as c:
            c.execute(
                "UPDATE runs SET status = ?, finished_at = ?, summary_json = ?, warnings_json = ?, error = ? WHERE id = ?",
                (status, time.time(), _dumps(summary), json.dumps(list(warnings), default=str), error, run_id),
            )

    def delete_run(self, run_id: int) -> bool:
        with self._tx() as c:
            return c.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount > 0

    def recover_stale(self) -> list[int]:
        """Mark `running` runs whose mtp-tune process (on this host) is gone as failed; returns their ids."""
        host = socket.gethostname()
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, owner_pid FROM runs WHERE status = 'running' AND owner_host = ?", (host,)
            ).fetchall()
        stale = [int(r["id"]) for r in rows if r["owner_pid"] is None or not _pid_alive(int(r["owner_pid"]))]
        for rid in stale:
            with self._tx() as c:
                c.execute(
                    "UPDATE runs SET status = 'failed', finished_at = ?, error = ? WHERE id = ? AND status = 'running'",
                    (time.time(), "interrupted: the mtp-tune process that ran this probe exited before it finished; "
                     "the requests it completed are kept", rid),
                )
        return stale

    # ---- reading -------------------------------------------------------------------------

    def _row(self, r: sqlite3.Row) -> RunRow:
        mtp, run = r["mtp"], f"run {r['id']}"
        return RunRow(
            id=int(r["id"]), created_at=float(r["created_at"]),
            finished_at=None if r["finished_at"] is None else float(r["finished_at"]),
            status=str(r["status"]), error=r["error"], label=r["label"], suite=r["suite"], url=r["url"],
            model=r["model"], mtp=None if mtp is None else bool(mtp),
            **{k: _loads(r[f"{k}_json"], f"{run}'s {k}") for k in ("settings", "config", "server", "hardware", "plan",
                                                                   "memory", "summary")},
            warnings=_loads(r["warnings_json"], f"{run}'s warnings", list[Any] | None) or [],
            owner_pid=r["owner_pid"], owner_host=r["owner_host"],
        )

    def list_runs(self, limit: int | None = None, status: str | None = None) -> list[RunRow]:
        """Runs, newest first (without requests)."""
        q = "SELECT * FROM runs"
        args: list[Any] = []
        if status:
            q += " WHERE status = ?"
            args.append(status)
        q += " ORDER BY id DESC"
        if limit:
            q += " LIMIT ?"
            args.append(int(limit))
        with self._lock, _reading(self.path):
            return [self._row(r) for r in self._conn.execute(q, args).fetchall()]

    def get(self, run_id: int, with_requests: bool = True) -> RunRow | None:
        with self._lock, _reading(self.path):
            r = self._conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
            if r is None:
                return None
            row = self._row(r)
            if with_requests:
                row.requests = [self._req(q) for q in self._conn.execute(
                    "SELECT * FROM requests WHERE run_id = ? ORDER BY seq", (run_id,)
                ).fetchall()]
        return row

    def require(self, run_id: int) -> RunRow:
        """`get`, raising StoreError with a hint when the run does not exist."""
        row = self.get(run_id)
        if row is None:
            raise StoreError(f"no run {run_id} in {self.path}; `mtp-tune runs list` shows the ids.")
        return row

    @staticmethod
    def _req(q: sqlite3.Row) -> dict[str, Any]:
        return {
            "seq": q["seq"], "prompt": q["prompt"], "kind": q["kind"], "repeat": q["repeat"],
            "n_predict": q["n_predict"], "started_at": q["started_at"], "ttft_ms": q["ttft_ms"],
            "wall_ms": q["wall_ms"], "timings": _loads(q["timings_json"], f"request {q['seq']}'s timings"),
            "metrics_delta": _loads(q["metrics_json"], f"request {q['seq']}'s metrics"),
            "finish_reason": q["finish_reason"], "error": q["error"], "content_chars": q["content_chars"],
        }

    def export(self, run_ids: Sequence[int]) -> list[dict[str, Any]]:
        """Full JSON of the given runs (with requests), in the given order."""
        return [self.require(i).to_json() for i in run_ids]


def open_store(path: str | Path | None = None) -> Store:
    """Open (creating or upgrading) the store and mark runs left `running` by dead processes as failed."""
    store = Store(path)
    try:
        with _reading(store.path):
            store.recover_stale()
    except StoreError:
        store.close()
        raise
    return store
