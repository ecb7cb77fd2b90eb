"""Every quant of a Hub repo planned side by side, from the headers alone: "which file should I download?"

One row per model file (a split set is one row) and per main KV type asked for: the file size, what
each device needs and has left, whether it fits, what `--fit on` would change, and the largest `-c`
the estimate fits (a binary search, `planning.largest_ctx`). With `exact`, each row's fit verdict
and figures come from llama.cpp's own dry run of the header copy. Rows are sorted so that the
best-quality variant that fits comes first: fitting rows before the rest, then larger files (more
bits per weight), then the wider KV type.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from tui.core.options.settings import Settings
from tui.core.planning.devices import DeviceSet
from tui.core.planning.gguf_meta import GGUFError
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.largest_ctx import plan_largest_ctx
from tui.core.planning.plan import plan
from tui.core.planning.result import Plan
from tui.core.remote.errors import RemoteError
from tui.core.remote.fetch import Fetched, fetch_files, repo_listing
from tui.core.remote.hub import Variant, split_repo_tag, variants
from tui.core.remote.ranged import Traffic
from tui.core.remote.source import ModelSource

#: KV types from widest to narrowest: the tie-break between rows of the same file
KV_ORDER = ("f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "iq4_nl", "q4_1", "q4_0")
#: headers read at once (each a few range requests)
PARALLEL_READS = 4


@dataclass
class VariantRow:
    variant: Variant
    kv: str | None  # main KV type (-ctk/-ctv) of this row; None: as the flags say
    plan: Plan | None = None  # the estimate
    exact: Any = None  # planning.exact.ExactResult when asked for
    max_ctx: int | None = None  # largest -c the estimate fits (None: not even 256)
    error: str = ""
    fetched: Fetched | None = None

    @property
    def shown(self) -> Plan | None:
        """The plan the row reports: llama.cpp's when exact mode measured it, else the estimate."""
        return self.exact.plan if self.exact is not None and self.exact.available else self.plan

    @property
    def source(self) -> str:
        return "exact" if self.exact is not None and self.exact.available else "estimate"

    @property
    def fits(self) -> bool:
        p = self.shown
        return p is not None and p.worst_risk != "oom"

    @property
    def fit_choice(self) -> str:
        """What `--fit on` changes (exact: llama.cpp's flags; estimate: the emulation's message), or ""."""
        if self.exact is not None and self.exact.available and self.exact.fit is not None and self.exact.fit.changed:
            return " ".join(self.exact.fit.flags())
        p = self.plan
        if p is not None and p.fit.active and p.fit.action not in ("none", "off"):
            return p.fit.message
        return ""

    def to_dict(self) -> dict[str, Any]:
        p = self.shown
        return {
            "tag": self.variant.tag, "file": self.variant.path, "files": [f.path for f in self.variant.files],
            "size": self.variant.size, "kv": self.kv, "source": self.source, "fits": self.fits,
            "fit_choice": self.fit_choice, "max_ctx": self.max_ctx, "error": self.error,
            "devices": [{"name": d.name, "key": d.key, "needed_mib": round(d.needed_mib, 2),
                         "free_mib": d.free_mib, "headroom_mib": None if d.headroom_mib is None else round(d.headroom_mib, 2),
                         "risk": d.risk} for d in (p.devices if p is not None else [])],
            "header_bytes": self.fetched.header_bytes if self.fetched else None,
        }


@dataclass
class VariantsTable:
    repo: str
    commit: str
    rows: list[VariantRow]
    traffic: Traffic = field(default_factory=Traffic)

    def to_dict(self) -> dict[str, Any]:
        return {"repo": self.repo, "commit": self.commit, "rows": [r.to_dict() for r in self.rows],
                "requests": self.traffic.requests, "bytes_fetched": self.traffic.bytes}


def sort_rows(rows: list[VariantRow]) -> list[VariantRow]:
    """Fitting rows first, then the larger file, then the wider KV type; failed rows last."""
    def kv_rank(kv: str | None) -> int:
        return KV_ORDER.index(kv) if kv in KV_ORDER else len(KV_ORDER)

    return sorted(rows, key=lambda r: (bool(r.error), not r.fits, -r.variant.size, kv_rank(r.kv)))


SettingsFor = Callable[[str, str | None], Settings]


def plan_variants(repo_spec: str, settings_for: SettingsFor, devices: DeviceSet, kvs: list[str | None], *,
                  token: str | None = None, refresh: bool = False, exact: Callable[[Settings, Any], Any] | None = None,
                  progress: Callable[[str], None] | None = None) -> VariantsTable:
    """Plan every model variant of `repo_spec` (a `:QUANT` tag keeps only that quant's files).

    `settings_for(local_path, kv)` is the caller's flags for one header copy and KV type, validated
    by the one validator (so a bad flag is refused once, before any fetch, by the caller's first call);
    `exact(settings, meta)` returns an ExactResult for a row when given. RemoteError when the repo
    cannot be listed; a variant whose header cannot be read is a row with its error."""
    repo, tag = split_repo_tag(repo_spec)
    if progress:
        progress(f"listing {repo}")
    commit, files, _ = repo_listing(repo, token, refresh=refresh)
    found = variants(files)
    if tag:
        found = [v for v in found if v.tag.upper() == tag.upper() or tag.upper() in v.path.upper()]
    if not found:
        raise RemoteError(f"{repo} has no GGUF model file{' matching ' + repr(tag) if tag else ''}.")
    table = VariantsTable(repo, commit, [])

    def read(v: Variant) -> tuple[Variant, Fetched | None, str]:
        try:
            return v, fetch_files(repo, commit, list(v.files), ModelSource("hf", repo, v.path, token),
                                  progress=progress), ""
        except RemoteError as exc:
            return v, None, str(exc)

    with ThreadPoolExecutor(max_workers=PARALLEL_READS) as pool:
        fetched = list(pool.map(read, found))
    for v, got, err in fetched:
        if got is not None:
            table.traffic.requests += got.traffic.requests
            table.traffic.bytes += got.traffic.bytes
        for kv in kvs:
            row = VariantRow(v, kv, fetched=got, error=err)
            table.rows.append(row)
            if got is None:
                continue
            try:
                meta = read_gguf(got.path)
                s = settings_for(str(got.path), kv)
                row.plan = plan(meta, s, list(devices.devices), devices.host_total_mib, devices.host_free_mib)
                row.max_ctx, _ = plan_largest_ctx(meta, replace(s, fit=False),  # placement as given
                                                  list(devices.devices), host_total_mib=devices.host_total_mib,
                                                  host_free_mib=devices.host_free_mib)
                if exact is not None:
                    if progress:
                        progress(f"exact mode: {v.path}" + (f", KV {kv}" if kv else ""))
                    row.exact = exact(s, meta)
            except (GGUFError, ValueError) as exc:
                row.error = str(exc)
    table.rows = sort_rows(table.rows)
    return table
