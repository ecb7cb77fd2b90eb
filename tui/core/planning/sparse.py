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
import shutil
import time
from pathlib import Path

from tui.core.config.paths import private_dir
from tui.core.planning.gguf_meta import GGUFMeta, SplitPart
from tui.core.planning.gguf_reader import split_name

#: Files above this size are measured through a sparse copy: every one, so that no dry run, even
#: one stopped late, ever reads the user's file past its header. A split model's copy is a folder
#: (`DIGEST.split/`) of one sparse copy per part, named so llama.cpp finds them all from the first;
#: it is made, reused, pruned and removed as one entry.
SPARSE_ABOVE_BYTES = 0
#: the sparse copies may take this much disk (their headers) before the oldest are removed
SPARSE_CACHE_CAP_BYTES = 512 << 20


def _parts(meta: GGUFMeta) -> list[SplitPart]:
    return list(meta.parts) or [SplitPart(meta.path, meta.file_size, meta.data_offset)]


def header_bytes(meta: GGUFMeta | SplitPart) -> bytes:
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
    """sha256 of the header bytes and the file size (of every part of a split model): what
    identifies a model's memory layout. Computed once per read model (kept on `meta.digest`): exact
    mode and calibration ask for it on every dry run."""
    if meta.digest is None:
        h = hashlib.sha256()
        for part in _parts(meta):
            h.update(header_bytes(part))
            h.update(str(part.file_size).encode())
        meta.digest = h.hexdigest()
    return meta.digest


def write_sparse(header: bytes, file_size: int, dest: str | Path) -> Path:
    """Write `header` then a hole up to `file_size` bytes at `dest` (atomically); return the path."""
    dest = Path(dest)
    if file_size < len(header):
        raise ValueError(f"file size {file_size} is smaller than the {len(header)}-byte header")
    private_dir(dest.parent)
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


def sparse_path(cache_root: str | Path, digest: str, meta: GGUFMeta | None = None) -> Path:
    """The cache entry for `digest`: a file, or for a split `meta` the folder of its parts."""
    split = meta is not None and len(meta.parts) > 1
    return Path(cache_root) / "sparse" / f"{digest[:24]}.{'split' if split else 'gguf'}"


def sparse_model(entry: Path, meta: GGUFMeta) -> Path:
    """The path to give llama-server as -m for a cache entry (a split set's first part)."""
    return entry / split_name("model", 0, len(meta.parts)) if len(meta.parts) > 1 else entry


def _complete(entry: Path, parts: list[SplitPart]) -> bool:
    try:
        return all((entry / split_name("model", i, len(parts))).stat().st_size == p.file_size for i, p in enumerate(parts))
    except FileNotFoundError:
        return False


def remove_sparse(entry: Path) -> None:
    """Remove a cache entry, a file or a split set's folder, whole."""
    if entry.is_dir():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        entry.unlink(missing_ok=True)


def sparse_copy(meta: GGUFMeta, cache_root: str | Path, digest: str | None = None) -> Path:
    """The sparse copy of `meta`'s file under `cache_root/sparse/` (reused when already there, and
    then touched: pruning removes the least recently used first); returns the path for -m. A split
    model's parts are written into a temporary folder renamed into place once all are there."""
    entry = sparse_path(cache_root, digest or header_hash(meta), meta)
    if len(meta.parts) <= 1:
        try:
            if entry.stat().st_size == meta.file_size:
                os.utime(entry)
                return entry
        except FileNotFoundError:
            pass
        return write_sparse(header_bytes(meta), meta.file_size, entry)
    parts = list(meta.parts)
    if _complete(entry, parts):
        os.utime(entry)
        return sparse_model(entry, meta)
    tmp = entry.with_name(entry.name + f".{os.getpid()}.tmp")
    try:
        remove_sparse(tmp)
        for i, part in enumerate(parts):
            write_sparse(header_bytes(part), part.file_size, tmp / split_name("model", i, len(parts)))
        remove_sparse(entry)  # an incomplete set (a part deleted by hand) is replaced whole
        os.replace(tmp, entry)
    except BaseException:
        remove_sparse(tmp)
        raise
    return sparse_model(entry, meta)


def prune_sparse(cache_root: str | Path, cap_bytes: int | None = None, keep: Path | None = None) -> list[Path]:
    """Remove the oldest sparse copies (and stale temporary ones) until the rest take at most
    `cap_bytes` of disk (default SPARSE_CACHE_CAP_BYTES); `keep` is never removed. Returns the removed."""
    cap = SPARSE_CACHE_CAP_BYTES if cap_bytes is None else cap_bytes
    entries: list[tuple[float, int, Path]] = []
    removed: list[Path] = []
    for p in (Path(cache_root) / "sparse").glob("*.*"):
        if not (".gguf" in p.name or ".split" in p.name):
            continue
        try:
            st = p.stat()
            blocks = sum(f.stat().st_blocks for f in p.iterdir()) if p.is_dir() else st.st_blocks
        except FileNotFoundError:
            continue
        if p.suffix == ".tmp":
            try:  # another process's copy in the making is left alone for an hour
                if time.time() - st.st_mtime > 3600:
                    remove_sparse(p)
                    removed.append(p)
            except OSError:
                pass
            continue
        entries.append((st.st_mtime, blocks * 512, p))
    used = sum(e[1] for e in entries)
    for _, size, p in sorted(entries, key=lambda e: e[0]):
        if used <= cap:
            break
        if keep is not None and p == keep:
            continue
        try:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
        except OSError:
            continue
        used -= size
        removed.append(p)
    return removed


def needs_sparse(meta: GGUFMeta, threshold: int = SPARSE_ABOVE_BYTES) -> bool:
    """Files (a split model: all its parts together) above `threshold` go through a sparse copy."""
    return sum(p.file_size for p in _parts(meta)) > threshold
