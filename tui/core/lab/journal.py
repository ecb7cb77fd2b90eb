"""The one journal an experiment resumes from: one JSON file per sweep (`data_dir()/sweeps/<id>.json`)
or tune (`data_dir()/tunes/<id>.json`), holding every finished `Trial` and what is not a trial.

Why a journal next to the results store: the store holds probe runs, but an experiment also has trials
that never produced a run (invalid, predicted OOM, failed launches), knob-search findings, a launch
counter and, for a tune, its workload, prompt and A/B verdicts. The file is rewritten atomically
after every trial (temp file, fsync, rename, private mode), so an experiment killed at any moment
resumes from its last finished trial; an interrupted one is simply not in it and runs again.

Why one journal for both: the sweep and the tune each had their own file logic and the tune wrapped
the sweep's (its records squeezed into rows). Now both read and write this `Journal`; the tune's own
data is its typed `tune` section. The file carries `version` (2); older files (format 1, written by
`sweep.state` and `tuning.tune_state`) are upgraded on read by `journal_v1`; a newer, foreign or
damaged file is refused in one sentence naming it. `JournalLock` refuses a second runner.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from tui.core.config.jsonshape import ShapeError, check, fields
from tui.core.config.paths import data_dir, private_dir
from tui.core.lab.events import LabError
from tui.core.lab.journal_v1 import upgrade
from tui.core.lab.trial import FINISHED, Trial
from tui.core.presets.write import PRIVATE, atomic_write_bytes

VERSION = 2
Kind = Literal["sweep", "tune"]
#: A deeper check of what a loaded journal holds (the tune's section), raising ShapeError.
Check = Callable[["Journal"], None]


class JournalError(LabError):
    """The journal cannot be read, written or locked; the message names the file and what to do (a
    `LabError`, so a front end catches the one error of every experiment)."""


def journals_dir(kind: Kind) -> Path:
    """Where a kind's journals live (sweeps and tunes apart, so neither lists the other's)."""
    return data_dir() / f"{kind}s"


def journal_path(kind: Kind, journal_id: str, root: Path | None = None) -> Path:
    return (root or journals_dir(kind)) / f"{journal_id}.json"


def _start_over(kind: Kind) -> str:
    return ("delete it, or run the tune with --fresh, to start it over" if kind == "tune"
            else "delete it or move it away to start the sweep over")


@dataclass
class AbResult:
    """A finished MTP on/off A/B between two trials (`lab.ranking.AbVerdict.to_json()`)."""

    on: str
    off: str
    passes: int
    verdict: dict[str, Any]


@dataclass
class TuneSection:
    """What a tune keeps besides its trials, so a resume repeats none of it."""

    workload: dict[str, Any] | None = None  # `Workload.to_json()`: the suite's token counts (a sizing launch)
    prompt: str | None = None  # the raw prompt a shape workload was cut into (the same text on resume)
    ab: list[AbResult] = field(default_factory=list)

    def ab_verdict(self, on: str, off: str, passes: int) -> dict[str, Any] | None:
        """The stored verdict of a complete A/B of these two trials with `passes` passes, or None."""
        for a in self.ab:
            if (a.on, a.off, a.passes) == (on, off, passes) and (a.verdict.get("status") or "complete") == "complete":
                return a.verdict
        return None

    def set_ab(self, on: str, off: str, passes: int, verdict: dict[str, Any]) -> None:
        self.ab = [a for a in self.ab if (a.on, a.off, a.passes) != (on, off, passes)]
        self.ab.append(AbResult(on, off, passes, verdict))

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "prompt": self.prompt,
                "ab": [{"on": a.on, "off": a.off, "passes": a.passes, "verdict": a.verdict} for a in self.ab]}

    @classmethod
    def from_json(cls, d: Any, where: str = "tune") -> TuneSection:
        f = fields(cls, d, where)
        return cls(f.get("workload"), f.get("prompt"),
                   [AbResult(**fields(AbResult, a, f"{where}.ab[{i}]", required=("on", "off", "passes", "verdict")))
                    for i, a in enumerate(f.get("ab") or [])])


@dataclass
class Journal:
    """Everything one sweep or tune has finished so far."""

    kind: Kind
    id: str  # the sweep id or tune id (the file's name)
    definition: dict[str, Any]
    trials: dict[str, Trial] = field(default_factory=dict)  # by key, in the order finished
    findings: list[dict[str, Any]] = field(default_factory=list)  # the sweep's knob searches
    launches: int = 0  # server launches over all sessions (searches included)
    sessions: list[dict[str, Any]] = field(default_factory=list)  # {started_at, finished_at, launches, stopped}
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    tune: TuneSection = field(default_factory=TuneSection)  # a tune's own data (stays empty for a sweep)
    path: Path | None = None

    def finished(self, key: str, *, try_anyway: bool = False) -> bool:
        """Whether a sweep runs this row again on resume."""
        t = self.trials.get(key)
        if t is None or t.status not in FINISHED:
            return False
        return not (try_anyway and t.status == "predicted_oom")

    def record(self, trial: Trial) -> None:
        self.trials[trial.key] = trial

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, "kind": self.kind, "id": self.id, "definition": self.definition,
                "created_at": self.created_at, "updated_at": self.updated_at, "launches": self.launches,
                "sessions": self.sessions, "findings": self.findings,
                "trials": {k: t.to_json() for k, t in self.trials.items()},
                "tune": self.tune.to_json() if self.kind == "tune" else None}

    def save(self) -> Path:
        """Write atomically and privately (`presets.write.atomic_write_bytes`: temp file, fsync, rename)."""
        if self.path is None:
            self.path = journal_path(self.kind, self.id)
        self.updated_at = time.time()
        data = json.dumps(self.to_json(), indent=1, default=str).encode()
        try:
            private_dir(self.path.parent)
            atomic_write_bytes(self.path, data, mode=PRIVATE)
        except OSError as e:
            raise JournalError(f"cannot write the {self.kind} journal {self.path}: {e.strerror or e}; check that the "
                               "folder is writable and the disk is not full (MTP_TUNE_DATA_DIR moves it).") from None
        return self.path

    @classmethod
    def from_json(cls, d: Any, path: Path | None = None) -> Journal:
        """A version-2 journal; ShapeError (a ValueError) naming the first field of the wrong shape."""
        check(d, dict[str, Any], "the file")
        f = fields(cls, {k: v for k, v in d.items() if k not in ("trials", "tune", "path")}, "", required=("kind", "id"))
        trials = d.get("trials")
        check(trials, dict[str, Any] | None, "trials")
        tune = d.get("tune")
        return cls(f["kind"], f["id"], f.get("definition") or {},
                   {k: Trial.from_json(v, f"trials.{k}") for k, v in (trials or {}).items()},
                   list(f.get("findings") or []), int(f.get("launches") or 0), list(f.get("sessions") or []),
                   float(f.get("created_at") or time.time()), float(f.get("updated_at") or time.time()),
                   TuneSection() if tune is None else TuneSection.from_json(tune), path)


def _read(kind: Kind, path: Path, check_more: Check | None = None) -> Journal:
    """The journal in `path`, upgraded to this version; JournalError in one sentence naming the file."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise JournalError(f"the {kind} journal {path} cannot be read ({e}); {_start_over(kind)}.") from None
    if not isinstance(d, dict):
        raise JournalError(f"the {kind} journal {path} is damaged (the file is not an object); {_start_over(kind)}.")
    version = d.get("version", d.get("format", 0))
    if not isinstance(version, int) or isinstance(version, bool) or version > VERSION or version < 0:
        raise JournalError(f"the {kind} journal {path} has version {version!r:.20}, which this mtp-tune (version "
                           f"{VERSION}) cannot read; update mtp-tune, or move the file away to start the {kind} over.")
    if (d.get("id", d.get("sweep_id")), d.get("kind", kind)) != (path.stem, kind):
        raise JournalError(f"the {kind} journal {path} belongs to another experiment (wrong id or kind); "
                           f"{_start_over(kind)}.")
    try:
        j = Journal.from_json(d if "version" in d else upgrade(d, kind), path)
        if check_more is not None:
            check_more(j)
    except ShapeError as e:
        raise JournalError(f"the {kind} journal {path} is damaged ({e}); {_start_over(kind)}.") from None
    return j


