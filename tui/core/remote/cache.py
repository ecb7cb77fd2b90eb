"""Remote headers and Hub listings kept on disk, so a second plan of the same model asks nothing.

A header entry is a folder named by its key (a `-mu` URL, or a Hub file at a resolved commit) that
holds a header-only sparse copy of every part, under the remote file names, so the planner and
exact mode read it as they read a model on disk (`read_gguf`, `exact_plan`), and `entry.json`
(URLs, sizes, ETags, header sizes, when fetched). A Hub file at a commit never changes; a `-mu`
entry is kept `max_age_s` and then revalidated by its ETag. A repo listing (`refs` + `tree`) is
kept the same time. Writes are atomic (temporary folder or file, then rename).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypedDict

from tui.core.config.paths import cache_dir, private_dir
from tui.core.config.jsonshape import check
from tui.core.planning.sparse import write_sparse
from tui.core.remote.errors import RemoteError
from tui.core.remote.header import RemoteHeader

#: how long a listing or a `-mu` header is trusted without asking again (`--refresh` asks now)
MAX_AGE_S = 6 * 3600.0


def default_root() -> Path:
    """`MTP_TUNE_REMOTE_DIR` wins (tests keep their entries apart from the real cache)."""
    env = os.environ.get("MTP_TUNE_REMOTE_DIR")
    return Path(env) if env else cache_dir() / "remote"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class CachedModel:
    """A cache entry: the local path to plan (the first part) and what was recorded of the remote."""

    path: Path
    key: str
    urls: tuple[str, ...]
    etags: tuple[str, ...]
    sizes: tuple[int, ...]
    header_sizes: tuple[int, ...]
    fetched_at: float

    @property
    def header_bytes(self) -> int:
        return sum(self.header_sizes)

    @property
    def total_size(self) -> int:
        return sum(self.sizes)

    def age_s(self) -> float:
        return time.time() - self.fetched_at


class _Entry(TypedDict):
    """`entry.json` of a header entry, as `_write_entry` writes it (one item per part in every list)."""

    key: str
    names: list[str]
    urls: list[str]
    etags: list[str]
    sizes: list[int]
    header_sizes: list[int]
    fetched_at: float


class _File(TypedDict):
    path: str
    size: int


class _Listing(TypedDict):
    """A saved repo listing, as `fetch.repo_listing` saves it and reads it back."""

    key: str
    commit: str
    files: list[_File]
    fetched_at: float


def _inside(name: str) -> bool:
    """A part's name stays inside its entry's folder (a damaged record could name `../../x`)."""
    p = PurePosixPath(name)
    return bool(name) and not p.is_absolute() and ".." not in p.parts and "\0" not in name


def lookup(key: str, root: Path | None = None) -> CachedModel | None:
    """The entry for `key`, or None (absent, or damaged: a missing part, a record of the wrong shape;
    the caller reads the header again and replaces it)."""
    entry = (root or default_root()) / "headers" / _digest(key)
    try:
        rec = json.loads((entry / "entry.json").read_text())
        check(rec, _Entry, "entry.json")
        names = rec["names"]
        count = len(names)
        if (rec["key"] != key or not count or any(len(rec[k]) != count for k in ("urls", "etags", "sizes", "header_sizes"))
                or not all(map(_inside, names)) or any(not 0 <= h <= s for h, s in zip(rec["header_sizes"], rec["sizes"]))
                or any((entry / n).stat().st_size != s for n, s in zip(names, rec["sizes"]))):
            return None
        return CachedModel(entry / names[0], key, tuple(rec["urls"]), tuple(rec["etags"]), tuple(rec["sizes"]),
                           tuple(rec["header_sizes"]), float(rec["fetched_at"]))
    except (OSError, ValueError, RecursionError):  # ShapeError is a ValueError
        return None


_KEY_LOCKS: dict[str, threading.Lock] = {}
_KEY_LOCKS_GUARD = threading.Lock()


def key_lock(key: str) -> threading.Lock:
    """The lock of one entry in this process: hold it from `lookup` to `store`, so two threads asking
    for the same header (the TUI's estimate and exact run) read it once."""
    with _KEY_LOCKS_GUARD:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


def store(key: str, parts: list[RemoteHeader], root: Path | None = None) -> CachedModel:
    """Write the sparse copies of `parts` (first part first) and the record, replacing any old entry.

    Written in a temporary folder of its own, then renamed into place under a lock on the entry
    (another mtp-tune process may be writing it too); an old entry is renamed away first and
    removed after, so a reader sees the old entry, none, or the new one, never a mix."""
    headers = (root or default_root()) / "headers"
    entry = headers / _digest(key)
    tmp: Path | None = None
    found: CachedModel | None = None
    try:
        private_dir(headers)
        tmp = Path(tempfile.mkdtemp(prefix=entry.name + ".", suffix=".tmp", dir=headers))
        found = _write_entry(tmp, key, parts, entry, root)
    except OSError as exc:
        raise RemoteError(f"the header cache at {headers} could not be written ({exc}); check the disk and "
                          "MTP_TUNE_REMOTE_DIR / MTP_TUNE_CACHE_DIR.") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if found is None:
        raise RemoteError(f"the header cache entry {entry} could not be written; check the disk and "
                          "MTP_TUNE_REMOTE_DIR / MTP_TUNE_CACHE_DIR.")
    return found


def _write_entry(tmp: Path, key: str, parts: list[RemoteHeader], entry: Path, root: Path | None) -> CachedModel | None:
    """Fill `tmp`, rename it to `entry` and read it back, under the entry's lock (see `store`)."""
    headers = entry.parent
    for part in parts:
        write_sparse(part.header, part.size, tmp / part.name)
    rec = {"key": key, "names": [p.name for p in parts], "urls": [p.url for p in parts],
           "etags": [p.etag for p in parts], "sizes": [p.size for p in parts],
           "header_sizes": [p.header_size for p in parts], "fetched_at": time.time()}
    (tmp / "entry.json").write_text(json.dumps(rec, indent=1))
    with _file_lock(headers / f"{entry.name}.lock"):  # one writer of an entry at a time, across processes
        if entry.exists():
            old = Path(tempfile.mkdtemp(prefix=entry.name + ".", suffix=".old", dir=headers))
            os.replace(entry, old / "entry")
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, entry)
        return lookup(key, root)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive `flock` on `path` (POSIX; elsewhere none): mtp-tune processes writing one entry."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)

