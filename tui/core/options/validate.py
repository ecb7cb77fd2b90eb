"""Validation of a `Settings`: every rule that makes llama-server refuse, ignore or surprise.

Why here and not in the form: the same rules guard the TUI form, `profile import/export/check` and
the launcher, and each message names the option and says what to do. Severity `error` means the
server would refuse it (or mtp-tune cannot write it safely); `warning` means it runs, but probably
not as intended.
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Sequence
from typing import Literal

from tui.core.options.argv import settings_from_argv, settings_to_argv
from tui.core.options.fields import FIELD_BY_NAME, FIELDS, field_for_option
from tui.core.options.lookup import all_spellings, default, find_option
from tui.core.options import reader
from tui.core.options.reader import Occurrence, scan
from tui.core.options.problems import Problem, Severity, errors, label
from tui.core.options.removed import describe_removed, find_removed
from tui.core.options.rules import CACHE_TYPES, FLASH_ATTN, LOAD_MODES, MAX_DEVICES, SPEC_TYPES, SPLIT_MODES
from tui.core.options.settings import Settings
from tui.core.options.spec import FALSEY, TRUTHY, normalize_spelling
from tui.core.options.table import TABLE_BUILD
from tui.core.options.values import as_float, as_int, int32_problem, not_int, not_number, range_problem

__all__ = ["Problem", "Severity", "check_argv", "combine", "errors", "label", "validate", "value_errors"]

#: KV types that need no flash attention for V (llama-context.cpp:3843-3852).
UNQUANTIZED_KV: frozenset[str] = frozenset({"f32", "f16", "bf16"})
FA_VALUES: frozenset[str] = frozenset(FLASH_ATTN) | TRUTHY | FALSEY | {"-1"}
FA_OFF: frozenset[str] = FALSEY


def _is_loopback(host: str) -> bool:
    h = host.strip().strip("[]")
    if h.endswith(".sock") or h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False  # a name: may resolve to anything


def _check_numbers(s: Settings, out: list[Problem]) -> dict[str, int | None]:
    """Whole-number fields against their type and the table's range; returns the valid values."""
    parsed: dict[str, int | None] = {}
    for spec in FIELDS:
        if spec.kind != "int":
            continue
        field = spec.field
        v = as_int(getattr(s, field))
        if isinstance(v, str):
            out.append(Problem(field, "error", not_int(field, v)))
            continue
        if v is not None and (msg := range_problem(spec.label, spec.option.rule, v)):
            out.append(Problem(field, "error", msg))
            continue
        parsed[field] = v
    if parsed.get("parallel") == 0:
        out.append(Problem("parallel", "error", "parallel: 0 is rejected by llama-server; use -1 (auto) or 1 or more."))
    for field in ("threads", "threads_batch"):
        if parsed.get(field) == 0:
            out.append(Problem(field, "error", f"{label(field)}: 0 threads cannot run; use -1 or 1 or more."))
    return parsed


def _check_floats(s: Settings, out: list[Problem]) -> None:
    p_min = FIELD_BY_NAME["spec_draft_p_min"]
    v = as_float(s.spec_draft_p_min)
    if isinstance(v, str):
        out.append(Problem("spec_draft_p_min", "error", not_number("spec_draft_p_min", v)))
    elif v is not None and (msg := range_problem(p_min.label, p_min.option.rule, v)):
        out.append(Problem("spec_draft_p_min", "error", msg))
    lists = (
        ("tensor_split", as_float, "a number; use proportions like 3,1", "proportions must be 0 or more"),
        ("fit_target", as_int, "a whole number of MiB", "it is the MiB to keep free per device"),
    )
    for field, conv, what, why in lists:
        if len(getattr(s, field)) >= MAX_DEVICES:  # arg.cpp:2843, 2909: "got N input configs, but system only has 16 devices"
            out.append(Problem(field, "error", f"{label(field)}: {len(getattr(s, field))} entries; llama-server takes at most {MAX_DEVICES - 1} (one per device) and refuses more."))
            continue
        for i, x in enumerate(getattr(s, field)):
            v = conv(x)
            if isinstance(v, str):
                out.append(Problem(field, "error", f"{label(field)}: entry {i + 1} ({v!r}) is not {what}."))
            elif v is not None and v < 0:
                out.append(Problem(field, "error", f"{label(field)}: entry {i + 1} ({v:g}) is negative; {why}."))


