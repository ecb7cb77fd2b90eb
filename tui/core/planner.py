"""Memory planner: per-device memory and OOM risk for a llama-server configuration, before launch.

Mirrors llama.cpp b11434's own accounting (llama-server.md §5, multi-device.md):
- weights: every tensor's bytes, placed as `load_tensors` places them (`-ngl`, `-sm`, `-ts`, `-mg`,
  output layer on `dev(n_layer_all)`, `token_embd` on the host, `-cmoe`/`-ncmoe`/`-ot ...=CPU`, MTP
  tensors only with draft-mtp); host weights as the mmap range llama.cpp maps (or the padded sum).
- KV: attention layers only (hybrid models), per-layer KV heads, n_ctx padded to 256, unified or per slot;
  the MTP draft KV on the NextN layers with `-ctkd/-ctvd` (default f16, not `-ctk`).
- recurrent state: rows = max(1, np) x (1 + n_rs_seq), n_rs_seq = spec-draft-n-max with MTP.
- output buffers: logits for n_seq_max rows at context creation (host memory).
- compute buffers, target and draft: the KQ mask (n_kv x n_ubatch x 2 B with FA) exactly, times the
  scheduler copies (4 with pipeline parallelism); activations, logits and inputs from coefficients
  calibrated against the real server (CPU build; see bench/bench_planner_accuracy.py).
- margin (`--fit-target`, 1024 MiB) and a risk verdict per device; the expected `--fit` outcome.
Pure and fast: a re-plan after one knob change takes well under a millisecond for a 41-layer model.
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from tui.core.gguf_meta import GGUFMeta, HParams, TensorInfo
from tui.core.settings import Settings

MiB = 1024 * 1024
COMPONENT_KEYS: tuple[str, ...] = ("weights", "kv", "draft_kv", "recurrent", "compute", "draft_compute", "output")
DEFAULT_FIT_TARGET_MIB = 1024
DEFAULT_FIT_CTX = 4096
HOST = "Host"
#: bytes per element of the KV cache types (ggml_row_size / n)
KV_BPE: dict[str, float] = {
    "f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
    "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32,
}
_KV_BLOCK = {"f32": 1, "f16": 1, "bf16": 1}
_EXPS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")
_DRAFT_TYPES = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
_RS_TYPES = ("draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark")


class PlanError(ValueError):
    """Impossible settings for this model; the message names the flag and what to do."""


@dataclass(frozen=True)
class DeviceSpec:
    """A device llama.cpp can offload to: a local GPU, a simulated one, or a remote RPC host."""

    key: str  # llama.cpp's name: CUDA0, RPC0[host:port], ...
    name: str  # description for people
    total_mib: float
    free_mib: float
    remote: bool = False


# ---- calibration --------------------------------------------------------------------------------
# Compute buffers are what ggml's graph allocator reserves at its peak, so they are modelled as
#   target: mask x copies + max(T x 4 B x P_t, floor)        (the KQ mask is live through the trunk)
#   draft:  max(T x 4 B x P_dA, T x 4 B x P_dB + mask x copies) (the one MTP attention frees the mask)
# with per-token widths P measured on the real server (CPU backend, bench/bench_planner_accuracy.py)
# for reference shapes, and scaled to other shapes by a linear proxy fitted on shape variants.
# CUDA adds pool scratch and host staging that llama.cpp itself lists as "unaccounted".

#: (family, features, P_t, P_dA, P_dB) in floats per ubatch token; features as in _features().
REFERENCES: tuple[tuple[str, dict[str, float], float, float, float], ...] = (
    # Qwen3.6-35B-A3B (shape-only file, vocab 248320): 80.02 / 65.02 MiB at -ub 512 -c 4096
    ("moe", {"embd": 2048, "q": 4096, "uembd": 16384, "uff": 4096, "ff": 512}, 38922.0, 33290.0, 26634.0),
    # an 8-layer qwen35moe at 1/4 width (n_embd 512, 16 experts, 4 used)
    ("moe", {"embd": 512, "q": 512, "uembd": 2048, "uff": 512, "ff": 128}, 6154.0, 5130.0, 3082.0),
    ("moe", {"embd": 1024, "q": 512, "uembd": 4096, "uff": 512, "ff": 128}, 10250.0, 8202.0, 6154.0),
    ("moe", {"embd": 512, "q": 1024, "uembd": 2048, "uff": 512, "ff": 128}, 6666.0, 7178.0, 5130.0),
    ("moe", {"embd": 512, "q": 512, "uembd": 4096, "uff": 1024, "ff": 128}, 9738.0, 8714.0, 6666.0),
    ("moe", {"embd": 512, "q": 512, "uembd": 2048, "uff": 2048, "ff": 128}, 8714.0, 8714.0, 6666.0),
    # tinymodel presets (qwen35, qwen35moe with a shared expert wider than the routed ones)
    ("dense", {"embd": 128, "q": 128, "uembd": 0, "uff": 0, "ff": 256}, 1420.8, 1930.0, 778.0),
    ("dense", {"embd": 256, "q": 128, "uembd": 0, "uff": 0, "ff": 256}, 1548.8, 1930.0, 1034.0),
    ("dense", {"embd": 128, "q": 128, "uembd": 0, "uff": 0, "ff": 1024}, 3724.8, 4234.0, 778.0),
    ("dense", {"embd": 128, "q": 256, "uembd": 0, "uff": 0, "ff": 256}, 1676.8, 1930.0, 1290.0),
    ("dense", {"embd": 512, "q": 512, "uembd": 0, "uff": 0, "ff": 1536}, 7180.0, 5642.0, 2826.0),
)
#: hybrid target floor in recurrent-state sizes (n_embd_s x 4 B) by n_seq_max, measured on the real
#: shape (18.1 MiB at -ub 64 with 1 slot, 56.2 MiB at -ub 256 with 2, 109.4 MiB at -ub 512 with 4)
FLOOR_STATE: tuple[tuple[int, float], ...] = ((1, 8.8), (2, 26.1), (4, 52.7))
#: with the experts in host memory (-cmoe, -ncmoe, -ot exps=CPU) the MoE activations move to the host
#: (shape-only Qwen3.6-35B-A3B over two RPC devices with -cmoe)
EXPERTS_ON_HOST = {"host_t": 0.9, "dev_t": 0.9, "dev_d_attn": 0.8}
#: extra inputs per split, in units of T x n_embd x 4 B, with 4 scheduler copies (scaled by copies / 4)
SPLIT_UNITS = {"first": 10.0, "other": 1.5, "output_only": 5.0, "host": 10.0, "draft_dev": 10.0, "draft_host": 5.0}


# ---- settings resolution -----------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """Settings resolved to the numbers llama.cpp uses (its defaults applied)."""

    n_ctx: int  # total cells requested (after padding)
    n_ctx_seq: int  # cells per stream
    n_stream: int
    n_seq_max: int
    kv_unified: bool
    n_batch: int
    n_ubatch: int
    n_tokens: int  # worst-case ubatch: min(n_ctx, n_ubatch)
    flash_attn: bool
    type_k: str
    type_v: str
    type_k_draft: str
    type_v_draft: str
    mtp: bool
    n_rs_seq: int
    n_outputs_max: int
    n_gpu_layers: int  # resolved: n_layer_all + 1 for auto/all
    ngl_auto: bool
    ctx_auto: bool
    split_mode: str
    main_gpu: int
    tensor_split: tuple[float, ...]
    cpu_moe: bool
    n_cpu_moe: int
    cpu_overrides: tuple[str, ...]  # -ot regexes that go to a CPU buffer
    has_overrides: bool
    use_mmap: bool
    fit: bool
    fit_target_mib: tuple[int, ...]
    fit_ctx: int
    offload_kqv: bool


def _extra_flag(extra: list[str], *names: str) -> str | None:
    """The value of a flag in extra_args (`--x v` or `--x=v`), '' for a bare flag, None if absent."""
    for i, a in enumerate(extra):
        for n in names:
            if a == n:
                nxt = extra[i + 1] if i + 1 < len(extra) else ""
                return "" if nxt.startswith("-") and not nxt[1:2].isdigit() else nxt
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def _spec_n_max(s: Settings, n_max: int) -> int:
    """common_speculative_n_max: the largest draft over the enabled types."""
    types: list[str] = []
    for t in s.spec_type:
        types = [] if t == "none" else types + [t]
    best = 0
    for t in types:
        if t in _DRAFT_TYPES:
            best = max(best, n_max)
        elif t == "ngram-mod":
            v = _extra_flag(s.extra_args, "--spec-ngram-mod-n-max")
            best = max(best, int(v) if v and v.isdigit() else 64)
        elif t in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
            best = max(best, 48)
        elif t == "ngram-cache":
            best = max(best, 8)
    return best


def resolve(s: Settings, hp: HParams, ctx_override: int | None = None) -> Resolved:
    """Apply llama-server's defaults (b11434) to the settings."""
    extra = list(s.extra_args)
    types: list[str] = []
    for t in s.spec_type:
        types = [] if t == "none" else types + [t]
    mtp = "draft-mtp" in types
    n_max = s.spec_draft_n_max if s.spec_draft_n_max is not None else 3
    if n_max < 0:
        raise PlanError(f"--spec-draft-n-max {n_max}: must be 0 or more.")
    np_ = s.parallel if s.parallel is not None else -1
    if np_ == -1:
        n_seq, unified = 4, True
    elif np_ <= 0:
        raise PlanError(f"-np {np_}: the number of slots must be 1 or more (or -1 for auto).")
    else:
        n_seq = np_
        unified = _extra_flag(extra, "-kvu", "--kv-unified") is not None
    ctx_auto = not s.ctx_size
    n_ctx = ctx_override if ctx_override is not None else (s.ctx_size or 0)
    if n_ctx < 0:
        raise PlanError(f"-c {n_ctx}: the context size must be 0 (model default) or positive.")
    if n_ctx == 0:
        n_ctx = hp.n_ctx_train or 4096
        if ctx_auto and (s.fit is not False) and not unified:
            n_ctx *= n_seq  # fit: n_ctx_train per stream when the KV is not unified
    n_ctx = _pad(n_ctx, 256)
    if unified:
        n_ctx_seq, n_stream = n_ctx, 1
    else:
        n_ctx_seq = _pad(n_ctx // n_seq, 256)
        n_ctx, n_stream = n_ctx_seq * n_seq, n_seq
    n_batch = min(n_ctx, s.batch_size or 2048)
    n_ubatch = min(n_batch, s.ubatch_size or 512)
    if n_batch <= 0 or n_ubatch <= 0:
        raise PlanError("-b/-ub must be positive.")
    fa = s.flash_attn != "off"
    for flag, t in (("-ctk", s.cache_type_k), ("-ctv", s.cache_type_v), ("-ctkd", s.cache_type_k_draft), ("-ctvd", s.cache_type_v_draft)):
        if t is not None and t not in KV_BPE:
            raise PlanError(f"{flag} {t}: unsupported cache type; use one of {', '.join(KV_BPE)}.")
    tv = s.cache_type_v or "f16"
    if not fa and tv not in ("f16", "f32", "bf16"):
        raise PlanError(f"-ctv {tv} needs flash attention, but -fa is off: use -fa on or an f16 V cache.")
    outputs = max(1, min(n_batch, n_seq * (1 + _spec_n_max(s, n_max))))
    rs_seq = n_max if any(t in _RS_TYPES for t in types) else 0
    ngl_s = (s.n_gpu_layers or "auto").strip().lower()
    if ngl_s in ("auto", "all", "-1", "-2"):
        ngl = hp.n_layer_all + 1
    else:
        try:
            ngl = int(ngl_s)
        except ValueError:
            raise PlanError(f"-ngl {s.n_gpu_layers!r}: give a number of layers, 'auto' or 'all'.") from None
        if ngl < 0:
            ngl = hp.n_layer_all + 1
    ot = []
    for spec in (_extra_flag(extra, "-ot", "--override-tensor") or "").split(","):
        if "=" in spec:
            pat, buft = spec.rsplit("=", 1)
            if buft.upper().startswith("CPU"):
                ot.append(pat)
    has_ot = _extra_flag(extra, "-ot", "--override-tensor") is not None
    lm = (s.load_mode or "auto").lower()
    ft = tuple(s.fit_target) if s.fit_target else (DEFAULT_FIT_TARGET_MIB,)
    return Resolved(
        n_ctx=n_ctx, n_ctx_seq=n_ctx_seq, n_stream=n_stream, n_seq_max=n_seq, kv_unified=unified,
        n_batch=n_batch, n_ubatch=n_ubatch, n_tokens=min(n_ctx, n_ubatch), flash_attn=fa,
        type_k=s.cache_type_k or "f16", type_v=tv,
        type_k_draft=s.cache_type_k_draft or "f16", type_v_draft=s.cache_type_v_draft or "f16",
        mtp=mtp, n_rs_seq=rs_seq, n_outputs_max=outputs, n_gpu_layers=ngl, ngl_auto=ngl_s in ("auto", "-1"),
        ctx_auto=ctx_auto, split_mode=(s.split_mode or "layer"), main_gpu=s.main_gpu or 0,
        tensor_split=tuple(s.tensor_split), cpu_moe=s.cpu_moe, n_cpu_moe=s.n_cpu_moe or 0,
        cpu_overrides=tuple(ot), has_overrides=bool(s.cpu_moe or s.n_cpu_moe or has_ot),
        use_mmap=lm in ("auto", "mmap", "mmap+mlock"), fit=s.fit is not False, fit_target_mib=ft,
        fit_ctx=s.fit_ctx or DEFAULT_FIT_CTX,
        offload_kqv=_extra_flag(extra, "-nkvo", "--no-kv-offload") is None,
    )


def _pad(n: int, to: int) -> int:
    return (n + to - 1) // to * to


# ---- the plan ------------------------------------------------------------------------------------


@dataclass
class DevicePlan:
    key: str
    name: str
    total_mib: float | None
    free_mib: float | None
    margin_mib: float
    components: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in COMPONENT_KEYS})
    layers: list[int] = field(default_factory=list)
    remote: bool = False

    @property
    def needed_mib(self) -> float:
        return sum(self.components.values())

    @property
    def headroom_mib(self) -> float | None:
        return None if self.free_mib is None else self.free_mib - self.needed_mib

    @property
    def risk(self) -> str:
        """`oom` when it does not fit, `tight` when it fits but inside the margin, else `ok`."""
        h = self.headroom_mib
        if h is None:
            return "ok"
        if h < 0:
            return "oom"
        if h < self.margin_mib:
            return "tight"
        return "ok"

    def to_dict(self) -> dict[str, Any]:
        r2 = lambda v: None if v is None else round(v, 2)  # noqa: E731
        c = self.components
        return {
            "name": self.key if self.key == HOST else f"{self.key} ({self.name})" if self.name and self.name != self.key else self.key,
            "total_mib": r2(self.total_mib), "free_mib": r2(self.free_mib),
            "weights_mib": r2(c["weights"]), "kv_mib": r2(c["kv"]), "draft_kv_mib": r2(c["draft_kv"]),
            "recurrent_mib": r2(c["recurrent"]), "compute_mib": r2(c["compute"]),
            "draft_compute_mib": r2(c["draft_compute"]), "output_mib": r2(c["output"]),
            "margin_mib": r2(self.margin_mib), "needed_mib": r2(self.needed_mib),
            "headroom_mib": r2(self.headroom_mib), "risk": self.risk,
        }


