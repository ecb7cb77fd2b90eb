"""Settings <-> preset sections: what the router passes a model, and what mtp-tune writes."""

from __future__ import annotations

from dataclasses import replace

from tui.core.options.values import BadValue, format_value, parse_value
from tui.core.options import (
    FALSEY,
    FIELDS,
    RemovedOption,
    TABLE_BUILD,
    ServerOption,
    field_for_option,
    find_option,
    find_removed,
)
from tui.core.options.redact import without_secrets
from tui.core.options.removed import replacement_value
from tui.core.options.settings import Settings
from tui.core.options.validate import Problem
from tui.core.presets.types import (
    GLOBAL_SECTION,
    PRESET_ONLY_KEYS,
    RESERVED_ENV,
    IniEntry,
    IniWriteError,
    PresetFile,
    bool_value,
    canonical_name,
)


def render_args(pf: PresetFile, name: str) -> list[str]:
    """The arguments the router gives model `name` (without the binary and without the
    host/port/alias/log-colors it injects), in the router's order (common_preset::to_args)."""
    sec = pf.model(name)
    if sec is None:
        raise KeyError(name)
    out: list[str] = []
    eff = pf.effective_options(sec)
    for opt in sorted(eff, key=lambda o: o.args[0].encode()):
        if opt.preset_only or opt.env in ("LLAMA_ARG_HOST", "LLAMA_ARG_PORT", "LLAMA_ARG_ALIAS", "LLAMA_ARG_LOG_COLORS"):
            continue
        if opt.env in RESERVED_ENV:
            continue  # unset by the router
        value = bool_value(eff[opt])
        if opt.takes_value:
            out += [opt.args[-1], value]
        elif value in FALSEY:
            if opt.neg:
                out.append(opt.neg[-1])
        else:
            out.append(opt.args[-1])
    return out


# --------------------------------------------------------------------------- settings <-> section


def settings_from_options(
    options: dict[ServerOption, IniEntry], base: Settings | None = None
) -> tuple[Settings, dict[str, str], list[Problem]]:
    """Settings from one section's effective options, plus the preset-only keys and notes.

    Options without a Settings field become `extra_args` (canonical spelling); host/port/api-key are
    skipped because the router overrides them.
    """
    s = base if base is not None else Settings(metrics=False)
    s = replace(s, spec_type=list(s.spec_type), extra_args=list(s.extra_args))
    preset_only: dict[str, str] = {}
    notes: list[Problem] = []
    for opt, e in sorted(options.items(), key=lambda kv: kv[1].line):
        value = bool_value(e)
        removed = _removed_of(opt)
        if removed is not None:
            _translate_removed(s, e, removed, notes)
            continue
        if opt.preset_only:
            preset_only[opt.ini_key] = value
            continue
        spec = field_for_option(opt)
        if spec is not None and not spec.ini:
            notes.append(Problem(spec.field, "warning", f"{e.key} (line {e.line}) is ignored: {RESERVED_ENV.get(opt.env or '', 'not used in presets')}."))
            continue
        if spec is None:
            if opt.takes_value:
                s.extra_args += [opt.canonical, value]
            elif opt.neg:
                s.extra_args.append(opt.canonical if value not in FALSEY else str(opt.canonical_neg))
            elif value not in FALSEY:
                s.extra_args.append(opt.canonical)
            continue
        if spec.kind == "flag":
            setattr(s, spec.field, value not in FALSEY)
        elif spec.kind == "negflag":
            # the option is the positive form (e.g. mmproj-auto); no_mmproj is its negation
            setattr(s, spec.field, value in FALSEY)
        else:
            try:
                setattr(s, spec.field, parse_value(spec, value))
            except BadValue as exc:
                notes.append(Problem(spec.field, "error", f"{exc} ({e.key} = {value!r}, line {e.line}; not imported)"))
    return s, preset_only, notes


def _removed_of(opt: ServerOption) -> RemovedOption | None:
    return next((r for sp in opt.spellings if (r := find_removed(sp)) is not None), None)


def _translate_removed(s: Settings, e: IniEntry, removed: RemovedOption, notes: list[Problem]) -> None:
    """Import a removed key as its replacement (`mmap = 1` -> load-mode mmap), with a note."""
    if removed.field is None:
        notes.append(Problem("extra_args", "error", f"{e.key} (line {e.line}) was removed from llama-server and has no direct replacement; use {removed.replacement}. It was not imported."))
        return
    if removed.takes_value:
        value: str | None = e.value
    else:
        value = replacement_value(removed, e.value)
        if value == "mlock" and s.load_mode == "mmap" or value == "mmap" and s.load_mode == "mlock":
            value = "mmap+mlock"
    if value is None:
        return
    spec = next(f for f in FIELDS if f.field == removed.field)
    try:
        setattr(s, removed.field, parse_value(spec, value))
    except BadValue as exc:
        notes.append(Problem(removed.field, "error", f"{exc} ({e.key} = {value!r}, line {e.line}; not imported)"))
        return
    notes.append(Problem(removed.field, "warning", f"{e.key} = {e.value} (line {e.line}) was removed from llama-server; imported as {spec.label} = {value}."))


