"""The settings model: every llama-server knob mtp-tune shows, with llama-server's own defaults.

`None` means "not given": the server's default applies and no flag is emitted. Field names are the
long option names with `-` replaced by `_`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

#: KV cache types accepted by -ctk/-ctv/-ctkd/-ctvd in llama.cpp b11434 (arg.cpp:304-314).
CACHE_TYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
#: Speculative types (speculative.cpp:72-84).
SPEC_TYPES: tuple[str, ...] = (
    "none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
)
SPLIT_MODES: tuple[str, ...] = ("none", "layer", "row", "tensor")
LOAD_MODES: tuple[str, ...] = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")
FLASH_ATTN: tuple[str, ...] = ("auto", "on", "off")


@dataclass
class Settings:
    """One llama-server configuration. Defaults equal llama-server's (b11434)."""

    # model
    model: str | None = None  # -m PATH
    hf_repo: str | None = None  # -hf user/model[:quant]
    # context and batching
    ctx_size: int | None = None  # -c; server default 0 = n_ctx_train
    batch_size: int | None = None  # -b; 2048
    ubatch_size: int | None = None  # -ub; 512
    parallel: int | None = None  # -np; -1 = auto (4 slots, unified KV)
    threads: int | None = None  # -t
    threads_batch: int | None = None  # -tb
    # speculative decoding
    spec_type: list[str] = field(default_factory=list)  # --spec-type comma list; [] = none; a `none` disables all
    spec_draft_n_max: int | None = None  # 3
    spec_draft_n_min: int | None = None  # 0
    spec_draft_p_min: float | None = None  # 0.0
    # KV cache
    cache_type_k: str | None = None  # -ctk; f16
    cache_type_v: str | None = None  # -ctv; f16
    cache_type_k_draft: str | None = None  # -ctkd; f16 (does NOT follow -ctk)
    cache_type_v_draft: str | None = None  # -ctvd; f16
    flash_attn: str | None = None  # -fa on|off|auto; auto
    # fit and placement
    fit: bool | None = None  # --fit on|off; on
    fit_target: list[int] = field(default_factory=list)  # -fitt MiB, one or one per device; 1024
    fit_ctx: int | None = None  # -fitc; 4096
    n_gpu_layers: str | None = None  # -ngl auto|all|N; auto
    split_mode: str | None = None  # -sm; layer
    tensor_split: list[float] = field(default_factory=list)  # -ts
    main_gpu: int | None = None  # -mg; 0
    cpu_moe: bool = False  # -cmoe
    n_cpu_moe: int | None = None  # -ncmoe N
    load_mode: str | None = None  # -lm; auto
    no_mmproj: bool = False  # --no-mmproj
    cache_ram: int | None = None  # -cram MiB; 8192
    rpc: list[str] = field(default_factory=list)  # --rpc host:port,...
    # server
    host: str = "127.0.0.1"
    port: int | None = None  # None = pick a free port at launch
    api_key: str | None = field(default=None, repr=False)  # never written to logs (nor repr)
    metrics: bool = True  # --metrics (mtp-tune needs /metrics for verification steps)
    extra_args: list[str] = field(default_factory=list)  # free-form, appended verbatim

    @property
    def mtp_enabled(self) -> bool:
        """True when draft-mtp is in the effective spec-type list (see `effective_spec_types`)."""
        return "draft-mtp" in effective_spec_types(self.spec_type)

    def redacted(self) -> Settings:
        """A copy safe for logs and history: API keys (field and extra arguments) replaced by `REDACTED`."""
        extra = list(self.extra_args)
        for i, a in enumerate(extra):
            if a == "--api-key" and i + 1 < len(extra):
                extra[i + 1] = REDACTED
            elif isinstance(a, str) and a.startswith("--api-key="):
                extra[i] = f"--api-key={REDACTED}"
        return replace(self, api_key=REDACTED if self.api_key else None, extra_args=extra)


#: What logs, history and default profiles show instead of an API key.
REDACTED = "<redacted>"


def effective_spec_types(types: list[str]) -> list[str]:
    """The types one `--spec-type a,b,c` really enables in b11434.

    `common_speculative_types_from_names` (speculative.cpp:2324) returns just `{none}` as soon as the
    list holds `none`, so any `none` switches the whole list off; otherwise order is kept.
    """
    return [] if "none" in types else list(types)
