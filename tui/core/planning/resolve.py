"""Settings -> the numbers llama-server b11434 really uses (its defaults applied), for the planner.

Extra arguments are read with the one argv reader (`tui.core.options.reader`): last value wins,
repeatable options such as `-ot` accumulate, exactly as llama.cpp's parser does. The spec-type list
is read through `settings.effective_spec_types`, so `none,draft-mtp` is off here as it is for the
server and the validator.
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.core.options import reader
from tui.core.options.lookup import default
from tui.core.planning.errors import PlanError
from tui.core.planning.gguf_meta import HParams
from tui.core.planning.hparams import RS_ROLLBACK_ARCHS
from tui.core.options.settings import Settings, effective_spec_types

# llama-server b11434's defaults, from the one option table (tui.core.options.lookup.default).
DEFAULT_FIT_TARGET_MIB = int(default("--fit-target"))  # type: ignore[call-overload]
DEFAULT_FIT_CTX = int(default("--fit-ctx"))  # type: ignore[call-overload]
DEFAULT_BATCH = int(default("--batch-size"))  # type: ignore[call-overload]
DEFAULT_UBATCH = int(default("--ubatch-size"))  # type: ignore[call-overload]
DEFAULT_SPEC_DRAFT_N_MAX = int(default("--spec-draft-n-max"))  # type: ignore[call-overload]
DEFAULT_NGRAM_MOD_N_MAX = int(default("--spec-ngram-mod-n-max"))  # type: ignore[call-overload]
DEFAULT_CTX_NO_TRAIN = 4096  # n_ctx when the model states no training context
AUTO_PARALLEL_SLOTS = 4  # -np -1 (auto): 4 slots sharing one unified KV
CTX_PAD = 256  # n_ctx is padded to a multiple of this

#: bytes per element of the KV cache types (ggml_row_size / n)
KV_BPE: dict[str, float] = {
    "f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
    "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32,
}
_DRAFT_TYPES = ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark")
_RS_TYPES = ("draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark")


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
    swa_full: bool = False  # --swa-full: sliding-window layers keep the whole context
    repack: bool = True  # -nr/--no-repack turns the CPU_REPACK buffer off
    no_host: bool = False  # --no-host: no pinned host buffer for host weights (CPU_REPACK can apply)



def _spec_n_max(s: Settings, types: list[str], n_max: int) -> int:
    """common_speculative_n_max: the largest draft over the enabled types."""
    best = 0
    for t in types:
        if t in _DRAFT_TYPES:
            best = max(best, n_max)
        elif t == "ngram-mod":
            v = reader.value(s.extra_args, "--spec-ngram-mod-n-max")
            best = max(best, int(v) if v and v.isdigit() else DEFAULT_NGRAM_MOD_N_MAX)
        elif t in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
            best = max(best, 48)
        elif t == "ngram-cache":
            best = max(best, 8)
    return best


def cpu_override_patterns(extra: list[str]) -> tuple[list[str], bool]:
    """(the `-ot` regexes whose buffer is a CPU one, whether any `-ot` was given); every `-ot` counts."""
    given = reader.values(extra, "--override-tensor")
    pats = []
    for val in given:
        for spec in val.split(","):
            if "=" in spec:
                pat, buft = spec.rsplit("=", 1)
                if buft.upper().startswith("CPU"):
                    pats.append(pat)
    return pats, bool(given)


def resolve(s: Settings, hp: HParams, ctx_override: int | None = None) -> Resolved:
    """Apply llama-server's defaults (b11434) to the settings."""
    extra = list(s.extra_args)
    types = effective_spec_types(list(s.spec_type))
    mtp = "draft-mtp" in types
    n_max = s.spec_draft_n_max if s.spec_draft_n_max is not None else DEFAULT_SPEC_DRAFT_N_MAX
    if n_max < 0:
        raise PlanError(f"--spec-draft-n-max {n_max}: must be 0 or more.")
    np_ = s.parallel if s.parallel is not None else -1
    if np_ == -1:
        n_seq, unified = AUTO_PARALLEL_SLOTS, True
    elif np_ <= 0:
        raise PlanError(f"-np {np_}: the number of slots must be 1 or more (or -1 for auto).")
    else:
        n_seq = np_
        unified = reader.present(extra, "--kv-unified") is True
    ctx_auto = not s.ctx_size
    n_ctx = ctx_override if ctx_override is not None else (s.ctx_size or 0)
    if n_ctx < 0:
        raise PlanError(f"-c {n_ctx}: the context size must be 0 (model default) or positive.")
    if n_ctx == 0:
        n_ctx = hp.n_ctx_train or DEFAULT_CTX_NO_TRAIN
        if ctx_auto and (s.fit is not False) and not unified:
            n_ctx *= n_seq  # fit: n_ctx_train per stream when the KV is not unified
    n_ctx = pad(n_ctx, CTX_PAD)
    if unified:
        n_ctx_seq, n_stream = n_ctx, 1
    else:
        n_ctx_seq = pad(n_ctx // n_seq, CTX_PAD)
        n_ctx, n_stream = n_ctx_seq * n_seq, n_seq
    n_batch = min(n_ctx, s.batch_size or DEFAULT_BATCH)
    n_ubatch = min(n_batch, s.ubatch_size or DEFAULT_UBATCH)
    if n_batch <= 0 or n_ubatch <= 0:
        raise PlanError("-b/-ub must be positive.")
    fa = s.flash_attn != "off"
    for flag, t in (("-ctk", s.cache_type_k), ("-ctv", s.cache_type_v), ("-ctkd", s.cache_type_k_draft), ("-ctvd", s.cache_type_v_draft)):
        if t is not None and t not in KV_BPE:
            raise PlanError(f"{flag} {t}: unsupported cache type; use one of {', '.join(KV_BPE)}.")
    tv = s.cache_type_v or "f16"
    if not fa and tv not in ("f16", "f32", "bf16"):
        raise PlanError(f"-ctv {tv} needs flash attention, but -fa is off: use -fa on or an f16 V cache.")
    outputs = max(1, min(n_batch, n_seq * (1 + _spec_n_max(s, types, n_max))))
    rs_seq = n_max if any(t in _RS_TYPES for t in types) and hp.arch in RS_ROLLBACK_ARCHS else 0
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
    ot, has_ot = cpu_override_patterns(extra)
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
        offload_kqv=reader.present(extra, "--kv-offload") is not False,
        swa_full=reader.present(extra, "--swa-full") is True,
        repack=reader.present(extra, "--repack") is not False,
        no_host=reader.present(extra, "--no-host") is True,
    )


def pad(n: int, to: int) -> int:
    """n rounded up to a multiple of `to` (GGML_PAD)."""
    return (n + to - 1) // to * to