def touch(model: CachedModel) -> None:
    """Mark a revalidated entry fresh again."""
    rec_path = model.path.parent / "entry.json"
    try:
        rec = json.loads(rec_path.read_text())
        rec["fetched_at"] = time.time()
        _write_atomic(rec_path, json.dumps(rec, indent=1))
    except (OSError, ValueError, TypeError):
        pass


def load_listing(key: str, root: Path | None = None) -> dict[str, Any] | None:
    """The saved listing of `key` (`commit`, `files` of `path` and `size`, `fetched_at`), or None:
    never saved, another key's, or damaged (the caller lists the repo again and replaces it)."""
    try:
        rec = json.loads(((root or default_root()) / "listings" / f"{_digest(key)}.json").read_text())
        check(rec, _Listing, "listing")
        return rec if rec["key"] == key else None  # type: ignore[return-value]
    except (OSError, ValueError, RecursionError):  # ShapeError is a ValueError
        return None


def save_listing(key: str, listing: dict[str, Any], root: Path | None = None) -> None:
    path = (root or default_root()) / "listings" / f"{_digest(key)}.json"
    _write_atomic(path, json.dumps({**listing, "key": key, "fetched_at": time.time()}, indent=1))


def _write_atomic(path: Path, text: str) -> None:
    private_dir(path.parent)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
