"""The findings on a parsed preset: value cuts, unknown and removed keys, router limits, field values."""

from __future__ import annotations

import difflib
import re

from tui.core.options import (
    FALSEY,
    TABLE_BUILD,
    TRUTHY,
    ServerOption,
    all_ini_keys,
    field_for_option,
    find_removed,
    option_for_ini_key,
)
from tui.core.options.validate import validate
from tui.core.presets.types import (
    DEFAULT_SECTION,
    GLOBAL_SECTION,
    RESERVED_ENV,
    IniEntry,
    IniProblem,
    IniSection,
    PresetFile,
    canonical_name,
)
from tui.core.presets.convert import settings_from_options, _removed_of


def _check_lines(pf: PresetFile) -> None:
    """Value cuts, section-name surprises and stray keys before any header."""
    add = pf.problems.append
    current: str = DEFAULT_SECTION
    for u in pf.lines:
        if u.kind == "header":
            current = u.name or ""
            name = current
            if "\n" in name or "\r" in name:
                end_line = u.line + len(re.findall(r"\r\n|\n|\r", name))
                add(IniProblem(u.line, name, None, "error", f"the header on line {u.line} has no ']' on its line; llama-server takes everything up to the ']' on line {end_line} as the section name. Close the header on its own line."))
            elif name != name.rstrip():
                add(IniProblem(u.line, name, None, "warning", f"section name {name!r} ends with blanks, which llama-server keeps; requests must use the name with the blanks. Remove them."))
            canon = canonical_name(name)
            if canon != name:
                add(IniProblem(u.line, name, None, "warning", f"llama-server renames [{name}] to {canon!r} (tags after ':' are upper-cased and lose a 'PREFIX-'); requests must use {canon!r}. Prefer names without ':'."))
        elif u.kind == "kv":
            assert u.key is not None and u.value is not None
            cut = u.after.lstrip(" \t")
            if cut[:1] in (";", "#"):
                mid_word = not u.after[:1].isspace() and u.value != ""
                unbalanced = u.value.count('"') % 2 == 1 or u.value.count("'") % 2 == 1 or u.value.count("{") > u.value.count("}")
                if mid_word or unbalanced:
                    add(IniProblem(u.line, current, u.key, "warning", f"the value of {u.key} is cut at {cut[0]!r}: llama-server reads {u.value!r} and drops {cut.rstrip(chr(10) + chr(13))!r}. A preset value cannot contain ';' or '#'."))
            if u.value == "" and u.key != "version":
                add(IniProblem(u.line, current, u.key, "warning", f"{u.key} has an empty value; llama-server passes it on as an empty argument. Give a value or delete the line."))
            v = u.value
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
                add(IniProblem(u.line, current, u.key, "warning", f"the value of {u.key} is quoted; llama-server keeps the quotes as part of the value. Remove them."))


