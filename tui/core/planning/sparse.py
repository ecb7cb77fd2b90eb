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
from pathlib import Path

from tui.core.planning.gguf_meta import GGUFMeta

#: Files above this size are measured through a sparse copy (smaller ones are read as they are).
SPARSE_ABOVE_BYTES = 1 << 30


def header_bytes(meta: GGUFMeta) -> bytes:
    """The file's bytes before the tensor data (header, key/values, tensor infos, padding)."""
    with open(meta.path, "rb") as fh:
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
    with open(tmp, "wb") as fh:
        fh.write(header)
        fh.truncate(file_size)
    os.replace(tmp, dest)
    return dest


def sparse_copy(meta: GGUFMeta, cache_root: str | Path, digest: str | None = None) -> Path:
    """The sparse copy of `meta`'s file under `cache_root/sparse/` (reused when already there)."""
    digest = digest or header_hash(meta)
    dest = Path(cache_root) / "sparse" / f"{digest[:24]}.gguf"
    try:
        if dest.stat().st_size == meta.file_size:
            return dest
    except FileNotFoundError:
        pass
    return write_sparse(header_bytes(meta), meta.file_size, dest)


def needs_sparse(meta: GGUFMeta, threshold: int = SPARSE_ABOVE_BYTES) -> bool:
    """Large files go through a sparse copy; split models (`split.count` > 1) cannot (the other
    parts are found by name next to the first), so they are measured in place."""
    split = meta.kv.get("split.count")
    if isinstance(split, int) and split > 1:
        return False
    return meta.file_size > threshold
