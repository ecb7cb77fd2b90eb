"""The quality caches: reference logits (large, pruned to a cap) and results (small), under the cache dir.

Why keyed as they are: a reference is llama.cpp's own logits for one model file (its header digest,
not its path: a moved file is the same model), one binary, one text, one context and chunk count and
the flags that change logits (threads do not: the figures are identical at 1 and 2 threads). A result
adds the measured file and its K/V types. So a second ask with the same question reads the result
and runs nothing, and a new K/V type on the same question costs one pass, never a second reference.

References are pruned oldest-used first (their mtime is touched on use) so that all of them together
stay under the cap; results are a few kB each and pruned by count. A reference is written under a
temporary name and renamed when llama-perplexity has finished it, so a cut pass leaves no half file
that a later run would trust; a lock per key makes a second mtp-tune wait for the first's reference.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tui.core.config.paths import cache_dir, private_dir

ENV_DIR = "MTP_TUNE_QUALITY_DIR"
#: results kept (newest first); one is a few kB
MAX_RESULTS = 2000
#: a lock held longer than this (another mtp-tune computing the same reference) is not waited for
LOCK_WAIT_S = 3600.0
FORMAT = 1


def root() -> Path:
    """`$MTP_TUNE_QUALITY_DIR` (tests), else the cache dir's quality/ folder."""
    env = os.environ.get(ENV_DIR)
    return Path(env) if env else cache_dir() / "quality"


def key(*parts: Any) -> str:
    """A short stable digest of JSON-able parts."""
    return hashlib.sha256(json.dumps([FORMAT, *parts], sort_keys=True, default=str).encode()).hexdigest()[:24]


def binary_id(path: Path) -> list[Any]:
    """What identifies a binary build for the caches: its resolved path, size and mtime."""
    st = path.stat()
    return [str(path.resolve()), st.st_size, st.st_mtime_ns]


def ref_path(ref_key: str) -> Path:
    return root() / "refs" / f"{ref_key}.kld"


def ref_meta_path(ref_key: str) -> Path:
    return root() / "refs" / f"{ref_key}.json"


def result_path(result_key: str) -> Path:
    return root() / "results" / f"{result_key}.json"


def cached_ref(ref_key: str) -> Path | None:
    """The finished reference for `ref_key`, touched as used, or None."""
    p = ref_path(ref_key)
    if p.is_file() and ref_meta_path(ref_key).is_file():
        os.utime(p)
        return p
    return None


def read_ref_meta(ref_key: str) -> dict[str, Any] | None:
    return _read_json(ref_meta_path(ref_key))


def finish_ref(ref_key: str, tmp: Path, meta: dict[str, Any]) -> Path:
    """Make the reference at `tmp` the cached one, with its metadata (the pass's figures)."""
    _write_json(ref_meta_path(ref_key), meta)
    os.replace(tmp, ref_path(ref_key))
    return ref_path(ref_key)


def tmp_ref(ref_key: str) -> Path:
    """Where the reference pass writes (renamed by `finish_ref`; a leftover is pruned as garbage)."""
    private_dir(root() / "refs")
    return root() / "refs" / f"{ref_key}.{os.getpid()}.tmp"


def refs_bytes() -> int:
    return sum(p.stat().st_size for p in (root() / "refs").glob("*.kld") if p.is_file())


def prune_refs(cap_bytes: int, keep: set[str] = frozenset(), room_for: int = 0) -> list[Path]:
    """Delete the least recently used references until the rest plus `room_for` bytes fit `cap_bytes`;
    never those in `keep`. Temporary files of passes that died are removed too. Returns what was deleted."""
    folder = root() / "refs"
    if not folder.is_dir():
        return []
    gone: list[Path] = []
    for tmp in folder.glob("*.tmp"):  # a pass's files, left by an mtp-tune killed mid-pass: its lock is free
        owner = tmp.name.split(".", 1)[0]
        if owner not in keep and _lock_free(owner):
            tmp.unlink(missing_ok=True)
            gone.append(tmp)
    refs = sorted((p for p in folder.glob("*.kld") if p.stem not in keep), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in folder.glob("*.kld")) + room_for
    for p in refs:
        if total <= cap_bytes:
            break
        total -= p.stat().st_size
        p.unlink(missing_ok=True)
        (folder / f"{p.stem}.json").unlink(missing_ok=True)
        gone.append(p)
    return gone


def read_result(result_key: str) -> dict[str, Any] | None:
    return _read_json(result_path(result_key))


def write_result(result_key: str, data: dict[str, Any]) -> None:
    _write_json(result_path(result_key), data)
    folder = root() / "results"
    entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[MAX_RESULTS:]:
        old.unlink(missing_ok=True)


def _lock_free(name: str) -> bool:
    """True when no mtp-tune holds the lock `name` (so nothing is writing that reference now)."""
    path = root() / "locks" / f"{name}.lock"
    try:
        with open(path, "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(fh, fcntl.LOCK_UN)
            return True
    except OSError:
        return True  # no lock folder: no pass ever held it


@contextmanager
def locked(name: str, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the lock `name` (another mtp-tune computing the same reference waits, bounded)."""
    folder = private_dir(root() / "locks")
    with open(folder / f"{name}.lock", "w") as fh:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another mtp-tune has held {folder / name}.lock for {wait_s:g} s") from None
                time.sleep(0.5)  # polling a lock another process holds; nothing to wait on
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        os.utime(path)
    except OSError:
        pass
    return data


def _write_json(path: Path, data: dict[str, Any]) -> None:
    private_dir(path.parent)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.part")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)
