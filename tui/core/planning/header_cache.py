"""A cache of parsed GGUF headers, keyed by the file's identity, so a model is walked once, not per plan.

Why: a Qwen3.6 header holds a 248k-token vocabulary and as many merges, length-prefixed strings that
must be walked one by one to reach the tensor table. That walk is 0.1-0.15 s of every `mtp-tune plan`
(bench/bench_plan_startup.py), while a user plans the same 20 GB file again and again. The parsed
header (version, sizes, key/values with long arrays already reduced to their length, tensor table,
warnings) is a few hundred kB of JSON that loads in milliseconds.

When an entry is trusted: its key is the file's resolved path, size, mtime (ns), inode and the
reader's format; a file modified in place gets a new mtime. Because file systems stamp mtimes with a
coarse clock (a few ms), a file modified within that tick could keep its stamp, so only files whose
mtime is at least `SETTLED_S` old are cached: a model being downloaded or written is always read.
A damaged or unreadable entry is a miss (the file is read again), never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from tui.core.config.paths import cache_dir, private_dir
from tui.core.planning.gguf_meta import ArrayInfo, TensorInfo

#: bump when the parser's output changes shape or meaning (old entries are then simply not found)
FORMAT = 1
#: files modified more recently than this are read, not cached (see the module docstring)
SETTLED_S = 10.0
_ARRAY = "__gguf_array__"

#: version, file size, alignment, data offset, key/values, tensors, warnings (gguf_reader.Header)
Header = tuple[int, int, int, int, dict[str, Any], list[TensorInfo], list[str]]


def cache_root() -> Path:
    """`MTP_TUNE_HEADER_DIR` wins (tests), else the cache dir's headers/ folder."""
    env = os.environ.get("MTP_TUNE_HEADER_DIR")
    return Path(env) if env else cache_dir() / "headers"


def entry_path(path: Path, st: os.stat_result, root: Path | None = None) -> Path | None:
    """The entry for this file as it is now, or None when it is too fresh to cache."""
    if time.time() - st.st_mtime < SETTLED_S:
        return None
    ident = json.dumps([FORMAT, str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino])
    return (root or cache_root()) / f"{hashlib.sha256(ident.encode()).hexdigest()[:32]}.json"


def _encode(value: Any) -> Any:
    if isinstance(value, ArrayInfo):
        return {_ARRAY: [value.elem_type, value.length]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        pair = value.get(_ARRAY)
        if not (isinstance(pair, list) and len(pair) == 2 and all(type(x) is int for x in pair)):
            raise ValueError("not an array record")
        return ArrayInfo(pair[0], pair[1])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def load(entry: Path) -> Header | None:
    """The header stored at `entry`, or None (missing or damaged: a miss)."""
    try:
        d = json.loads(entry.read_text(encoding="utf-8"))
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            return None
        ints = [d["version"], d["file_size"], d["alignment"], d["data_offset"]]
        if not all(type(x) is int for x in ints) or not isinstance(d["kv"], dict):
            return None
        kv = {str(k): _decode(v) for k, v in d["kv"].items()}
        tensors = [TensorInfo(str(n), str(tn), int(ti), tuple(int(x) for x in shape), int(off), int(nb),
                              None if layer is None else int(layer), int(f))
                   for n, tn, ti, shape, off, nb, layer, f in d["tensors"]]
        warnings = [str(w) for w in d["warnings"]]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return ints[0], ints[1], ints[2], ints[3], kv, tensors, warnings


def save(entry: Path, header: Header) -> None:
    """Store `header` at `entry` (atomically, in a private folder); a failure only means a later read walks it."""
    version, file_size, alignment, data_offset, kv, tensors, warnings = header
    data = {"format": FORMAT, "version": version, "file_size": file_size, "alignment": alignment,
            "data_offset": data_offset, "kv": {k: _encode(v) for k, v in kv.items()},
            "tensors": [[t.name, t.type_name, t.type_id, list(t.shape), t.offset, t.nbytes, t.layer, t.file]
                        for t in tensors],
            "warnings": list(warnings)}
    from tui.core.presets.write import PRIVATE, atomic_write_bytes  # the presets package costs ~0.1 s: a miss pays it

    try:
        private_dir(entry.parent)
        atomic_write_bytes(entry, json.dumps(data).encode(), mode=PRIVATE)
    except (OSError, ValueError):
        pass