@dataclass
class FitOutcome:
    """What `--fit on` is expected to do with these settings."""

    active: bool
    action: str  # "off", "none", "reduce-ctx", "move-layers", "give-up"
    message: str
    n_ctx: int | None = None
    n_gpu_layers: int | None = None
    n_cpu_moe: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Plan:
    model: GGUFMeta
    settings: Settings
    resolved: Resolved
    devices: list[DevicePlan]  # GPUs/RPC first (llama.cpp order), the host last
    fit: FitOutcome
    warnings: list[str] = field(default_factory=list)
    layer_device: list[str] = field(default_factory=list)  # device key per block, + output at [n_layer_all]
    pipeline_parallel: bool = False

    def device(self, key: str) -> DevicePlan | None:
        return next((d for d in self.devices if d.key == key), None)

    def totals(self) -> dict[str, float]:
        tot = {k: 0.0 for k in COMPONENT_KEYS}
        for d in self.devices:
            for k, v in d.components.items():
                tot[k] += v
        return tot

    @property
    def worst_risk(self) -> str:
        order = {"ok": 0, "tight": 1, "oom": 2}
        return max((d.risk for d in self.devices), key=lambda r: order[r], default="ok")

    def to_dict(self) -> dict[str, Any]:
        """The `mtp-tune plan --json` object: model, devices, totals (extras live under model)."""
        devs = [d.to_dict() for d in self.devices]
        keys = ("weights_mib", "kv_mib", "draft_kv_mib", "recurrent_mib", "compute_mib", "draft_compute_mib",
                "output_mib", "margin_mib", "needed_mib")
        totals: dict[str, Any] = {k: round(sum(d[k] or 0 for d in devs), 2) for k in keys}
        totals["total_mib"] = round(sum(d["total_mib"] or 0 for d in devs), 2)
        totals["free_mib"] = round(sum(d["free_mib"] or 0 for d in devs), 2)
        totals["headroom_mib"] = round(totals["free_mib"] - totals["needed_mib"], 2)
        totals["risk"] = self.worst_risk
        r = self.resolved
        model = self.model.summary()
        model["context"] = {
            "n_ctx": r.n_ctx, "n_ctx_seq": r.n_ctx_seq, "n_seq_max": r.n_seq_max, "kv_unified": r.kv_unified,
            "n_batch": r.n_batch, "n_ubatch": r.n_ubatch, "flash_attn": r.flash_attn,
            "cache_type_k": r.type_k, "cache_type_v": r.type_v, "mtp": r.mtp,
            "cache_type_k_draft": r.type_k_draft, "cache_type_v_draft": r.type_v_draft,
            "n_rs_seq": r.n_rs_seq, "n_outputs_max": r.n_outputs_max, "n_gpu_layers": r.n_gpu_layers,
            "pipeline_parallel": self.pipeline_parallel,
        }
        model["fit"] = self.fit.to_dict()
        model["warnings"] = list(self.model.warnings) + list(self.warnings)
        return {"model": model, "devices": devs, "totals": totals}