def _check_choices(s: Settings, out: list[Problem]) -> None:
    for field in ("cache_type_k", "cache_type_v", "cache_type_k_draft", "cache_type_v_draft"):
        v = getattr(s, field)
        if v is not None and v not in CACHE_TYPES:
            out.append(Problem(field, "error", f"{label(field)}: unknown cache type {v!r}; llama-server accepts {', '.join(CACHE_TYPES)}."))
    checks = (
        ("flash_attn", FA_VALUES, "on, off or auto"),
        ("split_mode", frozenset(SPLIT_MODES), ", ".join(SPLIT_MODES)),
        ("load_mode", frozenset(LOAD_MODES), ", ".join(LOAD_MODES)),
    )
    for field, allowed, words in checks:
        v = getattr(s, field)
        if v is not None and v not in allowed:
            out.append(Problem(field, "error", f"{label(field)}: {v!r} is not one of {words}."))
    if s.fit is not None and not isinstance(s.fit, bool):
        if str(s.fit) not in TRUTHY | FALSEY:
            out.append(Problem("fit", "error", f"fit: {s.fit!r} is not on or off."))
    ngl = s.n_gpu_layers
    if ngl is not None and str(ngl) not in ("auto", "all"):
        if isinstance(as_int(ngl), str):
            out.append(Problem("n_gpu_layers", "error", f"gpu-layers: {ngl!r} is not auto, all or a whole number of layers."))
        elif (msg := int32_problem("gpu-layers", int(str(ngl)))) is not None:
            out.append(Problem("n_gpu_layers", "error", msg))
        elif int(str(ngl)) < -2:
            out.append(Problem("n_gpu_layers", "warning", f"gpu-layers: {ngl} is negative, which llama-server treats as all layers; write all."))


def _check_spec_types(s: Settings, out: list[Problem]) -> None:
    for t in s.spec_type:
        if t not in SPEC_TYPES:
            hint = " (use draft-mtp)" if t == "mtp" else ""
            out.append(Problem("spec_type", "error", f"spec-type: unknown speculative type {t!r}{hint}; known: {', '.join(SPEC_TYPES)}."))
    if "none" in s.spec_type and len(s.spec_type) > 1:
        out.append(Problem("spec_type", "warning", "spec-type: a list containing none switches every type in it off (llama-server keeps only none); remove none to enable the others."))
    dupes = sorted({t for t in s.spec_type if s.spec_type.count(t) > 1})
    if dupes:
        out.append(Problem("spec_type", "warning", f"spec-type: {', '.join(dupes)} listed more than once."))


def _check_alone(s: Settings, out: list[Problem]) -> dict[str, int | None]:
    """The rules about each field alone (type, range, values llama-server refuses outright); the
    valid whole numbers. A value failing one of these fails whatever the other fields hold."""
    numbers = _check_numbers(s, out)
    _check_floats(s, out)
    _check_choices(s, out)
    _check_spec_types(s, out)
    if len(s.rpc) > MAX_DEVICES:
        out.append(Problem("rpc", "error", f"rpc: {len(s.rpc)} servers; llama-server drives at most {MAX_DEVICES} devices (GPUs and RPC servers together)."))
    return numbers


def _check_spec(s: Settings, n: dict[str, int | None], out: list[Problem]) -> None:
    n_max = n.get("spec_draft_n_max")
    n_min = n.get("spec_draft_n_min")
    eff_max = default("--spec-draft-n-max") if n_max is None else n_max
    eff_min = default("--spec-draft-n-min") if n_min is None else n_min
    if "spec_draft_n_max" in n and "spec_draft_n_min" in n and eff_min > eff_max:  # type: ignore[operator]
        out.append(Problem("spec_draft_n_min", "error", f"spec-draft-n-min ({eff_min}) is greater than spec-draft-n-max ({eff_max}); lower n-min or raise n-max."))
    if n_max is not None and "batch_size" in n:
        # a draft and the token it follows are verified in one batch: the server caps the outputs per
        # sequence at n_batch (speculative.cpp:2669), so a longer draft is never checked, only allocated.
        b = default("--batch-size") if n["batch_size"] is None else n["batch_size"]
        if n_max > b - 1:  # type: ignore[operator]
            out.append(Problem("spec_draft_n_max", "error", f"spec-draft-n-max: {n_max} is above {b - 1}; it must be between 0 and {b - 1} (0..batch-size - 1: a draft and the token before it are verified in one batch of batch-size {b})."))  # type: ignore[operator]