def _unknown_key_message(key: str, section: str, accepted: frozenset[str] | None) -> tuple[str, bool]:
    """Message for a key the server does not know, and whether it fails the file."""
    base = f"option '{key}' not recognized in preset '{section}' (llama-server refuses the file)"
    removed = find_removed(key)
    if removed is not None:
        return f"{base}: {key} was removed; use {removed.replacement.replace('--', '')} instead.", True
    if "_" in key and option_for_ini_key(key.replace("_", "-")) is not None:
        return f"{base}: preset keys are matched literally; write {key.replace('_', '-')!r}.", True
    close = difflib.get_close_matches(key, [k for k in all_ini_keys() if not k.startswith("LLAMA_") and not k.startswith("__")], n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"{base}.{hint}", True


def _check_sections(pf: PresetFile, accepted: frozenset[str] | None) -> None:
    add = pf.problems.append
    for sec in pf.sections.values():
        sname = sec.name
        seen_keys: dict[str, IniEntry] = {}
        for e in sec.entries:
            if e.key == "version":
                continue
            if e.key in seen_keys:
                add(IniProblem(e.line, sname, e.key, "warning", f"{e.key} is set again (first on line {seen_keys[e.key].line}); the last value wins."))
            seen_keys[e.key] = e
            if e.option is None:
                if accepted is not None and (f"--{e.key}" in accepted or f"-{e.key}" in accepted):
                    add(IniProblem(e.line, sname, e.key, "warning", f"{e.key} is accepted by the installed llama-server but unknown to mtp-tune ({TABLE_BUILD}); it is kept but not checked."))
                    continue
                msg, rejects = _unknown_key_message(e.key, sname, accepted)
                add(IniProblem(e.line, sname, e.key, "error", msg, rejects))
                continue
            opt = e.option
            removed = next((find_removed(sp) for sp in opt.spellings if find_removed(sp)), None)
            if removed is not None:
                add(IniProblem(e.line, sname, e.key, "error", f"{e.key} still loads but was removed: the model fails to start (\"the argument has been removed\"). Use {removed.replacement.replace('--', '')} instead."))
                continue
            if accepted is not None and not opt.preset_only and not any(sp in accepted for sp in opt.spellings):
                add(IniProblem(e.line, sname, e.key, "error", f"{e.key}: the installed llama-server does not accept this option; update llama-server or remove the line."))
            if opt.env in RESERVED_ENV:
                add(IniProblem(e.line, sname, e.key, "warning", f"{e.key} is {RESERVED_ENV[opt.env]}; it has no effect in a preset."))
            if not opt.takes_value and e.value not in TRUTHY | FALSEY and e.value != "":
                add(IniProblem(e.line, sname, e.key, "warning", f"{e.key} is a flag; {e.value!r} is not true/false/on/off/1/0, so llama-server treats it as true."))
            if opt.neg and opt.is_negative(e.key) is False and e.key.startswith("LLAMA_ARG_NO_"):
                add(IniProblem(e.line, sname, e.key, "warning", f"{e.key}: llama-server does not invert LLAMA_ARG_NO_* keys in presets, so a true value turns the option ON. Use the {opt.canonical_neg and opt.canonical_neg.lstrip('-')} key instead."))
            _check_preset_only(e, sname, add)
        # two spellings of one option in this section
        by_opt: dict[ServerOption, list[IniEntry]] = {}
        last_by_key = {e.key: e for e in sec.entries if e.option is not None and e.key != "version"}
        for e in last_by_key.values():
            by_opt.setdefault(e.option, []).append(e)  # type: ignore[arg-type]
        for opt, es in by_opt.items():
            if len(es) > 1:
                winner = max(es, key=lambda x: x.key)
                others = ", ".join(f"{x.key} (line {x.line})" for x in es if x is not winner)
                add(IniProblem(winner.line, sname, winner.key, "warning", f"{others} and {winner.key} set the same option; llama-server applies keys alphabetically, so {winner.key} = {winner.value!r} wins. Keep one."))


def _check_preset_only(e: IniEntry, section: str, add: object) -> None:
    assert callable(add)
    if e.key == "stop-timeout" or (e.option and e.option.env == "__PRESET_STOP_TIMEOUT"):
        try:
            int(e.value.strip())
        except ValueError:
            add(IniProblem(e.line, section, e.key, "error", f"stop-timeout {e.value!r} is not a whole number of seconds."))
    elif e.option and e.option.env == "__PRESET_LOAD_ON_STARTUP" and e.value not in TRUTHY | FALSEY:
        add(IniProblem(e.line, section, e.key, "warning", f"load-on-startup {e.value!r} is neither true nor false; llama-server treats it as false."))
    elif e.option and e.option.env == "__PRESET_DEDUP_CACHE_MODELS" and e.value not in ("0", "1"):
        add(IniProblem(e.line, section, e.key, "warning", f"dedup-cache-models should be 0 or 1, not {e.value!r}."))


def _check_router(pf: PresetFile, models_max: int) -> None:
    """What the router checks when it builds the model list, plus value checks per model."""
    add = pf.problems.append
    g = pf.global_section
    if g is not None:
        for e in g.entries:
            if e.option is not None and e.option.env in ("LLAMA_ARG_MODEL", "LLAMA_ARG_HF_REPO"):
                add(IniProblem(e.line, GLOBAL_SECTION, e.key, "warning", f"{e.key} in [*] applies to every model that does not set its own."))
    default = pf.sections.get(DEFAULT_SECTION)
    if default is not None and default.line is None and default.options():
        first = min(e.line for e in default.entries if e.option is not None)
        add(IniProblem(first, DEFAULT_SECTION, None, "warning", "keys before the first [section] form a model named 'default'; move them into [*] (for every model) or into a named section."))
    names: dict[str, str] = {}  # name or alias -> owning model
    on_startup: list[str] = []
    global_alias = next((e for o, e in (g.options() if g else {}).items() if o.env == "LLAMA_ARG_ALIAS"), None)
    reported_global_alias = False
    for sec in sorted(pf.models, key=lambda s: s.model_name):
        eff = pf.effective_options(sec)
        name = sec.model_name
        alias_entry = next((e for o, e in eff.items() if o.env == "LLAMA_ARG_ALIAS"), None)
        if name in names:
            add(IniProblem(sec.line, sec.name, None, "error", f"model name '{name}' conflicts with alias of model '{names[name]}' (llama-server refuses the file).", True))
        aliases = [a.strip() for a in (alias_entry.value.split(",") if alias_entry else []) if a.strip()]
        for a in aliases:
            # models are added in name order and checked only against those added before
            owner = names.get(a)
            conflict = None
            if owner is not None and owner == a:
                conflict = f"alias '{a}' for model '{name}' conflicts with existing model name"
            elif owner is not None:
                conflict = f"alias '{a}' for model '{name}' conflicts with alias of model '{owner}'"
            if conflict is None:
                continue
            if alias_entry is global_alias and alias_entry is not None:
                if not reported_global_alias:
                    reported_global_alias = True
                    add(IniProblem(alias_entry.line, GLOBAL_SECTION, alias_entry.key, "error", f"alias in [*] gives every model the alias '{a}', so the second model conflicts with the first ({conflict}); llama-server refuses the file. Put aliases in model sections.", True))
            else:
                line = alias_entry.line if alias_entry else sec.line
                add(IniProblem(line, sec.name, alias_entry.key if alias_entry else None, "error", f"{conflict} (llama-server refuses the file).", True))
        names.setdefault(name, name)
        for a in aliases:
            names.setdefault(a, name)
        los = next((e for o, e in eff.items() if o.env == "__PRESET_LOAD_ON_STARTUP"), None)
        if los is not None and los.value in TRUTHY:
            on_startup.append(name)
        _check_model_values(pf, sec, eff)
    if models_max > 0 and len(on_startup) > models_max:
        add(IniProblem(None, None, "load-on-startup", "error", f"number of models to load on startup ({len(on_startup)}) exceeds models_max ({models_max}): {', '.join(on_startup)}. Start the router with --models-max {len(on_startup)} or load fewer on startup.", True))


def _check_model_values(pf: PresetFile, sec: IniSection, eff: dict[ServerOption, IniEntry]) -> None:
    settings, _, notes = settings_from_options(eff)
    line_of: dict[str, IniEntry] = {}
    removed_fields: set[str] = set()
    for opt, e in eff.items():
        spec = field_for_option(opt)
        line_of[spec.field if spec else "extra_args"] = e
        if (r := _removed_of(opt)) is not None and r.field:
            removed_fields.add(r.field)
    # values that are not of their field's type were refused while reading (the field is left unset)
    bad_values = [n for n in notes if n.severity == "error" and n.field in line_of and n.field not in removed_fields]
    sec_line = sec.line if sec.line is not None else min((e.line for e in sec.entries if e.key != "version"), default=None)
    if not any(o.env in ("LLAMA_ARG_MODEL", "LLAMA_ARG_HF_REPO") for o in eff):
        pf.problems.append(IniProblem(sec_line, sec.name, None, "warning", f"model '{sec.model_name}' has no model or hf-repo key; the router starts it without a model unless a cached or --models-dir model has this name."))
    for p in bad_values + validate(settings, target="ini", require_model=False):
        if p.field in ("host", "api_key", "extra_args"):
            continue  # host/api-key are router business; extra keys were checked per key above
        e = line_of.get(p.field)
        # a rule about two fields (n-min vs n-max, V vs flash-attn) points at the section's own line
        line = e.line if e else sec_line
        key = e.key if e else None
        where = sec.name if e is None or e in sec.entries else GLOBAL_SECTION
        prefix = "" if where == sec.name else f"(from [*], for model '{sec.model_name}') "
        pf.problems.append(IniProblem(line, sec.name if where == sec.name else GLOBAL_SECTION, key, p.severity, prefix + p.message))
