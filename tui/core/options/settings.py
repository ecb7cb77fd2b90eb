"""The settings model: every llama-server knob mtp-tune shows.

`None` means "not given": the server's default applies (`options.default(...)` says which) and no
flag is emitted. Field names are the long option names with `-` replaced by `_`; the choices and
ranges of each live in `options.rules`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from tui.core.options.redact import REDACTED, redact_argv


@dataclass
class Settings:
    """One llama-server configuration; unset fields take llama-server b11434's defaults."""

    # model
    model: str | None = None  # -m PATH
    hf_repo: str | None = None  # -hf user/model[:quant]
    # context and batching
    ctx_size: int | None = None  # -c; 0 = the model's training context
    batch_size: int | None = None  # -b
    ubatch_size: int | None = None  # -ub
    parallel: int | None = None  # -np; -1 = auto (4 slots, unified KV)
    threads: int | None = None  # -t
    threads_batch: int | None = None  # -tb
    # speculative decoding
    spec_type: list[str] = field(default_factory=list)  # --spec-type comma list; [] = none; a `none` disables all
    spec_draft_n_max: int | None = None
    spec_draft_n_min: int | None = None
    spec_draft_p_min: float | None = None
    # KV cache
    cache_type_k: str | None = None  # -ctk
    cache_type_v: str | None = None  # -ctv
    cache_type_k_draft: str | None = None  # -ctkd (does NOT follow -ctk)
    cache_type_v_draft: str | None = None  # -ctvd
    flash_attn: str | None = None  # -fa on|off|auto
    # fit and placement
    fit: bool | None = None  # --fit on|off
    fit_target: list[int] = field(default_factory=list)  # -fitt MiB, one or one per device
    fit_ctx: int | None = None  # -fitc
    n_gpu_layers: str | None = None  # -ngl auto|all|N
    split_mode: str | None = None  # -sm
    tensor_split: list[float] = field(default_factory=list)  # -ts
    main_gpu: int | None = None  # -mg
    cpu_moe: bool = False  # -cmoe
    n_cpu_moe: int | None = None  # -ncmoe N
    load_mode: str | None = None  # -lm
    no_mmproj: bool = False  # --no-mmproj
    cache_ram: int | None = None  # -cram MiB
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
        """A copy safe for logs, history, states and the results database: the API key (field and extra
        arguments) and every other secret option in `extra_args` (`-hft`) replaced by `REDACTED`."""
        extra = redact_argv(self.extra_args)
        return replace(self, api_key=REDACTED if self.api_key else None, extra_args=extra)

    def __repr__(self) -> str:
        """The dataclass's repr with every secret masked: a Settings in a log line, an assertion or a
        traceback shows no token (a dataclass keeps an explicit __repr__ instead of writing its own)."""
        safe = self.redacted()
        return "Settings(" + ", ".join(f"{f.name}={getattr(safe, f.name)!r}" for f in fields(self) if f.repr) + ")"


def effective_spec_types(types: list[str]) -> list[str]:
    """The types one `--spec-type a,b,c` really enables in b11434.

    `common_speculative_types_from_names` (speculative.cpp:2324) returns just `{none}` as soon as the
    list holds `none`, so any `none` switches the whole list off; otherwise order is kept.
    """
    return [] if "none" in types else list(types)


def settings_json(settings: Settings, *, only_set: bool = True) -> dict[str, Any]:
    """Settings as a JSON object (states, journals, the results store, profiles); `only_set` keeps the
    fields that differ from the defaults. The API key is never written; redact first for the rest."""
    default = Settings()
    out: dict[str, Any] = {}
    for f in fields(Settings):
        if f.name == "api_key":
            continue
        v = getattr(settings, f.name)
        if only_set and v == getattr(default, f.name):
            continue
        out[f.name] = list(v) if isinstance(v, list) else v
    return out


def settings_from_json(d: Mapping[str, Any]) -> Settings:
    """The Settings a `settings_json` object describes (unknown keys, from a newer mtp-tune, ignored)."""
    known = {f.name for f in fields(Settings)}
    return Settings(**{k: (list(v) if isinstance(v, list) else v) for k, v in d.items() if k in known})


def mtp_from_settings(settings: Mapping[str, Any] | None) -> bool | None:
    """The MTP flag a run is stored with: None when the settings do not say (attach mode)."""
    if not settings or "spec_type" not in settings:
        return None
    return "draft-mtp" in effective_spec_types(list(settings.get("spec_type") or []))