def _device_of_layer(il: int, r: Resolved, n_layer_all: int, splits: list[float], keys: list[str]) -> str:
    """load_tensors' placement: upper_bound over the normalised cumulative split."""
    if not keys:
        return HOST
    ngl = r.n_gpu_layers
    i_gpu_start = max(n_layer_all + 1 - ngl, 0)
    act = min(ngl, n_layer_all + 1)
    if il < i_gpu_start or (il - i_gpu_start) >= act:
        return HOST
    x = (il - i_gpu_start) / act
    idx = bisect.bisect_right(splits, x)
    return keys[min(idx, len(keys) - 1)]


def plan(
    meta: GGUFMeta,
    settings: Settings,
    devices: list[DeviceSpec] | None = None,
    host_total_mib: float | None = None,
    host_free_mib: float | None = None,
    apply_fit: bool = True,
) -> Plan:
    """Plan memory per device. `devices` are the offload targets (empty: CPU only, as llama.cpp's CPU
    backend allocates); the host comes last. With `--fit` on (the default) and ctx/ngl left unset,
    the expected fit result is applied first (see `Plan.fit`)."""
    devices = list(devices or [])
    hp = meta.hparams
    base = resolve(settings, hp)
    p = _plan_once(meta, settings, base, devices, host_total_mib, host_free_mib)
    if not apply_fit:
        p.fit = FitOutcome(base.fit, "off" if not base.fit else "none", "planned as given (fit not applied)")
        return p
    if not base.fit:
        p.fit = FitOutcome(False, "off", "--fit off: llama-server loads exactly what is given.")
        return p
    return _apply_fit(meta, settings, base, devices, host_total_mib, host_free_mib, p)