def _check_batches(n: dict[str, int | None], out: list[Problem]) -> None:
    if "batch_size" not in n or n.get("ubatch_size") is None:
        return  # not a number (already reported), or ubatch left to the server (it follows batch)
    b = default("--batch-size") if n["batch_size"] is None else n["batch_size"]
    ub = n["ubatch_size"]
    if ub > b:
        out.append(Problem("ubatch_size", "error", f"ubatch-size ({ub}) is larger than batch-size ({b}); llama-server would cut the micro-batch to {b}. Lower ubatch-size or raise batch-size."))


def _check_kv_fa(s: Settings, out: list[Problem]) -> None:
    if s.flash_attn is None or str(s.flash_attn) not in FA_OFF:
        return
    for field in ("cache_type_v", "cache_type_v_draft"):
        v = getattr(s, field)
        if v is not None and v in CACHE_TYPES and v not in UNQUANTIZED_KV:
            out.append(Problem(field, "error", f"{label(field)}: a quantized V cache ({v}) needs flash attention, but flash-attn is off; set flash-attn to on or auto, or use f16."))


def _check_devices(s: Settings, n: dict[str, int | None], device_count: int | None, out: list[Problem]) -> None:
    if device_count is None:
        return
    if device_count > MAX_DEVICES:
        out.append(Problem("rpc", "error", f"{device_count} devices; llama-server drives at most {MAX_DEVICES} (GPUs and RPC servers together): use fewer --rpc servers or hide GPUs with CUDA_VISIBLE_DEVICES."))
    ts = len(s.tensor_split)
    if ts > device_count:
        out.append(Problem("tensor_split", "error", f"tensor-split has {ts} entries but only {device_count} device(s) are present; give one proportion per device."))
    elif 0 < ts < device_count:
        out.append(Problem("tensor_split", "warning", f"tensor-split has {ts} entries for {device_count} devices; the remaining devices get no layers."))
    ft = len(s.fit_target)
    if ft > 1 and ft > device_count:
        out.append(Problem("fit_target", "error", f"fit-target has {ft} values but only {device_count} device(s) are present; give one value, or one per device."))
    elif 1 < ft < device_count:
        out.append(Problem("fit_target", "warning", f"fit-target has {ft} values for {device_count} devices; the others keep the default {default('--fit-target')} MiB margin."))
    mg = n.get("main_gpu")
    if mg is not None and device_count > 0 and mg >= device_count:
        out.append(Problem("main_gpu", "error", f"main-gpu {mg} does not exist; devices are numbered 0 to {device_count - 1}."))


def _check_text(s: Settings, target: str, out: list[Problem]) -> None:
    sev: Severity = "error" if target == "ini" else "warning"
    for name in ("model", "hf_repo", "host", "api_key", "flash_attn", "n_gpu_layers", "load_mode", "split_mode"):
        v = getattr(s, name)
        if not isinstance(v, str):
            continue
        shown = "the API key" if name == "api_key" else repr(v)
        if "\n" in v or "\r" in v:
            out.append(Problem(name, "error", f"{label(name)}: {shown} contains a line break; remove it."))
        for ch in (";", "#"):
            if ch in v:
                out.append(Problem(name, sev, f"{label(name)}: {shown} contains {ch!r}, where llama-server cuts preset values; it cannot be written to a --models-preset file. Rename the file or pass it on the command line."))
                break
    for v in [*s.rpc, *s.extra_args, *s.spec_type]:
        if any(ch in str(v) for ch in ";#"):
            field = "rpc" if v in s.rpc else "extra_args" if v in s.extra_args else "spec_type"
            out.append(Problem(field, sev, f"{label(field)}: {v!r} contains ';' or '#', where llama-server cuts preset values; it cannot be written to a --models-preset file."))


