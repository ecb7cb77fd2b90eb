"""A header-only sparse copy of a GGUF, so llama.cpp's dry run reads nothing but metadata.

llama.cpp's `--fit` measurement loads with `no_alloc` and `load_mode = none` (common/fit.cpp) and
returns from `load_tensors` before `load_all_data` (src/llama-model.cpp: `if (ml.no_alloc) return
true;`), so it reads the GGUF header and tensor infos only; the loader still checks that every
tensor lies inside the file. A copy with the real header and a hole of the right size satisfies
both, costs a few MB of disk, and makes a late stop harmless: if the real load starts before the
server is stopped it maps zeros instead of paging in (or sending to a device) a large or remote
file. The same header bytes also key the exact-plan cache (`header_hash`).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from tui.core.planning.gguf_meta import GGUFMeta

#: Files above this size are measured through a sparse copy: every one, so that no dry run, even
#: one stopped late, ever reads the user's file past its header (split models are read in place).
SPARSE_ABOVE_BYTES = 0
#: the sparse copies may take this much disk (their headers) before the oldest are removed
SPARSE_CACHE_CAP_BYTES = 512 << 20


def header_bytes(meta: GGUFMeta) -> bytes:
    """The file's bytes before the tensor data (header, key/values, tensor infos, padding)."""
    with open(meta.path, "rb") as fh:
        try:  # no readahead: the pages after the header (tensor data) are not read in with it
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
        except (AttributeError, OSError):
            pass
        data = fh.read(meta.data_offset)
    if len(data) != meta.data_offset:
        raise OSError(f"{meta.path}: shorter than its own header ({len(data)} of {meta.data_offset} bytes)")
    return data


def header_hash(meta: GGUFMeta) -> str:
    """sha256 of the header bytes and the file size: what identifies a model's memory layout."""
    h = hashlib.sha256(header_bytes(meta))
    h.update(str(meta.file_size).encode())
    return h.hexdigest()


def write_sparse(header: bytes, file_size: int, dest: str | Path) -> Path:
    """Write `header` then a hole up to `file_size` bytes at `dest` (atomically); return the path."""
    dest = Path(dest)
    if file_size < len(header):
        raise ValueError(f"file size {file_size} is smaller than the {len(header)}-byte header")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(header)
            fh.truncate(file_size)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk or an interrupt leaves no partial copy behind
        raise
    return dest


def sparse_path(cache_root: str | Path, digest: str) -> Path:
    return Path(cache_root) / "sparse" / f"{digest[:24]}.gguf"


def sparse_copy(meta: GGUFMeta, cache_root: str | Path, digest: str | None = None) -> Path:
    """The sparse copy of `meta`'s file under `cache_root/sparse/` (reused when already there, and
    then touched: pruning removes the least recently used first)."""
    dest = sparse_path(cache_root, digest or header_hash(meta))
    try:
        if dest.stat().st_size == meta.file_size:
            os.utime(dest)
            return dest
    except FileNotFoundError:
        pass
    return write_sparse(header_bytes(meta), meta.file_size, dest)


def prune_sparse(cache_root: str | Path, cap_bytes: int | None = None, keep: Path | None = None) -> list[Path]:
    """Remove the oldest sparse copies (and stale temporary ones) until the rest take at most
    `cap_bytes` of disk (default SPARSE_CACHE_CAP_BYTES); `keep` is never removed. Returns the removed."""
    cap = SPARSE_CACHE_CAP_BYTES if cap_bytes is None else cap_bytes
    entries: list[tuple[float, int, Path]] = []
    removed: list[Path] = []
    for p in (Path(cache_root) / "sparse").glob("*.gguf*"):
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if p.suffix == ".tmp":
            try:  # another process's copy in the making is left alone for an hour
                if time.time() - st.st_mtime > 3600:
                    p.unlink(missing_ok=True)
                    removed.append(p)
            except OSError:
                pass
            continue
        entries.append((st.st_mtime, st.st_blocks * 512, p))
    used = sum(e[1] for e in entries)
    for _, size, p in sorted(entries, key=lambda e: e[0]):
        if used <= cap:
            break
        if keep is not None and p == keep:
            continue
        try:
            p.unlink()
        except OSError:
            continue
        used -= size
        removed.append(p)
    return removed


def needs_sparse(meta: GGUFMeta, threshold: int = SPARSE_ABOVE_BYTES) -> bool:
    """Large files go through a sparse copy; split models (`split.count` > 1) cannot (the other
    parts are found by name next to the first), so they are measured in place."""
    split = meta.kv.get("split.count")
    if isinstance(split, int) and split > 1:
        return False
    return meta.file_size > threshold