def load_journal(kind: Kind, journal_id: str, root: Path | None = None, *, check_more: Check | None = None) -> Journal | None:
    """The saved journal of an experiment, or None when it never ran (JournalError when unreadable)."""
    path = journal_path(kind, journal_id, root)
    return _read(kind, path, check_more) if path.exists() else None


def open_journal(kind: Kind, journal_id: str, definition: dict[str, Any], root: Path | None = None, *,
                 fresh: bool = False, check_more: Check | None = None) -> Journal:
    """The saved journal to resume, or a new one (`fresh=True` discards the saved one)."""
    existing = None if fresh else load_journal(kind, journal_id, root, check_more=check_more)
    if existing is not None:
        existing.definition = definition
        return existing
    return Journal(kind, journal_id, definition, path=journal_path(kind, journal_id, root))


def list_journals(kind: Kind = "sweep", root: Path | None = None) -> list[Journal]:
    """Saved journals of a kind, newest first (unreadable ones skipped: a list must not fail on one)."""
    out: list[Journal] = []
    d = root or journals_dir(kind)
    if not d.is_dir():
        return out
    for p in d.glob("*.json"):
        try:
            out.append(_read(kind, p))
        except JournalError:
            continue
    return sorted(out, key=lambda j: j.updated_at, reverse=True)


class JournalLock:
    """An exclusive lock on one journal (`<id>.lock`, flock), so the TUI and the CLI cannot run the same
    experiment at once and overwrite each other's trials. Released when the process dies."""

    def __init__(self, kind: Kind, journal_id: str, root: Path | None = None) -> None:
        self.kind = kind
        self.path = (root or journals_dir(kind)) / f"{journal_id}.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            import fcntl  # POSIX only: elsewhere there is no cross-process guard
        except ImportError:  # pragma: no cover
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
            raise JournalError(f"this {self.kind} is already running (pid {holder}, lock {self.path}); wait for it "
                               "to finish or stop it, then run it again to continue.") from None
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

    def __enter__(self) -> JournalLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
