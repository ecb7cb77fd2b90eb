"""How each `Settings` field is shown: its group, label, input kind, choices and the server's default.

Presentation only. The kind of each field and its option name come from `tui.core.options.FIELDS`;
this table adds what a form needs (grouping, the default or an example to show as a placeholder,
choices). A placeholder always reads as a hint ("default: 2048", "e.g. 1,1"), never as a bare value:
a grey "2048" in an empty field looked like a value that was set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tui.core.options import CACHE_TYPES, FIELD_BY_NAME, FLASH_ATTN, LOAD_MODES, SPEC_TYPES, SPLIT_MODES, default
from tui.core.options.argv import command_line, split_command
from tui.core.options.values import BadValue, format_float, parse_value


@dataclass(frozen=True)
class FormField:
    name: str  # the Settings attribute
    label: str  # the option name users know from llama-server
    kind: str  # options.FieldSpec.kind, or "args" for extra_args
    default: str = ""  # llama-server's default, shown as the placeholder "default: ..."
    choices: tuple[str, ...] = ()
    help: str = ""
    example: str = ""  # shown as "e.g. ..." when there is no default to show

    @property
    def placeholder(self) -> str:
        """The hint an empty field shows: the server's default or an example, worded as such."""
        if self.default:
            return f"default: {self.default}"
        return f"e.g. {self.example}" if self.example else ""

    @property
    def spellings(self) -> tuple[str, ...]:
        """llama-server's spellings of this field's option (`-c`, `--ctx-size`); () for extra args."""
        spec = FIELD_BY_NAME.get(self.name)
        return spec.option.spellings if spec is not None else ()


def _f(name: str, default: str = "", choices: tuple[str, ...] = (), help: str = "", example: str = "") -> FormField:
    spec = FIELD_BY_NAME.get(name)
    label = spec.label if spec else name.replace("_", "-")
    kind = spec.kind if spec else "args"
    return FormField(name, label, kind, default, choices, help, example)


def _d(name: str) -> str:
    """llama-server's default for a field, from the option table, as placeholder text."""
    v = default(FIELD_BY_NAME[name].spelling)
    return format_float(v) if isinstance(v, float) and name != "spec_draft_p_min" else str(v)


#: Groups in the order shown; every Settings field appears exactly once.
GROUPS: tuple[tuple[str, tuple[FormField, ...]], ...] = (
    ("Model", (
        _f("model", help="GGUF file", example="~/models/x.gguf"),
        _f("hf_repo", help="Hugging Face repo: user/model[:quant]", example="user/model:Q4_K_M"),
        _f("ctx_size", "0 = trained", help="context size (tokens); 0 = the model's trained context"),
    )),
    ("Speculative", (
        _f("spec_type", "none", SPEC_TYPES, help="comma list; draft-mtp = MTP"),
        _f("spec_draft_n_max", _d("spec_draft_n_max")),
        _f("spec_draft_n_min", _d("spec_draft_n_min")),
        _f("spec_draft_p_min", _d("spec_draft_p_min")),
    )),
    ("KV cache", (
        _f("cache_type_k", _d("cache_type_k"), CACHE_TYPES),
        _f("cache_type_v", _d("cache_type_v"), CACHE_TYPES),
        _f("cache_type_k_draft", _d("cache_type_k_draft"), CACHE_TYPES, help="draft KV; does not follow -ctk"),
        _f("cache_type_v_draft", _d("cache_type_v_draft"), CACHE_TYPES),
        _f("flash_attn", _d("flash_attn"), FLASH_ATTN),
        _f("cache_ram", _d("cache_ram"), help="MiB of prompt cache in RAM"),
    )),
    ("Batching", (
        _f("batch_size", _d("batch_size")),
        _f("ubatch_size", _d("ubatch_size")),
        _f("parallel", "auto (4)", help="1 for honest MTP measurements"),
        _f("threads", "auto"),
        _f("threads_batch", "= threads", help="threads for prompt processing"),
    )),
    ("Fit and placement", (
        _f("fit", "on", ("on", "off")),
        _f("fit_target", _d("fit_target"), help="MiB kept free, one or one per device"),
        _f("fit_ctx", _d("fit_ctx")),
        _f("n_gpu_layers", _d("n_gpu_layers"), help="auto, all or N"),
        _f("split_mode", _d("split_mode"), SPLIT_MODES),
        _f("tensor_split", help="share of the model per device", example="1,1"),
        _f("main_gpu", _d("main_gpu")),
        _f("cpu_moe"),
        _f("n_cpu_moe", help="MoE layers whose experts stay in RAM", example="8"),
        _f("load_mode", _d("load_mode"), LOAD_MODES),
        _f("no_mmproj"),
        _f("rpc", help="ggml-rpc-server addresses, host:port,...", example="192.168.1.2:50052"),
    )),
    ("Server", (
        _f("host", "127.0.0.1"),
        _f("port", "a free port"),
        _f("api_key", "none (no key)"),
        _f("metrics"),
        _f("extra_args", help="more llama-server arguments, appended verbatim", example="--jinja"),
    )),
)

ALL_FIELDS: dict[str, FormField] = {f.name: f for _g, fields in GROUPS for f in fields}
BOOL_KINDS = frozenset({"flag", "negflag"})
SELECT_KINDS = frozenset({"choice", "onoff"})


def to_text(field: FormField, value: Any) -> str:
    """A Settings value as the form shows it ('' for "not given")."""
    if value is None:
        return ""
    if field.kind == "onoff":
        return "on" if value else "off"
    if field.kind == "args":
        return command_line(list(value))
    if isinstance(value, list):
        return ",".join(_num_text(v) for v in value)
    return _num_text(value)


def _num_text(v: Any) -> str:
    return format_float(v) if isinstance(v, float) else str(v)


def parse_text(field: FormField, text: str) -> tuple[Any, str | None]:
    """Text from an input -> (value, None), or (value, reason) when the text cannot be a value.

    Text that is not of the field's type gives (None, the core's field-named reason from
    `options.values.parse_value`); empty text means "not given" (the server's default).
    """
    s = text.strip()
    kind = field.kind
    if kind in BOOL_KINDS:
        return bool(s and s not in ("0", "false", "off")), None
    if kind == "args":
        try:
            return split_command(s) if s else [], None
        except ValueError as exc:
            return [], f"extra arguments cannot be split into words ({exc}); check the quotes"
    if s == "":
        if kind in ("spec", "list_int", "list_float", "list_str"):
            return [], None
        if field.name == "host":
            return "127.0.0.1", None
        return None, None
    spec = FIELD_BY_NAME[field.name]
    if kind == "spec":
        return [p.strip() for p in s.split(",") if p.strip()], None
    try:
        return parse_value(spec, s), None
    except BadValue as exc:
        return None, str(exc)