def _plan_once(meta: GGUFMeta, s: Settings, r: Resolved, devices: list[DeviceSpec],
               host_total: float | None, host_free: float | None) -> Plan:
    hp = meta.hparams
    warnings: list[str] = []
    if r.mtp and hp.n_nextn == 0:
        raise PlanError(
            f"--spec-type draft-mtp: {meta.path.name} has no MTP (NextN) layers ({hp.arch}.nextn_predict_layers "
            "is missing), so llama-server would fail with 'failed to create MTP context'. Use a GGUF converted "
            "with its MTP head, or drop draft-mtp."
        )
    if r.split_mode in ("row", "tensor") and devices:
        warnings.append(f"-sm {r.split_mode}: planned as -sm layer (row/tensor splitting is not modelled).")
    offload = list(devices)
    if r.split_mode == "none" and offload:
        if r.main_gpu >= len(offload):
            raise PlanError(f"-mg {r.main_gpu}: there are only {len(offload)} devices (0..{len(offload) - 1}).")
        offload = [offload[r.main_gpu]]
    keys = [d.key for d in offload]
    if r.tensor_split and offload:
        ts = list(r.tensor_split)[: len(offload)] + [0.0] * max(0, len(offload) - len(r.tensor_split))
        if len(r.tensor_split) > len(offload):
            warnings.append(f"-ts has {len(r.tensor_split)} values but there are {len(offload)} devices; the extra values are ignored.")
        if all(v == 0 for v in ts):
            ts = [d.free_mib for d in offload]
    else:
        ts = [d.free_mib for d in offload]
    total = sum(ts) or 1.0
    splits, acc = [], 0.0
    for v in ts:
        acc += v
        splits.append(acc / total)
    n_all = hp.n_layer_all
    layer_dev = [_device_of_layer(il, r, n_all, splits, keys) for il in range(n_all + 1)]
    out_dev = layer_dev[n_all]

    dplans = {d.key: DevicePlan(d.key, d.name, d.total_mib, d.free_mib, 0.0, remote=d.remote) for d in offload}
    host = DevicePlan(HOST, "host memory", host_total, host_free, 0.0)
    dplans[HOST] = host
    margins = list(r.fit_target_mib)
    for i, d in enumerate(offload):
        dplans[d.key].margin_mib = float(margins[i] if i < len(margins) else margins[-1])
    host.margin_mib = float(margins[0])
    for il in range(n_all):
        dplans[layer_dev[il]].layers.append(il)

    # ---- weights
    placed: dict[str, list[TensorInfo]] = {k: [] for k in dplans}
    nextn = set(hp.nextn_layers())
    cpu_res = [re.compile(p) for p in r.cpu_overrides]
    has_output = any(t.name == "output.weight" for t in meta.tensors)
    for t in meta.tensors:
        if t.layer is not None and t.layer in nextn and not r.mtp:
            continue  # TENSOR_SKIP: MTP weights are only loaded for draft-mtp
        if t.layer is not None and t.layer < n_all:
            dev = layer_dev[t.layer]
        elif t.name.startswith("token_embd"):
            dev = HOST
        elif t.name.startswith("output") or t.layer is None:
            dev = out_dev
        else:
            dev = out_dev
        if dev != HOST and t.layer is not None:
            if (r.cpu_moe or t.layer < r.n_cpu_moe) and _EXPS.search(t.name):
                dev = HOST
            elif any(rx.search(t.name) for rx in cpu_res):
                dev = HOST
        placed[dev].append(t)
    if not has_output and out_dev != HOST:
        emb = meta.tensor("token_embd.weight")
        if emb is not None:
            placed[out_dev].append(emb)  # tied embeddings: a copy on the output device
    for key, ts_ in placed.items():
        if key == HOST and r.use_mmap:
            dplans[key].components["weights"] = _mapped_range(ts_) / MiB
        else:
            dplans[key].components["weights"] = sum(_pad(t.nbytes, 32) for t in ts_) / MiB

    # ---- KV (main): attention layers of the trunk; KV follows its layer's device
    kv_dev = (lambda il: layer_dev[il]) if r.offload_kqv else (lambda il: HOST)
    cells = r.n_ctx_seq * r.n_stream
    hd_k, hd_v = hp.head_dim_k, hp.head_dim_v
    attn_layers = hp.attention_layers()
    if not r.flash_attn:
        vmax = max((hp.n_head_kv[il] for il in attn_layers), default=0)
    for il in attn_layers:
        heads = hp.n_head_kv[il]
        b = cells * (_row(heads * hd_k, r.type_k) + _row((heads if r.flash_attn else vmax) * hd_v, r.type_v))
        dplans[kv_dev(il)].components["kv"] += b / MiB
    # ---- draft KV: NextN layers only, -ctkd/-ctvd
    if r.mtp:
        for il in hp.nextn_layers():
            heads = hp.n_head_kv[il]
            b = cells * (_row(heads * hd_k, r.type_k_draft) + _row(heads * hd_v, r.type_v_draft))
            dplans[kv_dev(il)].components["draft_kv"] += b / MiB
    # ---- recurrent state
    if hp.is_hybrid:
        rows = max(1, r.n_seq_max) * (1 + r.n_rs_seq)
        per_layer = 4 * (hp.n_embd_r + hp.n_embd_s) * rows
        for il in hp.recurrent_layers():
            dplans[kv_dev(il)].components["recurrent"] += per_layer / MiB
    # ---- output buffers (host memory): logits for n_seq_max rows, target and draft
    n_out_rows = max(r.n_seq_max, 1)
    out_bytes = hp.n_vocab * n_out_rows * 4
    host.components["output"] = out_bytes * (2 if r.mtp else 1) / MiB

    # ---- compute buffers: pipeline parallelism (several devices, all layers, -sm layer, no overrides)
    pipeline = (len(offload) > 1 and r.n_gpu_layers > n_all and r.split_mode == "layer"
                and r.offload_kqv and not r.has_overrides)
    copies = 4 if pipeline else 1
    _compute(meta, r, dplans, layer_dev, out_dev, copies, offload)

    order = [d.key for d in offload] + [HOST]
    return Plan(meta, s, r, [dplans[k] for k in order], FitOutcome(r.fit, "none", ""), warnings, layer_dev, pipeline)