def _check_model(s: Settings, out: list[Problem]) -> None:
    """llama-server b11434 (tools/server/server.cpp) starts in router mode when the model path and
    -hf are empty, checked before a `-mu` URL fills in its default path: `-mu` alone loads nothing."""
    url = reader.value([str(a) for a in s.extra_args], "--model-url")
    if not s.model and not s.hf_repo and not url:
        out.append(Problem("model", "error", "model: give a GGUF path, an hf reference (user/model[:quant]) or a model URL (-mu) with -m PATH; without one llama-server starts in router mode."))
    elif url and not s.model and not s.hf_repo:
        out.append(Problem("model", "warning", "model: a model URL (-mu) alone starts llama-server in router mode, which downloads and loads nothing; give -m PATH, the file to download it to (it is planned from the URL either way)."))
    elif s.model and s.hf_repo:
        out.append(Problem("hf_repo", "warning", "hf-repo and model are both set; llama-server loads the hf reference (from its Hub cache) and ignores the model path. Clear one of them."))


def _check_host(s: Settings, out: list[Problem]) -> None:
    hosts = [h for h in str(s.host or "").split(",") if h.strip()]
    exposed = [h for h in hosts if not _is_loopback(h)]
    if exposed and not s.api_key:
        out.append(Problem("host", "warning", f"host {', '.join(exposed)} listens beyond this machine without an API key: anyone on the network can use the server. Set api-key or use 127.0.0.1."))
    if s.api_key and "," in s.api_key:
        out.append(Problem("api_key", "warning", "api-key contains ',': llama-server splits it into several keys."))


def _nearest(spelled: str) -> str:
    """` (did you mean -ctk, i.e. --cache-type-k?)` for a spelling close to a known one (`--ctk`), else ""."""
    near = difflib.get_close_matches(spelled, sorted(all_spellings()), n=1, cutoff=0.7)
    if not near:
        return ""
    canonical = find_option(near[0]).canonical  # type: ignore[union-attr]  # a spelling of the table
    return f" (did you mean {near[0]}" + (f", i.e. {canonical}" if canonical != near[0] else "") + "?)"


def _check_flags(s: Settings, accepted: frozenset[str] | None, unknown: Severity, out: list[Problem]) -> None:
    """Removed or unknown options among the emitted flags and the extra arguments (read by `reader.scan`)."""
    fields = [(t.spelling, _field_of(t.spelling)) for t in scan(settings_to_argv(s, include_extra=False))
              if isinstance(t, Occurrence)]
    extra = scan([str(a) for a in s.extra_args])
    extra_flags = [t.spelling if isinstance(t, Occurrence) else t for t in extra
                   if isinstance(t, Occurrence) or (t.startswith("-") and len(t) > 1 and not _is_number(t))]
    for flag, field in [*fields, *((f, "extra_args") for f in extra_flags)]:
        spelled = normalize_spelling(flag.split("=", 1)[0])
        removed = find_removed(spelled)
        if removed:
            out.append(Problem(field, "error", describe_removed(spelled, removed) + "."))
            continue
        if accepted is not None:
            if spelled not in accepted:
                out.append(Problem(field, "error", f"{spelled} is not accepted by this build of llama-server; update llama-server or remove it."))
            continue
        if find_option(spelled) is None:
            then = ("the server will refuse to start if it does not know it either" if unknown == "warning"
                    else "llama-server refuses to start with an option it does not know")
            out.append(Problem(field, unknown, f"{spelled}: not an option of llama-server {TABLE_BUILD}{_nearest(spelled)}; "
                               f"{then}.", option=spelled))
    seen_fields = {find_option(f) for f, _ in fields}
    for t in extra:
        if isinstance(t, Occurrence) and t.option in seen_fields and not t.option.repeatable:
            out.append(Problem("extra_args", "warning", f"extra arguments repeat {t.spelling}, which a form field already sets; the later value (the extra one) wins."))


def _check_extra_values(s: Settings, out: list[Problem]) -> None:
    """Numbers given in the extra arguments against the table's type and range (`--spec-ngram-mod-n-min`)."""
    for t in scan([str(a) for a in s.extra_args]):
        if not isinstance(t, Occurrence) or t.value is None or t.option.rule is None:
            continue
        r, name = t.option.rule, t.option.canonical.lstrip("-")
        if r.type not in ("int", "float"):
            continue
        v = as_int(t.value) if r.type == "int" else as_float(t.value)
        if isinstance(v, str):
            what = "a whole number" if r.type == "int" else "a number"
            out.append(Problem("extra_args", "error", f"{name}: {v!r} is not {what}."))
        elif v is not None and (msg := range_problem(name, r, v)):
            out.append(Problem("extra_args", "error", msg))


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _field_of(flag: str) -> str:
    opt = find_option(flag)
    spec = field_for_option(opt) if opt else None
    return spec.field if spec else "extra_args"


