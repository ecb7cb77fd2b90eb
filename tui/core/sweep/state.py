"""Resumable sweep state: one JSON file per sweep, `data_dir()/sweeps/<sweep id>.json`.

Why a JSON file next to the results store: the store holds probe runs (one per measured row), but a
sweep also has rows that never produced a run (invalid, predicted OOM, failed launches), findings
(fit-target searches) and a launch counter. The file is rewritten atomically after every row, so a
sweep killed at any moment resumes from its last finished row; interrupted rows are simply not in
it and run again.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from types import TracebackType
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tui.core.config.paths import data_dir, private_dir
from tui.core.config.jsonshape import ShapeError, check, fields

STATE_FORMAT = 1
#: Statuses a row can end with. `pending` rows (never run, or interrupted) are not stored.
STATUSES = ("ok", "failed", "invalid", "duplicate", "predicted_oom")
#: Finished rows are not run again on resume (`predicted_oom` runs again with try-anyway).
FINISHED = frozenset({"ok", "failed", "invalid", "duplicate", "predicted_oom"})


class StateError(RuntimeError):
    """The state file cannot be read or written; the message names it and says what to do."""


def sweeps_dir() -> Path:
    return data_dir() / "sweeps"


def state_path(sweep_id: str, root: Path | None = None) -> Path:
    return (root or sweeps_dir()) / f"{sweep_id}.json"


@dataclass
class RowResult:
    """The outcome of one configuration. Numbers are medians over passes; `*_summary` hold median,
    min, max, n (see probes.stats.Summary)."""

    key: str
    status: str
    reason: str | None = None  # why it failed or was skipped, one paragraph
    failure_kind: str | None = None  # failures.FailureKind value
    settings: dict[str, Any] = field(default_factory=dict)  # what ran (after a fit search: the fixed value)
    n_predict: int | None = None
    tg_tps: float | None = None
    pp_tps: float | None = None
    acceptance: float | None = None
    tg_summary: dict[str, Any] | None = None
    pp_summary: dict[str, Any] | None = None
    passes: list[dict[str, Any]] = field(default_factory=list)  # per pass tg_tps, pp_tps, acceptance
    mean_accept_len: float | None = None
    memory: dict[str, Any] | None = None  # {"total_mib", "devices": {dev: MiB}, "n_ctx"}
    plan: dict[str, Any] | None = None  # {"risk", "message"}
    warnings: list[str] = field(default_factory=list)
    finding: dict[str, Any] | None = None  # KnobFinding.to_json() when a search ran
    run_id: int | None = None  # the results store's run
    launch: int | None = None  # which launch of the sweep measured it (counts from 1)
    log_path: str | None = None
    started_at: float | None = None
    finished_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any], where: str = "row") -> RowResult:
        """A stored row; ShapeError (a ValueError) naming the first field of the wrong shape."""
        return cls(**fields(cls, d, where, required=("key", "status")))


@dataclass
class SweepState:
    """Everything a sweep has finished so far."""

    sweep_id: str
    definition: dict[str, Any]
    rows: dict[str, RowResult] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    launches: int = 0  # server launches over all sessions (fit searches included)
    sessions: list[dict[str, Any]] = field(default_factory=list)  # {started_at, finished_at, launches, stopped}
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    path: Path | None = None

    def finished(self, key: str, *, try_anyway: bool = False) -> bool:
        r = self.rows.get(key)
        if r is None or r.status not in FINISHED:
            return False
        return not (try_anyway and r.status == "predicted_oom")

    def record(self, row: RowResult) -> None:
        self.rows[row.key] = row

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "sweep_id": self.sweep_id,
            "definition": self.definition,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "launches": self.launches,
            "sessions": self.sessions,
            "findings": self.findings,
            "rows": {k: r.to_json() for k, r in self.rows.items()},
        }

    def save(self) -> Path:
        """Write atomically (temp file in the same directory, fsync, rename)."""
        if self.path is None:
            self.path = state_path(self.sweep_id)
        self.updated_at = time.time()
        data = json.dumps(self.to_json(), indent=1, default=str).encode()
        try:
            private_dir(self.path.parent)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError as e:
            raise StateError(f"cannot write the sweep state {self.path}: {e.strerror or e}. Check that the "
                             "directory is writable and the disk is not full (MTP_TUNE_DATA_DIR moves it).") from None
        return self.path

    @classmethod
    def from_json(cls, d: dict[str, Any], path: Path | None = None) -> SweepState:
        """A saved state; ShapeError (a ValueError) naming the first field of the wrong shape."""
        check(d, dict[str, Any], "the file")
        f = fields(cls, {k: v for k, v in d.items() if k not in ("rows", "path")}, "", required=("sweep_id",))
        check(d.get("rows") or {}, dict[str, Any], "rows")
        return cls(
            sweep_id=f["sweep_id"], definition=f.get("definition", {}),
            rows={k: RowResult.from_json(v, f"rows.{k}") for k, v in (d.get("rows") or {}).items()},
            findings=list(f.get("findings") or []), launches=int(f.get("launches") or 0),
            sessions=list(f.get("sessions") or []), created_at=float(f.get("created_at") or time.time()),
            updated_at=float(f.get("updated_at") or time.time()), path=path,
        )


def load_state(sweep_id: str, root: Path | None = None) -> SweepState | None:
    """The saved state of a sweep, or None when it never ran."""
    path = state_path(sweep_id, root)
    if not path.exists():
        return None
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise StateError(f"the sweep state {path} cannot be read ({e}); delete it to start the sweep over.") from None
    fmt = d.get("format", 0) if isinstance(d, dict) else None
    if not isinstance(d, dict) or d.get("sweep_id") != sweep_id or not isinstance(fmt, int) or fmt > STATE_FORMAT:
        raise StateError(f"the sweep state {path} is not a state file of this mtp-tune (wrong id or newer format); "
                         "delete it or move it away to start the sweep over.")
    try:
        return SweepState.from_json(d, path)
    except ShapeError as e:
        raise StateError(f"the sweep state {path} is damaged ({e}); delete it or move it away to start over.") from None


def open_state(sweep_id: str, definition: dict[str, Any], root: Path | None = None, *, fresh: bool = False) -> SweepState:
    """The saved state to resume, or a new one (`fresh=True` discards the saved rows)."""
    existing = None if fresh else load_state(sweep_id, root)
    if existing is not None:
        existing.definition = definition
        return existing
    return SweepState(sweep_id, definition, path=state_path(sweep_id, root))


def list_states(root: Path | None = None) -> list[SweepState]:
    """Saved sweeps, newest first (unreadable files skipped)."""
    out: list[SweepState] = []
    d = root or sweeps_dir()
    if not d.is_dir():
        return out
    for p in d.glob("*.json"):
        try:
            out.append(SweepState.from_json(json.loads(p.read_text(encoding="utf-8")), p))
        except (OSError, ValueError, RecursionError):  # ShapeError is a ValueError
            continue
    return sorted(out, key=lambda s: s.updated_at, reverse=True)


class SweepLock:
    """An exclusive lock on one sweep's state (`<id>.lock`, flock), so the TUI and the CLI cannot
    run the same sweep at once and overwrite each other's rows. Released when the process dies."""

    def __init__(self, sweep_id: str, root: Path | None = None) -> None:
        self.path = (root or sweeps_dir()) / f"{sweep_id}.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no cross-process guard
            return
        private_dir(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            finally:
                os.close(fd)
            raise StateError(f"this sweep is already running (pid {holder}); wait for it to finish or stop it, "
                             f"then run it again to continue. Lock: {self.path}") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                os.close(self._fd)  # closing drops the flock
                self._fd = None

    def __enter__(self) -> SweepLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