def _row(n: int, t: str) -> int:
    """ggml_row_size of n elements of a KV cache type."""
    blk = _KV_BLOCK.get(t, 32)
    if blk == 1:
        return int(n * KV_BPE[t])
    return (n // 32) * int(KV_BPE[t] * 32)


def _mapped_range(ts: list[TensorInfo]) -> int:
    """Bytes of the file range llama.cpp maps for these tensors (first offset to last end)."""
    if not ts:
        return 0
    return max(t.offset + t.nbytes for t in ts) - min(t.offset for t in ts)


# ---- compute buffers -------------------------------------------------------------------------------


def _features(hp: HParams) -> tuple[str, dict[str, float]]:
    moe = hp.n_expert > 0
    q = float(max(hp.n_head, default=0) * hp.head_dim_k)
    uff = float(hp.n_expert_used * hp.n_ff_exp) if moe else 0.0
    ff = float((hp.n_ff_shexp or hp.n_ff) if moe else hp.n_ff)
    f = {"embd": float(hp.n_embd), "q": q, "uembd": float(hp.n_expert_used * hp.n_embd) if moe else 0.0, "uff": uff, "ff": ff,
         "kv": float(max(hp.n_head_kv, default=0) * hp.head_dim_k)}
    family = "moe" if moe and uff >= ff else "dense"
    return family, f


def _proxy(family: str, f: dict[str, float]) -> float:
    """Linear per-token width fitted on shape variants (floats per token)."""
    if family == "moe":
        return 2.667 * f["embd"] + f["q"] + 1.333 * f["uembd"] + 1.667 * f["uff"] + 693.0
    return f["embd"] + 3.0 * f["ff"] + 2.0 * f["q"] + 4.0 * f.get("kv", 0.0) + 12.8


def _widths(hp: HParams) -> tuple[float, float, float]:
    """(P_t, P_dA, P_dB): the nearest reference of the same family, scaled by the proxy ratio."""
    family, f = _features(hp)
    refs = [r for r in REFERENCES if r[0] == family]
    p = _proxy(family, f)
    if not refs or not hp.known:
        return p, p, p * 0.6

    def dist(rf: dict[str, float]) -> float:
        return sum(abs(math.log((f[k] + 1.0) / (rf[k] + 1.0))) for k in ("embd", "q", "uembd", "uff", "ff"))

    _, rf, pt, pda, pdb = min(refs, key=lambda r: dist(r[1]))
    ratio = p / _proxy(family, {**rf, "kv": f.get("kv", 0.0)})
    return pt * ratio, pda * ratio, pdb * ratio


def _compute(meta: GGUFMeta, r: Resolved, dp: dict[str, DevicePlan], layer_dev: list[str], out_dev: str,
             copies: int, offload: list[DeviceSpec]) -> None:
    hp = meta.hparams
    T = r.n_tokens
    n_kv = r.n_ctx_seq  # cells one stream attends to; the mask is n_kv x T over all streams
    mask = n_kv * T * (2 if r.flash_attn else 4) * copies
    if not r.flash_attn:  # KQ scores and softmax in f32
        mask += n_kv * T * max(hp.n_head, default=0) * 4
    pt, pda, pdb = _widths(hp)
    unit = T * hp.n_embd * 4
    floor = 0.0
    if hp.is_hybrid:
        floor = hp.n_embd_s * 4 * _floor_units(max(1, r.n_seq_max))
    n_out = min(T, r.n_outputs_max)
    logits_t = n_out * hp.n_vocab * 4 + 2 * unit  # a large output count (ngram-mod) makes the logits the peak
    act_t = max(4.0 * T * pt, floor, logits_t)
    trunk = [layer_dev[il] for il in range(hp.n_layer)]
    trunk_devs = list(dict.fromkeys(trunk))
    scale = copies / 4.0 if copies > 1 else 0.0  # split inputs are duplicated per scheduler copy
    exps_host = _experts_on_host(meta, r) and HOST not in trunk_devs
    if trunk_devs == [HOST] and out_dev == HOST:
        dp[HOST].components["compute"] = (mask + act_t) / MiB
    else:
        dev_act = act_t * (EXPERTS_ON_HOST["dev_t"] if exps_host and r.cpu_moe else 1.0)
        for i, k in enumerate(trunk_devs):
            extra = SPLIT_UNITS["first" if i == 0 else "other"] * unit * scale
            dp[k].components["compute"] += (mask + dev_act + extra) / MiB
        if out_dev not in trunk_devs:
            dp[out_dev].components["compute"] += (SPLIT_UNITS["output_only"] * unit * scale + n_out * hp.n_vocab * 4) / MiB
        if HOST not in trunk_devs:
            host_b = (mask if copies > 1 else 0) + SPLIT_UNITS["host"] * unit * scale
            if exps_host:
                host_b += EXPERTS_ON_HOST["host_t"] * act_t
            dp[HOST].components["compute"] += host_b / MiB
    if not r.mtp:
        return
    n_out_d = min(T, max(1, r.n_seq_max))
    logits_d = n_out_d * hp.n_vocab * 4
    act_d = max(4.0 * T * pda, 4.0 * T * pdb + mask, logits_d + 2 * unit)
    mtp_dev = layer_dev[hp.n_layer] if hp.n_nextn else out_dev
    if mtp_dev == HOST:
        dp[HOST].components["draft_compute"] += act_d / MiB
        return
    dev_d = act_d
    moe_on_host = exps_host and (r.cpu_moe or r.n_cpu_moe > hp.n_layer)
    if moe_on_host:  # the MTP block's experts run on the host; its attention stays on the device
        dev_d = EXPERTS_ON_HOST["dev_d_attn"] * 4.0 * T * pdb + mask
    dp[mtp_dev].components["draft_compute"] += (dev_d + SPLIT_UNITS["draft_dev"] * unit * scale) / MiB
    if out_dev != mtp_dev:
        dp[out_dev].components["draft_compute"] += (SPLIT_UNITS["output_only"] * unit * scale + logits_d) / MiB
    host_d = (mask if copies > 1 else 0) + SPLIT_UNITS["draft_host"] * unit * scale
    if moe_on_host:
        host_d += act_d
    dp[HOST].components["draft_compute"] += host_d / MiB


def _floor_units(n_seq: int) -> float:
    pts = FLOOR_STATE
    if n_seq <= pts[0][0]:
        return pts[0][1]
    for (a, fa), (b, fb) in zip(pts, pts[1:]):
        if n_seq <= b:
            return fa + (fb - fa) * (n_seq - a) / (b - a)
    (a, fa), (b, fb) = pts[-2], pts[-1]
    return fb + (fb - fa) / (b - a) * (n_seq - b)


def _experts_on_host(meta: GGUFMeta, r: Resolved) -> bool:
    if r.cpu_moe or r.n_cpu_moe > 0:
        return meta.hparams.n_expert > 0
    return any(re.search(p, "blk.0.ffn_up_exps.weight") for p in r.cpu_overrides)


# ---- expected --fit behaviour ------------------------------------------------------------------


def _fits(p: Plan) -> bool:
    return all((d.headroom_mib is None) or d.headroom_mib >= d.margin_mib for d in p.devices if d.key != HOST or len(p.devices) == 1)


def _apply_fit(meta: GGUFMeta, s: Settings, base: Resolved, devices: list[DeviceSpec],
               host_total: float | None, host_free: float | None, first: Plan) -> Plan:
    """common_fit_params: change nothing if it fits; else shrink an unset context (linear
    interpolation down to --fit-ctx, rounded to 256 x streams); else move layers/experts when -ngl is
    auto and no -ts/-ot/-cmoe/-ncmoe; else give up and load as given."""
    if _fits(first):
        first.fit = FitOutcome(True, "none", "fits with the --fit-target margin: --fit changes nothing.")
        return first
    hp = meta.hparams
    cur = first
    nd = len(devices)
    if base.ctx_auto and _budget(first) - _used(first) < 0:
        lo_ctx = base.fit_ctx * base.n_stream
        lo = _plan_once(meta, s, resolve(s, hp, ctx_override=lo_ctx), devices, host_total, host_free)
        used_hi, used_lo = _used(first), _used(lo)
        target = _budget(first)
        if nd > 1:
            # llama.cpp is more conservative across devices: whole layers/tensors waste ~0.5 per device
            model = sum(d.components["weights"] for d in first.devices if d.key != HOST)
            per_layer = model / max(1, min(base.n_gpu_layers, hp.n_layer_all + 1))
            target -= (nd + 1) * per_layer / (6 if hp.n_expert else 2)
        if target > used_lo and used_hi > used_lo:
            n = lo_ctx + int((first.resolved.n_ctx - lo_ctx) * (target - used_lo) / (used_hi - used_lo))
            align = 256 * base.n_stream
            n = max(n - n % align, lo_ctx)
            cur = _plan_once(meta, s, resolve(s, hp, ctx_override=n), devices, host_total, host_free)
            if nd <= 1 or _fits(cur):
                cur.fit = FitOutcome(True, "reduce-ctx", f"--fit is expected to reduce the context to {n} tokens.", n_ctx=n)
                return cur
        else:
            cur = lo
    movable = (base.ngl_auto and not base.tensor_split and not base.has_overrides
               and base.split_mode not in ("row", "tensor") and devices)
    if not movable:
        why = ("no offload device" if not devices else
               "-ngl was set" if not base.ngl_auto else "-ts/-ot/-cmoe/-ncmoe were given" if (base.tensor_split or base.has_overrides)
               else f"-sm {base.split_mode}")
        cur.fit = FitOutcome(True, "give-up", f"--fit cannot make this fit ({why}); llama-server loads as given and is expected to run out of memory.")
        return cur
    n_all = hp.n_layer_all
    if hp.n_expert > 0:
        # MoE: overflow expert tensors to the host, front layers first
        for n_moe in range(1, hp.n_layer + 1):
            s2 = replace(s, n_cpu_moe=n_moe, ctx_size=s.ctx_size or cur.resolved.n_ctx)
            p2 = _plan_once(meta, s2, replace(resolve(s2, hp), ngl_auto=True), devices, host_total, host_free)
            if _fits(p2):
                p2.fit = FitOutcome(True, "move-layers", f"--fit is expected to keep the experts of the first {n_moe} layers in host memory.",
                                    n_ctx=p2.resolved.n_ctx, n_cpu_moe=n_moe)
                p2.settings = s
                return p2
    for ngl in range(n_all, -1, -1):
        s2 = replace(s, n_gpu_layers=str(ngl), ctx_size=s.ctx_size or cur.resolved.n_ctx)
        p2 = _plan_once(meta, s2, resolve(s2, hp), devices, host_total, host_free)
        if _fits(p2):
            p2.fit = FitOutcome(True, "move-layers", f"--fit is expected to offload {ngl} layers (-ngl {ngl}).",
                                n_ctx=p2.resolved.n_ctx, n_gpu_layers=ngl)
            p2.settings = s
            return p2
    cur.fit = FitOutcome(True, "give-up", "--fit cannot make this fit even with no layers offloaded; llama-server is expected to fail.")
    return cur


def _used(p: Plan) -> float:
    devs = [d for d in p.devices if d.key != HOST] or p.devices
    return sum(d.needed_mib for d in devs)


def _budget(p: Plan) -> float:
    devs = [d for d in p.devices if d.key != HOST] or p.devices
    return sum((d.free_mib or 0) - d.margin_mib for d in devs)