def settings_from_section(pf: PresetFile, name: str, *, cascade: bool = True) -> tuple[Settings, dict[str, str], list[Problem]]:
    """Settings of model `name` (section name or its canonical name), with `[*]` cascaded.

    Removed keys the server would refuse (`mmap`, `no-mmap`, `mlock`, `draft-max`, ...) are imported
    as their replacements, each with a note, so an old guide's preset becomes a valid profile.
    """
    sec = pf.model(name)
    if sec is None:
        known = ", ".join(s.name for s in pf.models) or "none"
        raise KeyError(f"no model section [{name}] in {pf.path or 'the preset'} (models: {known}).")
    eff = pf.effective_options(sec) if cascade else sec.options()
    settings, preset_only, notes = settings_from_options(eff)
    sources = ([pf.global_section] if cascade and pf.global_section else []) + [sec]
    stale: dict[str, IniEntry] = {}
    for src in sources:
        for e in src.entries:
            if e.option is None and find_removed(e.key) is not None:
                stale[e.key] = e
    for e in stale.values():  # [*] first, then the section
        removed = find_removed(e.key)
        assert removed is not None
        _translate_removed(settings, e, removed, notes)
    return settings, preset_only, notes


def _check_value(key: str, value: str, section: str) -> None:
    where = f"[{section}] {key}"
    if value == "":
        raise IniWriteError(f"{where}: an empty value cannot be written; clear the field instead.")
    if ";" in value or "#" in value:
        raise IniWriteError(f"{where} = {value!r}: llama-server cuts preset values at ';' and '#', so this value cannot be written to a preset. Rename the path or pass the option on the command line.")
    if "\n" in value or "\r" in value:
        raise IniWriteError(f"{where}: the value contains a line break, which a preset cannot hold.")
    if value != value.strip(" \t"):
        raise IniWriteError(f"{where} = {value!r}: leading or trailing blanks would be dropped by llama-server; remove them.")


def _extra_entries(extra: list[str], section: str) -> list[tuple[ServerOption, str]]:
    out: list[tuple[ServerOption, str]] = []
    i = 0
    while i < len(extra):
        tok = str(extra[i])
        i += 1
        spelling = tok.split("=", 1)[0] if tok.startswith("--") else tok
        removed = find_removed(spelling)
        if removed is not None:
            raise IniWriteError(f"[{section}]: extra argument {spelling} was removed from llama-server; use {removed.replacement} instead.")
        opt = find_option(spelling)
        if opt is None:
            raise IniWriteError(f"[{section}]: extra argument {tok!r} is not a llama-server {TABLE_BUILD} option, and a preset with an unknown key is refused by the router. Remove it from the extra arguments.")
        if opt.takes_value:
            if "=" in tok and tok.startswith("--"):
                value = tok.split("=", 1)[1]
            elif i < len(extra):
                value = str(extra[i])
                i += 1
            else:
                raise IniWriteError(f"[{section}]: extra argument {spelling} has no value.")
        elif opt.neg and opt.is_negative(spelling):
            value = "false"
        else:
            value = "true"
        if any(o is opt for o, _ in out):
            raise IniWriteError(f"[{section}]: extra argument {spelling} appears twice, but a preset section holds one value per option. Join the values with ',' where the option allows it.")
        out.append((opt, value))
    return out


def settings_to_entries(settings: Settings, section: str = "model", preset_only: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """`key = value` pairs for one preset section; raises IniWriteError for anything unwritable.

    host, port and api-key are never written (the router forces or strips them), nor any secret in
    `extra_args` (a preset is a plain file: the router's HF_TOKEN carries a Hugging Face token).
    """
    extra = _extra_entries(without_secrets(settings.extra_args), section)
    extra_opts = {o for o, _ in extra}
    out: list[tuple[str, str]] = []
    for spec in FIELDS:
        if not spec.ini or spec.option in extra_opts:
            continue
        text = format_value(spec, getattr(settings, spec.field))
        if text is None:
            continue
        value = "true" if spec.kind in ("flag", "negflag") else text
        out.append((spec.option.ini_key if spec.kind != "negflag" else spec.label, value))
    out += [(o.ini_key, v) for o, v in extra]
    for key, value in (preset_only or {}).items():
        if key not in PRESET_ONLY_KEYS:
            raise IniWriteError(f"[{section}]: {key!r} is not a preset-only key ({', '.join(PRESET_ONLY_KEYS)}).")
        out.append((key, str(value)))
    for key, value in out:
        _check_value(key, value, section)
    return out


def section_text(name: str, entries: list[tuple[str, str]], newline: str = "\n") -> str:
    """The text of one section: header plus `key = value` lines."""
    _check_section_name(name)
    return f"[{name}]{newline}" + "".join(f"{k} = {v}{newline}" for k, v in entries)


def _check_section_name(name: str) -> None:
    if not name or name != name.strip() or any(c in name for c in "]\r\n;#") or name[0] in "[":
        raise IniWriteError(f"section name {name!r} cannot be written: use letters, digits, '-', '_', '.', '/' (no blanks at the ends, no ']', ';', '#').")
    if name == GLOBAL_SECTION:
        raise IniWriteError("[*] holds options for every model; export a model under its own section name.")
    if canonical_name(name) != name:
        raise IniWriteError(f"llama-server would rename section [{name}] to [{canonical_name(name)}]; use that name (or one without ':').")


def settings_to_ini(name: str, settings: Settings, preset_only: dict[str, str] | None = None) -> str:
    """A complete preset file holding one model (with `version = 1`)."""
    return "version = 1\n\n" + section_text(name, settings_to_entries(settings, name, preset_only))