def validate(
    settings: Settings,
    accepted: frozenset[str] | None = None,
    device_count: int | None = None,
    *,
    target: Literal["argv", "ini"] = "argv",
    require_model: bool = True,
    unknown: Severity = "warning",
) -> list[Problem]:
    """Every problem in `settings`, errors first.

    `accepted`: option spellings the installed server knows (`server.binary.parse_help`); None
    checks against the b11434 table only. `device_count`: GPUs (or RPC devices) present; None skips
    the per-device rules. `target="ini"` turns values a preset file would truncate into errors.
    `unknown`: how an option the table does not know counts when `accepted` is None. The form keeps
    it a warning (shown beside the field, and a newer server may know it); a command line makes it
    an error, since a typo such as `--ctk q9` would otherwise plan or launch something else than
    what was typed, with no one to read a warning first.
    """
    out: list[Problem] = []
    numbers = _check_alone(settings, out)
    _check_spec(settings, numbers, out)
    _check_batches(numbers, out)
    _check_kv_fa(settings, out)
    _check_devices(settings, numbers, device_count, out)
    _check_text(settings, target, out)
    if require_model:
        _check_model(settings, out)
    _check_host(settings, out)
    _check_flags(settings, accepted, unknown, out)
    _check_extra_values(settings, out)
    if settings.split_mode == "tensor" and settings.fit is not False:
        out.append(Problem("split_mode", "warning", "split-mode tensor is experimental and --fit cannot plan it; set fit to off and size the context yourself."))
    if settings.cpu_moe and settings.n_cpu_moe is not None:
        out.append(Problem("n_cpu_moe", "warning", "cpu-moe already keeps every expert on the CPU; n-cpu-moe has no extra effect."))
    return sorted(out, key=lambda p: p.severity != "error")


def value_errors(settings: Settings) -> list[Problem]:
    """The errors of each set value on its own: not of its field's type, outside llama-server's range
    (32-bit whole numbers included), or a value it refuses outright (ubatch 0, parallel 0, an unknown
    cache type, a number in the extra arguments out of range).

    Why apart from `validate`: such a value can never launch, so a sweep `--axis` or a loaded profile
    refuses it at once, with `validate`'s own wording; rules between fields (ubatch <= batch) wait
    until every field is known.
    """
    out: list[Problem] = []
    _check_alone(settings, out)
    _check_extra_values(settings, out)
    return errors(out)


def check_argv(
    args: Sequence[str],
    *,
    base: Settings | None = None,
    env: dict[str, str] | None = None,
    accepted: frozenset[str] | None = None,
    device_count: int | None = None,
    require_model: bool = True,
    unknown: Severity = "warning",
) -> tuple[Settings, list[Problem]]:
    """The one check every command runs on llama-server arguments before anything starts.

    Reads `args` as llama-server would (`argv.settings_from_argv`), then validates the result; the
    problems of both steps, errors first. A caller refuses to go on when `errors(problems)` is not
    empty (the CLI exits 2), so a bad value never reaches the planner or a server. `unknown` as
    for `validate`.
    """
    imp = settings_from_argv(list(args), base=base, env=env)
    validated = validate(imp.settings, accepted, device_count, require_model=require_model, unknown=unknown)
    return imp.settings, combine(imp.problems, validated)


def combine(imported: Sequence[Problem], validated: Sequence[Problem]) -> list[Problem]:
    """The problems of reading a command line and of validating what it gave, each finding once,
    errors first: an unknown option both steps name is reported by the validator alone (its
    severity is the one that counts), and a message repeated word for word is shown once."""
    named = {p.option for p in validated if p.option}
    seen: set[tuple[str, str, str]] = set()
    out: list[Problem] = []
    for p in [*(p for p in imported if p.option is None or p.option not in named), *validated]:
        key = (p.field, p.severity, p.message)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return sorted(out, key=lambda p: p.severity != "error")
