"""How each `Settings` field maps to a llama-server option (emit order, kind, preset or not)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from tui.core.options.lookup import find_option
from tui.core.options.spec import ServerOption, ValueRule

__all__ = ["FIELDS", "FIELD_BY_NAME", "FieldSpec", "field_for_option"]


@dataclass(frozen=True)
class FieldSpec:
    """How one `Settings` field maps to a llama-server option.

    `kind`: `str`, `int`, `float`, `choice`, `ngl` (auto/all/N), `onoff` (bool written on/off),
    `spec` (spec-type list), `list_int`, `list_float`, `list_str` (comma lists), `flag` (True emits
    the flag), `negflag` (True emits the option's negative form). `ini=False` fields are not written
    to preset sections: the router forces host/port and strips api-key (server-models.cpp:479-531).
    """

    field: str
    spelling: str
    kind: str
    ini: bool = True

    @property
    def option(self) -> ServerOption:
        opt = find_option(self.spelling)
        assert opt is not None, self.spelling
        return opt

    @property
    def flag(self) -> str:
        """The spelling mtp-tune emits for this field."""
        if self.kind == "negflag":
            neg = self.option.canonical_neg
            assert neg is not None
            return neg
        return self.option.canonical

    @property
    def rule(self) -> ValueRule:
        """The option's value rule (type, default, range) from the table."""
        r = self.option.rule
        assert r is not None, self.spelling
        return r

    @property
    def label(self) -> str:
        """The name used in messages (the long option name without dashes)."""
        return self.flag.lstrip("-")


#: Settings fields in the order they are emitted.
FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("model", "--model", "str"),
    FieldSpec("hf_repo", "--hf-repo", "str"),
    FieldSpec("ctx_size", "--ctx-size", "int"),
    FieldSpec("batch_size", "--batch-size", "int"),
    FieldSpec("ubatch_size", "--ubatch-size", "int"),
    FieldSpec("parallel", "--parallel", "int"),
    FieldSpec("threads", "--threads", "int"),
    FieldSpec("threads_batch", "--threads-batch", "int"),
    FieldSpec("spec_type", "--spec-type", "spec"),
    FieldSpec("spec_draft_n_max", "--spec-draft-n-max", "int"),
    FieldSpec("spec_draft_n_min", "--spec-draft-n-min", "int"),
    FieldSpec("spec_draft_p_min", "--spec-draft-p-min", "float"),
    FieldSpec("cache_type_k", "--cache-type-k", "choice"),
    FieldSpec("cache_type_v", "--cache-type-v", "choice"),
    FieldSpec("cache_type_k_draft", "--spec-draft-type-k", "choice"),
    FieldSpec("cache_type_v_draft", "--spec-draft-type-v", "choice"),
    FieldSpec("flash_attn", "--flash-attn", "choice"),
    FieldSpec("fit", "--fit", "onoff"),
    FieldSpec("fit_target", "--fit-target", "list_int"),
    FieldSpec("fit_ctx", "--fit-ctx", "int"),
    FieldSpec("n_gpu_layers", "--gpu-layers", "ngl"),
    FieldSpec("split_mode", "--split-mode", "choice"),
    FieldSpec("tensor_split", "--tensor-split", "list_float"),
    FieldSpec("main_gpu", "--main-gpu", "int"),
    FieldSpec("cpu_moe", "--cpu-moe", "flag"),
    FieldSpec("n_cpu_moe", "--n-cpu-moe", "int"),
    FieldSpec("load_mode", "--load-mode", "choice"),
    FieldSpec("no_mmproj", "--mmproj-auto", "negflag"),
    FieldSpec("cache_ram", "--cache-ram", "int"),
    FieldSpec("rpc", "--rpc", "list_str"),
    FieldSpec("host", "--host", "str", ini=False),
    FieldSpec("port", "--port", "int", ini=False),
    FieldSpec("api_key", "--api-key", "str", ini=False),
    FieldSpec("metrics", "--metrics", "flag"),
)

FIELD_BY_NAME: dict[str, FieldSpec] = {f.field: f for f in FIELDS}


@cache
def _field_by_option() -> dict[ServerOption, FieldSpec]:
    return {f.option: f for f in FIELDS}


def field_for_option(opt: ServerOption) -> FieldSpec | None:
    """The Settings field an option fills, or None when it belongs in `extra_args`."""
    return _field_by_option().get(opt)
