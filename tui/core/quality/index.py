"""What is already measured on a model file, found without running anything: the quality index.

Why an index beside the results: a result is keyed by everything that produced it (`cache.key`: the
reference, binary, text, context and flags), so "which K/V settings are measured on this model?" cannot
be asked of the results by name. The index is one small JSON file under the quality cache dir, one
entry per result, newest first and bounded (`MAX_ENTRIES`), written atomically under a lock when
`measure` stores a result. Each result file carries its entry too, so a missing or damaged index is
ignored and rebuilt from them: a lookup never fails, it finds less at worst.

The screens read it (the cockpit's quality line, the runs, the verdict, `mtp-tune variants` and the
TUI's variants picker: `measured_rows`, `quality_cell`, `quality_json`), by the model's header digest
(`models.model_id`, `planning.sparse.header_hash`): a moved file is the same model.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tui.core.quality import cache
from tui.core.quality.parse import KldFigures
from tui.core.quality.request import KvPair, parse_kv_list

if TYPE_CHECKING:
    from tui.core.remote.variants import VariantRow

FILE = "index.json"
FORMAT = 1
#: entries kept, newest first (one is about 1 kB)
MAX_ENTRIES = 500
#: an index larger than this is not read (a damaged or foreign file): it is rebuilt
MAX_BYTES = 4 * 2**20
#: how long a write waits for another mtp-tune's (a lookup never waits)
LOCK_WAIT_S = 10.0


@dataclass(frozen=True)
class Measured:
    """One K/V setting measured on one model file: its figures, and what they were measured on (the
    context, the text, the reference file and the flags that change logits)."""

    model_digest: str
    model: str  # the path it was measured at (the digest is what identifies it)
    kv: KvPair
    figures: KldFigures
    text: str  # the text's label ("the probe workload (full…)", "--text FILE")
    text_digest: str
    ref_digest: str
    reference: str  # the reference file's path (the model itself unless --ref)
    flags: tuple[str, ...]
    measured_at: float
    seconds: float
    key: str  # the result's cache key: one entry per result

    @property
    def ctx(self) -> int:
        return self.figures.ctx

    @property
    def chunks(self) -> int:
        return self.figures.chunks

    @property
    def self_reference(self) -> bool:
        """Measured against the same file with f16 K/V: the figure is the K/V types' own cost."""
        return self.ref_digest == self.model_digest

    def to_json(self) -> dict[str, Any]:
        return {"model_digest": self.model_digest, "model": self.model, "k": self.kv.k, "v": self.kv.v,
                "figures": self.figures.to_json(), "text": self.text, "text_digest": self.text_digest,
                "ref_digest": self.ref_digest, "reference": self.reference, "flags": list(self.flags),
                "measured_at": self.measured_at, "seconds": self.seconds, "key": self.key}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Measured:
        """KeyError, TypeError or ValueError for an entry that is not one (the caller skips it)."""
        return cls(str(d["model_digest"]), str(d["model"]), KvPair(str(d["k"]), str(d["v"])),
                   KldFigures.from_json(d["figures"]), str(d["text"]), str(d["text_digest"]), str(d["ref_digest"]),
                   str(d["reference"]), tuple(str(f) for f in d["flags"]), float(d["measured_at"]),
                   float(d["seconds"]), str(d["key"]))


def path() -> Path:
    return cache.root() / FILE


def lookup(model_digest: str) -> list[Measured]:
    """Every setting measured on the model with this header digest, newest first ([] when none)."""
    return [m for m in _entries() if m.model_digest == model_digest]


def newest_for(entries: Iterable[Measured], kv: KvPair) -> Measured | None:
    """The newest measurement of `kv` among `entries` (newest first), one against the model itself
    preferred (its K/V types' own cost) over one against another file (`--ref`: the quant's too)."""
    found = [m for m in entries if m.kv == kv]
    return next((m for m in found if m.self_reference), found[0] if found else None)


def settings_measured(entries: Sequence[Measured]) -> list[KvPair]:
    """The K/V settings among `entries`, each once, newest first."""
    return list(dict.fromkeys(m.kv for m in entries))


def kld_text(value: float) -> str:
    """A mean KLD in nats, four decimals (0.0081), smaller ones in two significant digits (3.2e-05)."""
    return f"{value + 0.0:.4f}" if value >= 1e-4 or value <= 0 else f"{value:.2g}"


def figures_text(m: Measured) -> str:
    """`KLD 0.0081, same top 94.8 %`: the mean KL divergence and how often the top token is the same."""
    return f"KLD {kld_text(m.figures.kld_mean.value)}, same top {m.figures.same_top_pct.value:.1f} %"


def where_text(m: Measured) -> str:
    """`measured, -c 2048` (and `vs FILE` when the reference was another file than the model)."""
    vs = "" if m.self_reference else f" vs {Path(m.reference).name}"
    return f"measured{vs}, -c {m.ctx}"


def cost_text(entries: Sequence[Measured], kv: KvPair) -> str | None:
    """What `kv` costs on the model of `entries`: "reference" for f16/f16 (0 by definition), the
    measured figures (`KLD 0.0081, same top 94.8 % (measured, -c 2048)`), or None: not measured."""
    if kv.is_reference:
        return "reference"
    m = newest_for(entries, kv)
    return f"{figures_text(m)} ({where_text(m)})" if m is not None else None


