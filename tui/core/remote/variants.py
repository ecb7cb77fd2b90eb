"""Every quant of a Hub repo planned side by side, from the headers alone: "which file should I download?"

One row per model file (a split set is one row) and per main KV type asked for: the file size, what
each device needs and has left, how it fits (`VariantRow.tier`), what `--fit on` would change, and
the largest `-c` that loads with every layer where the flags put it (`planning.largest_ctx`, up to
the model's training context; independent of the `-c` the row is planned at). With `exact`, each
row's verdict, figures and fit choice come from llama.cpp's own dry run of the header copy (the
largest `-c` stays the estimate's).

The tier: "yes" loads as the flags put it (fit changes nothing; `tight` when inside the
--fit-target margin), "with fit" loads only because `--fit on` moves something (the fit-would
flags: experts or layers to the host, a smaller -c), "no" runs out of memory even so. Rows are
sorted so that the best-quality variant that fits as given comes first: by tier, then larger files
(more bits per weight), then the wider KV type; rows that could not be planned last.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from tui.core.options.settings import Settings
from tui.core.planning.devices import HOST, DeviceSet
from tui.core.planning.gguf_meta import GGUFError, GGUFMeta
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.largest_ctx import ctx_limit, plan_largest_ctx
from tui.core.planning.plan import plan
from tui.core.planning.resolve import KV_BPE, resolve
from tui.core.planning.result import DevicePlan, FitOutcome, Plan
from tui.core.remote.errors import RemoteError
from tui.core.remote.fetch import Fetched, fetch_files, repo_listing
from tui.core.remote.hub import Sidecar, Variant, sidecar_options, sidecars, split_repo_tag, variants
from tui.core.remote.ranged import Traffic
from tui.core.remote.source import ModelSource

#: headers read at once (each a few range requests)
PARALLEL_READS = 4
#: what `max_ctx` means, by whether --fit is on (the JSON's `max_ctx_rule`)
RULE_MARGIN = "every layer where the flags put it, the --fit-target margin kept (fit moves nothing)"
RULE_NO_OOM = "every layer where the flags put it (--fit off), no device out of memory"
#: the tiers best first (`VariantRow.tier`; "error": the row could not be planned)
TIERS = ("yes", "with fit", "no", "error")


def kv_width(kv: str | None) -> float:
    """Bytes per element of a KV type: the tie-break between rows of the same file (wider first)."""
    return KV_BPE.get(kv or "", 0.0)


@dataclass
class VariantRow:
    variant: Variant
    kv: str | None  # main KV type (-ctk/-ctv) of this row; None: as the flags say
    plan: Plan | None = None  # the estimate, at the row's -c with fit as the flags say
    exact: Any = None  # planning.exact.ExactResult when asked for
    max_ctx: int | None = None  # largest -c the estimate loads without fit moving anything (None: not even 256)
    max_ctx_limit: int | None = None  # the search's upper bound: the training context
    max_ctx_rule: str = ""
    error: str = ""
    fetched: Fetched | None = None
    #: what llama-server's -hf also downloads with this file and these flags (not in the plan)
    sidecars: tuple[Sidecar, ...] = ()

    @property
    def measured(self) -> bool:
        return self.exact is not None and self.exact.available

    @property
    def shown(self) -> Plan | None:
        """The plan the row reports: llama.cpp's when exact mode measured it, else the estimate."""
        return self.exact.plan if self.measured else self.plan

    @property
    def source(self) -> str:
        return "exact" if self.measured else "estimate"

    @property
    def fits(self) -> bool:
        """It loads at all: as the flags put it, or with what --fit moves (tier "yes" or "with fit")."""
        p = self.shown
        return not self.error and p is not None and p.worst_risk != "oom"

    @property
    def tier(self) -> str:
        """"yes": loads as the flags put it (fit changes nothing); "with fit": loads only because
        --fit moves something (`fit_flags`); "no": a device runs out even so; "error": not planned."""
        if self.error or self.shown is None:
            return "error"
        if not self.fits:
            return "no"
        return "with fit" if self.fit_flags else "yes"

    @property
    def tight(self) -> bool:
        """Tier "yes", but a device is left less than its --fit-target margin."""
        return self.tier == "yes" and self.shown is not None and self.shown.worst_risk == "tight"

    @property
    def mapped_mib(self) -> float:
        """MiB of the shown plan's host need that is mapped file holding other devices' weights
        (module-level `mapped_mib`); 0 for a row not planned."""
        p = self.shown
        return mapped_mib(p) if p is not None and not self.error else 0.0

    @property
    def ctx(self) -> int | None:
        """The context the row is planned at: the flags' -c, or what fit reduced it to."""
        if self.measured and self.exact.fit is not None and self.exact.fit.n_ctx:
            return int(self.exact.fit.n_ctx)
        return self.plan.resolved.n_ctx if self.plan is not None else None

    @property
    def kv_types(self) -> str:
        """The main KV type as planned (`q8_0`, or `K/V` when they differ)."""
        if self.plan is None:
            return self.kv or "-"
        k, v = self.plan.resolved.type_k, self.plan.resolved.type_v
        return k if k == v else f"{k}/{v}"

    @property
    def fit_flags(self) -> list[str]:
        """What `--fit on` changes, as the flags that pin it ([] when it changes nothing or is off)."""
        if self.measured:
            f = self.exact.fit
            return list(f.flags()) if f is not None and f.changed else []
        return estimate_fit_flags(self.plan) if self.plan is not None else []

    @property
    def fit_gives_up(self) -> bool:
        fit = self.exact.fit if self.measured else (self.plan.fit if self.plan is not None else None)
        return fit is not None and fit.action == "give-up"

    @property
    def fit_choice(self) -> str:
        return " ".join(self.fit_flags)

    def to_dict(self) -> dict[str, Any]:
        p = self.shown
        fit: Any = self.exact.fit if self.measured else (self.plan.fit if self.plan is not None else None)
        mapped = round(self.mapped_mib, 2)
        return {
            "tag": self.variant.tag, "file": self.variant.path, "files": [f.path for f in self.variant.files],
            "size": self.variant.size, "kv": self.kv, "kv_types": self.kv_types, "ctx": self.ctx,
            "source": self.source, "tier": self.tier, "tight": self.tight, "fits": self.fits,
            "fit_action": fit.action if fit is not None else None,
            "fit_choice": self.fit_flags, "fit_message": fit.message if fit is not None else "",
            "max_ctx": self.max_ctx, "max_ctx_limit": self.max_ctx_limit, "max_ctx_rule": self.max_ctx_rule,
            "exact_reason": self.exact.reason if self.exact is not None and not self.measured else "",
            "error": self.error,
            "sidecars": [{"role": c.role, "path": c.path, "size": c.size, "is_draft": c.is_draft, "in_plan": False}
                         for c in self.sidecars],
            "devices": [{"name": d.name, "key": d.key, "needed_mib": round(d.needed_mib, 2),
                         "free_mib": d.free_mib, "headroom_mib": None if d.headroom_mib is None else round(d.headroom_mib, 2),
                         "risk": d.risk, **({"mapped_mib": mapped} if d.key == HOST else {})}
                        for d in (p.devices if p is not None else [])],
            "header_bytes": self.fetched.header_bytes if self.fetched else None,
        }


