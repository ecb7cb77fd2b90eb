"""Planning's on-disk cache, read without a server: its root, a build's identity, the cached calibrations.

Exact mode (`exact`) keeps its entries, sparse copies and dry-run logs under `default_root()`, and
`calibrate` its fitted calibrations beside them (calibration/), both keyed by the model's header hash
and the llama-server build (`binary_id`). This module is the data half of that: paths, keys, the
calibration's loader and writer, `attach`. It imports no launcher, so the estimate path (`mtp-tune
plan`, the TUI's model read) attaches a cached calibration without importing the dry-run machinery
(dryrun -> server supervisor -> readiness -> httpx: about 0.16 s of every plan's start-up).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from tui.core.config.jsonshape import check
from tui.core.config.paths import cache_dir, private_dir
from tui.core.planning import calibration as cal
from tui.core.planning.gguf_meta import GGUFMeta
from tui.core.planning.sparse import header_hash

#: the device kind calibrations are measured on (host only, the CPU backend)
KIND = "CPU"


def default_root() -> Path:
    """Where exact mode keeps its cache entries, sparse copies and dry-run logs (`MTP_TUNE_EXACT_DIR`
    wins: tests keep their dry runs out of the real cache, which also holds the server build)."""
    env = os.environ.get("MTP_TUNE_EXACT_DIR")
    return Path(env) if env else cache_dir() / "exact"


def binary_id(path: Path) -> list[Any]:
    """What identifies a llama-server build in a cache key (path, size, mtime)."""
    st = path.stat()
    return [str(path.resolve()), st.st_size, int(st.st_mtime)]


def calibration_path(root: Path, meta: GGUFMeta, server_bin: Path, kind: str = KIND) -> Path:
    """The cache entry of this model (header hash) by this build and device kind, beside exact's."""
    payload = json.dumps([cal.FORMAT, header_hash(meta), binary_id(server_bin), kind,
                          [p.args for p in cal.DESIGN + cal.SPLIT_DESIGN]])
    return root / "calibration" / f"{hashlib.sha256(payload.encode()).hexdigest()[:32]}.json"


#: an entry as `save_calibration` writes it (`Calibration.to_dict`), checked when read: a file on the
#: user's disk, damaged it is a miss (measured again), never a TypeError in the middle of a plan
_ENTRY = {"format": int, "kind": str, "digest": str, "binary": list[Any], "graphs": dict[str, cal.GraphFit],
          "seconds": float, "runs": int, "notes": list[str], "split": dict[str, float]}
_FLOOR = tuple[float, float, float, float, float, float] | None  # GraphFit.floor's six terms


def load_calibration(path: Path) -> cal.Calibration | None:
    """The calibration stored at `path`, or None (missing or damaged: a miss)."""
    try:
        data = json.loads(path.read_text())
        check(data, _ENTRY, path.name)
        for name, g in data["graphs"].items():
            check(g.get("floor"), _FLOOR, f"{path.name}.graphs.{name}.floor")
    except (OSError, ValueError, RecursionError):  # ShapeError is a ValueError
        return None
    return cal.Calibration.from_dict(data)


def save_calibration(path: Path, res: cal.Calibration) -> None:
    """Store `res` at `path` (atomically, in a private folder); a failure only means it is measured again."""
    from tui.core.presets.write import PRIVATE, atomic_write_bytes  # the presets package costs ~0.1 s: a miss pays it

    try:
        private_dir(path.parent)
        atomic_write_bytes(path, json.dumps(res.to_dict()).encode(), mode=PRIVATE)
    except OSError:
        pass  # a calibration that cannot be cached is only measured again


def cached_calibration(meta: GGUFMeta, server_bin: str | Path, root: Path | None = None,
                       kind: str = KIND) -> cal.Calibration | None:
    """The cached calibration of this model by this server, or None (nothing is run)."""
    try:
        return load_calibration(calibration_path(Path(root) if root else default_root(), meta, Path(server_bin), kind))
    except (OSError, ValueError):  # the binary or the model file gone
        return None


def attach_cached(meta: GGUFMeta, server_bin: str | Path | None, root: Path | None = None) -> cal.Calibration | None:
    """Attach the cached calibration of this model by this server, if any (reads one small file, runs
    nothing); a model already calibrated keeps its own. Returns what the model now carries."""
    if server_bin is None or meta.calibration is not None:
        return meta.calibration
    found = cached_calibration(meta, server_bin, root)
    attach(meta, found)
    return found


def attach(meta: GGUFMeta, calibration: cal.Calibration | None) -> None:
    """Make every later plan of `meta` use `calibration` (None: back to the structural estimate)."""
    meta.calibration = calibration