def kv_quality(entries: Sequence[Measured] | None, kv: KvPair) -> str:
    """One line for a screen that shows a run's K/V: `q8_0/q8_0: KLD 0.0081, same top 94.8 % (measured,
    -c 2048)`, `f16/f16: reference`, or `q8_0/q8_0: not measured` (`entries` None: nothing could be looked up)."""
    said = cost_text(entries or (), kv)
    return f"{kv.k}/{kv.v}: {said or 'not measured'}"


def measured_on(model: str | Path | None) -> list[Measured] | None:
    """What is measured on the model file at `model` (its header read, nothing run), or None when there
    is no file there to read (a Hub model, a moved file, no model recorded)."""
    # lazy: the GGUF reader loads on the caller's worker, not with the screens that import this module
    from tui.core.quality.models import ModelError, model_id

    if not model:
        return None
    try:
        return lookup(model_id(model).digest)
    except ModelError:
        return None


#: what a variants row's K/V types cost on its file: measured, "reference" (f16/f16), or None (not measured)
RowQuality = Measured | Literal["reference"] | None


def measured_rows(rows: Iterable[VariantRow]) -> list[RowQuality]:
    """Per variants row (`remote.variants.VariantRow`), what the index knows of its K/V types on its
    file, found by the header digest of the file read for the row (nothing is run): the newest
    measurement (`newest_for`), "reference" for f16/f16 (0 by definition), or None: not measured, or
    no header to look it up by. Reads files (the index, each header once): a CLI command or a worker."""
    found: dict[str, list[Measured]] = {}
    out: list[RowQuality] = []
    for r in rows:
        kv = parse_kv_list(r.kv_types)[0] if r.kv_types != "-" else None
        if kv is not None and kv.is_reference:
            out.append("reference")
            continue
        where = str(r.fetched.path) if r.fetched is not None else ""
        if kv is None or not where:
            out.append(None)
            continue
        if where not in found:
            found[where] = measured_on(where) or []
        out.append(newest_for(found[where], kv))
    return out


def quality_cell(m: RowQuality, brief: bool = False) -> str:
    """A KV KLD cell: `0.0081 · 94.8 %` (mean KLD, same top token), `vs FILE` when measured against
    another file; `reference` for f16/f16; blank when not measured (never guessed). `brief`: the mean
    KLD alone, for the TUI's picker, whose columns must fit 120 cells."""
    if m is None or m == "reference":
        return m or ""
    if brief:
        return kld_text(m.figures.kld_mean.value)
    vs = "" if m.self_reference else f" vs {Path(m.reference).name}"
    return f"{kld_text(m.figures.kld_mean.value)} · {m.figures.same_top_pct.value:.1f} %{vs}"


def quality_json(m: RowQuality) -> Any:
    """A row's `quality` in JSON: null, "reference", or the figures and what they were measured on."""
    if m is None or m == "reference":
        return m
    f = m.figures
    return {"kld_mean": f.kld_mean.value, "kld_uncertainty": f.kld_mean.uncertainty, "kld_p99": f.kld_p99,
            "same_top_pct": f.same_top_pct.value, "ctx": m.ctx, "chunks": m.chunks, "text": m.text,
            "reference": m.reference, "measured_at": m.measured_at}


def record(entry: Measured) -> None:
    """Put `entry` first (replacing the entry of the same result), the oldest beyond MAX_ENTRIES dropped.
    Never raises: the result file already holds the entry, and an index that could not be written is
    removed so that the next lookup rebuilds it from the results."""
    try:
        with cache.locked("index", wait_s=LOCK_WAIT_S):
            kept = [m for m in _entries(locked=True) if m.key != entry.key]
            _write([entry, *kept][:MAX_ENTRIES])
    except (OSError, TimeoutError):
        path().unlink(missing_ok=True)


def _entries(locked: bool = False) -> list[Measured]:
    """The index's entries; a missing, damaged or foreign index is rebuilt from the results (and
    written back when the lock is free, so the next lookup reads one file)."""
    got = _read(path())
    if got is not None:
        return got
    if not (cache.root() / "results").is_dir():
        return []  # nothing measured yet: nothing to write either
    rebuilt = rebuild()
    try:
        if locked:
            _write(rebuilt)
        else:
            with cache.locked("index", wait_s=0):
                _write(rebuilt)
    except (OSError, TimeoutError):
        pass  # another mtp-tune writes it now, or the disk refuses: this lookup has its answer anyway
    return rebuilt


def _read(p: Path) -> list[Measured] | None:
    """The entries of the index file, or None when it is missing or is not one (damaged, foreign, too large)."""
    try:
        if p.stat().st_size > MAX_BYTES:
            return None
        data = json.loads(p.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        return None
    out = []
    for d in data["entries"]:
        try:
            out.append(Measured.from_json(d))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None  # one bad entry: the file is not what this code wrote, rebuild it
    return out


def rebuild() -> list[Measured]:
    """The entries the result files carry (a result written before the index has none), newest first."""
    out = []
    for f in (cache.root() / "results").glob("*.json"):
        try:
            data = json.loads(f.read_bytes())
            out.append(Measured.from_json(data["entry"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
            continue
    out.sort(key=lambda m: m.measured_at, reverse=True)
    return out[:MAX_ENTRIES]


def _write(entries: Sequence[Measured]) -> None:
    # lazy: the presets package costs ~0.1 s, paid by a write, not by a lookup on the way to a first frame
    from tui.core.presets.write import PRIVATE, atomic_write_bytes

    body = {"format": FORMAT, "written_at": time.time(), "entries": [m.to_json() for m in entries]}
    atomic_write_bytes(path(), json.dumps(body, default=str).encode(), mode=PRIVATE)