def estimate_fit_flags(p: Plan) -> list[str]:
    """The estimate's expected fit result as flags: -c when it shrinks the context, -ncmoe/-ngl when
    it moves layers; [] when fit is off, changes nothing or gives up."""
    fit: FitOutcome = p.fit
    if not fit.active or fit.action not in ("reduce-ctx", "move-layers"):
        return []
    out: list[str] = []
    asked = resolve(p.settings, p.model.hparams).n_ctx
    if fit.n_ctx and fit.n_ctx != asked:
        out += ["-c", str(fit.n_ctx)]
    if fit.n_cpu_moe:
        out += ["-ncmoe", str(fit.n_cpu_moe)]
    if fit.n_gpu_layers is not None:
        out += ["-ngl", str(fit.n_gpu_layers)]
    return out


def mapped_mib(p: Plan) -> float:
    """Of the host's weights, the MiB that are the model file mapped between the host's own tensors.

    With mmap, llama.cpp maps the host tensors' whole file range as one CPU_Mapped buffer
    (llama-model.cpp `get_mapping_range`: first offset to last end, per file), and the plan counts
    that range as the host's weights. When the host tensors lie at both ends of the file (fit's
    overflow of the last layers plus `token_embd`), the range holds the other devices' weights too:
    pages mapped (read once by the load's prefetch) that nothing reads after the load, page cache
    the kernel can drop. This is that part: the mapped range minus the host tensors' own bytes; 0
    without mmap, and with `-lm mmap+mlock`, which locks the mapping up to the last host tensor's end
    (llama-model-loader.cpp `lmlock->grow_to`), so that RAM is held for real."""
    from tui.core.planning.weights import add_weights

    host = p.device(HOST)
    if host is None or not p.layer_device or not p.resolved.use_mmap or p.settings.load_mode == "mmap+mlock":
        return 0.0
    own = {d.key: DevicePlan(d.key, d.name, d.total_mib, d.free_mib, d.margin_mib, remote=d.remote) for d in p.devices}
    add_weights(p.model, replace(p.resolved, use_mmap=False), own, p.layer_device)  # every tensor's own bytes
    return max(0.0, host.components["weights"] - own[HOST].components["weights"])


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
    """By tier (yes, with fit, no; rows not planned last), then the larger file, then the wider KV
    type. A tight row stays with "yes": it loads as given, and the file's quality comes first."""
    def width(r: VariantRow) -> float:
        return kv_width(r.kv if r.kv else (r.plan.resolved.type_k if r.plan is not None else None))

    return sorted(rows, key=lambda r: (TIERS.index(r.tier), -r.variant.size, -width(r)))


def matches_tag(v: Variant, tag: str) -> bool:
    """`REPO:TAG` keeps the files llama-server's `-hf REPO:TAG` could pick: the tag followed by `.`
    or `-` in the path (so `:Q4_K` is not `Q4_K_M`), case-insensitive, or the name's own tag."""
    return v.tag.upper() == tag.upper() or re.search(re.escape(tag) + "[.-]", v.path, re.I) is not None


SettingsFor = Callable[[str, str | None], Settings]
ExactFn = Callable[[Settings, GGUFMeta], Any]


def plan_variants(repo_spec: str, settings_for: SettingsFor, devices: DeviceSet, kvs: list[str | None], *,
                  token: str | None = None, refresh: bool = False, exact: ExactFn | None = None,
                  progress: Callable[[str], None] | None = None) -> VariantsTable:
    """Plan every model variant of `repo_spec` (a `:QUANT` tag keeps only that quant's files).

    `settings_for(local_path, kv)` is the caller's flags for one header copy and KV type, validated
    by the one validator (the caller checks every KV type before calling, so a bad flag is refused
    before any request); `exact(settings, meta)` returns an ExactResult for a row when given.
    RemoteError when the repo cannot be listed or has no matching model; a variant whose header
    cannot be read or planned is a row with its error."""
    repo, tag = split_repo_tag(repo_spec)
    if progress:
        progress(f"listing {repo}")
    commit, files, _ = repo_listing(repo, token, refresh=refresh)
    found = variants(files)
    if tag:
        found = [v for v in found if matches_tag(v, tag)]
    if not found:
        raise RemoteError(f"{repo} has no GGUF model file{' matching ' + repr(tag) if tag else ''}.")
    table = VariantsTable(repo, commit, [])

    def read(v: Variant) -> tuple[Variant, Fetched | None, str]:
        try:
            return v, fetch_files(repo, commit, list(v.files), ModelSource("hf", repo, v.path, token),
                                  progress=progress), ""
        except (RemoteError, OSError) as exc:
            return v, None, str(exc)

    with ThreadPoolExecutor(max_workers=PARALLEL_READS) as pool:
        fetched = list(pool.map(read, found))
    for v, got, err in fetched:
        if got is not None:
            table.traffic.requests += got.traffic.requests
            table.traffic.bytes += got.traffic.bytes
        meta: GGUFMeta | None = None
        if got is not None:
            try:
                meta = read_gguf(got.path)
            except GGUFError as exc:
                err = str(exc)
        for kv in dict.fromkeys(kvs):  # a KV type named twice is one row
            row = VariantRow(v, kv, fetched=got, error=err)
            table.rows.append(row)
            if meta is not None and got is not None:
                s = settings_for(str(got.path), kv)
                row.sidecars = tuple(sidecars(files, v.path, "", sidecar_options(s)))  # the projector ignores the tag
                _plan_row(row, meta, s, devices, exact, progress)
    table.rows = sort_rows(table.rows)
    return table


def _plan_row(row: VariantRow, meta: GGUFMeta, s: Settings, devices: DeviceSet, exact: ExactFn | None,
              progress: Callable[[str], None] | None) -> None:
    """The row's estimate at its -c, its largest -c (fit moving nothing), and exact mode when asked."""
    devs, ht, hf = list(devices.devices), devices.host_total_mib, devices.host_free_mib
    try:
        row.plan = plan(meta, s, devs, ht, hf)
        keep = row.plan.fit.active  # fit on: the largest -c at which it changes nothing
        search = s if keep else replace(s, fit=False)
        row.max_ctx_limit = ctx_limit(meta, search)
        row.max_ctx, _ = plan_largest_ctx(meta, search, devs, host_total_mib=ht, host_free_mib=hf, keep_margin=keep)
        row.max_ctx_rule = RULE_MARGIN if keep else RULE_NO_OOM
    except ValueError as exc:  # PlanError: settings this model cannot take (the message names the flag)
        row.error = str(exc)
        return
    if exact is not None:
        if progress:
            progress(f"exact mode: {row.variant.path}" + (f", KV {row.kv}" if row.kv else ""))
        row.exact = exact(s, meta)
