"""`--models-preset` INI files, read exactly as llama-server b11434 reads them, and written safely.

Why a faithful parser: guides print preset files the current server rejects (`mmap = 1`), values
silently cut at `;` or `#`, and sections that replace each other. Reading mirrors common/preset.cpp
(the PEG grammar, `[*]` cascade, `default` section, key mapping, alphabetical precedence) and
server-models.cpp (alias conflicts, load-on-startup limit, reserved keys); every finding carries its
line number. Writing replaces one section and leaves every other byte alone, atomically, with a
backup, and refuses anything the server would reject or truncate.

Rules implemented (each is a `IniProblem`; `rejects=True` means the router refuses the whole file):
 1. A line must be a header, `key = value`, a comment or blank; anything else (indented key, key
    starting with a digit or `-`, space inside a key, missing `=`, text after `]`, header without
    `]`) fails the whole file ("failed to parse server config file").
 2. A key must name a llama-server option: long, short or negative spelling without dashes, or its
    env name (`LLAMA_ARG_*`, `LLAMA_ARG_NO_*`); matched literally (`ctx_size` is unknown); unknown
    keys fail the file. Removed options get their replacement (`mmap` -> `load-mode`).
 3. Keys of removed options still registered (`draft-max`, ...) load, but the model fails to start.
 4. `version` is skipped anywhere; keys before any header form section `default`, which becomes a
    model named `default` if it holds any other key.
 5. `[*]` cascades onto every model; a model section overrides it option by option.
 6. A duplicate header replaces the earlier section entirely; a duplicate key: last value wins; two
    spellings of one option: the alphabetically last key wins.
 7. Values end at the first `;` or `#` (even mid-word) and lose trailing blanks; quotes are kept.
 8. Booleans: negative keys invert (`no-mmproj = true` == `mmproj-auto = false`); a falsey value
    renders the negative flag, or drops a flag that has none; non-boolean text counts as true.
 9. Preset-only keys `load-on-startup`, `stop-timeout`, `dedup-cache-models` are not passed to the
    model; more load-on-startup models than `--models-max` (4) fail the file.
10. Section names: a `:TAG` suffix is canonicalized (upper-cased, `PREFIX-` dropped); blanks after
    the name are kept; a name may swallow lines up to the next `]`.
11. Alias conflicts (with another model's name or alias) fail the file; `alias` in `[*]` conflicts
    with itself on the second model.
12. Reserved keys the router strips or overrides: host, port, api-key(-file), ssl, models-*.
13. Values are checked like form fields (numbers, cache types, n-min <= n-max, quantized V without
    flash attention, ...), and a model section without `model`/`hf-repo` is reported.
"""

from __future__ import annotations

import bisect
import difflib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from tui.core.options.values import BadValue, format_value, parse_value
from tui.core.options import (
    FALSEY,
    FIELDS,
    RemovedOption,
    TABLE_BUILD,
    TRUTHY,
    ServerOption,
    all_ini_keys,
    field_for_option,
    find_option,
    find_removed,
    option_for_ini_key,
)
from tui.core.options.settings import Settings
from tui.core.options.validate import Problem, validate

Severity = Literal["error", "warning"]
DEFAULT_SECTION = "default"
GLOBAL_SECTION = "*"
DEFAULT_MODELS_MAX = 4
PRESET_ONLY_KEYS: tuple[str, ...] = ("load-on-startup", "stop-timeout", "dedup-cache-models")
#: Env names the router unsets or overrides in every model (server-models.cpp:479-531).
RESERVED_ENV: dict[str, str] = {
    "LLAMA_ARG_SSL_KEY_FILE": "stripped by the router",
    "LLAMA_ARG_SSL_CERT_FILE": "stripped by the router",
    "LLAMA_API_KEY": "stripped by the router (set --api-key on the router itself)",
    "LLAMA_ARG_API_KEY_FILE": "stripped by the router (set it on the router itself)",
    "LLAMA_ARG_MODELS_DIR": "stripped by the router",
    "LLAMA_ARG_MODELS_MAX": "stripped by the router",
    "LLAMA_ARG_MODELS_PRESET": "stripped by the router",
    "LLAMA_ARG_MODELS_AUTOLOAD": "stripped by the router",
    "LLAMA_ARG_HOST": "overridden: the router runs every model on 127.0.0.1",
    "LLAMA_ARG_PORT": "overridden: the router picks a free port per model",
    "LLAMA_ARG_LOG_COLORS": "overridden: models follow the router's colors",
}

# PEG pieces of preset.cpp:186-224, as regexes anchored at a position.
_NL = r"(?:\r\n|\n|\r)"
# PEG repetition never gives characters back, hence the possessive `*+` / `++`.
_EOL = rf"[ \t]*+(?:[;#][^\r\n]*+)?(?:{_NL}|\Z)"
_HEADER = re.compile(rf"\[[ \t]*+([^\]]++)\]({_EOL})")
_KV = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_.\-]*+)[ \t]*+=[ \t]*+((?:(?![ \t]*(?:[;#]|\r|\n|\Z)).)*+)({_EOL})", re.S)
_COMMENT = re.compile(rf"[ \t]*+[;#][^\r\n]*+(?:{_NL}|\Z)")
_BLANK = re.compile(rf"[ \t]*+(?:{_NL}|\Z)")
_LINE_END = re.compile(rf"[^\r\n]*(?:{_NL}|\Z)")
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.I)


class IniWriteError(Exception):
    """Writing was refused; the message says which section/key/value and what to do."""


@dataclass(frozen=True)
class IniProblem:
    """One finding with its 1-based line. `rejects`: the router refuses the whole file for it."""

    line: int | None
    section: str | None
    key: str | None
    severity: Severity
    message: str
    rejects: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"line": self.line, "section": self.section, "key": self.key, "severity": self.severity, "message": self.message}

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "file"
        sec = f" [{self.section}]" if self.section is not None else ""
        return f"{where}{sec}: {self.severity}: {self.message}"


@dataclass
class IniLine:
    """One parsed unit of the file (a header may span several physical lines)."""

    kind: Literal["header", "kv", "comment", "blank", "invalid"]
    start: int
    end: int
    line: int
    name: str | None = None  # header: section name as stored by the server
    key: str | None = None
    value: str | None = None
    after: str = ""  # kv/header: what follows the value up to the end of the line


@dataclass
class IniEntry:
    key: str
    value: str
    line: int
    option: ServerOption | None


@dataclass
class IniSection:
    """A section as the server keeps it: only the entries after its last header."""

    name: str
    line: int | None
    entries: list[IniEntry] = field(default_factory=list)

    @property
    def model_name(self) -> str:
        """The name requests must use (`:TAG` canonicalized, preset.cpp:291-301)."""
        return canonical_name(self.name)

    def options(self) -> dict[ServerOption, IniEntry]:
        """Effective value per option: last duplicate key, then alphabetically last spelling."""
        by_key: dict[str, IniEntry] = {}
        for e in self.entries:
            if e.key != "version":
                by_key[e.key] = e
        out: dict[ServerOption, IniEntry] = {}
        for key in sorted(by_key):
            e = by_key[key]
            if e.option is not None:
                out[e.option] = e
        return out

    def value_of(self, key: str) -> str | None:
        """The effective value for any spelling of an option, or None."""
        opt = option_for_ini_key(key)
        e = self.options().get(opt) if opt else None
        return None if e is None else bool_value(e)


def bool_value(entry: IniEntry) -> str:
    """The value the server stores: negative keys of bool options invert (preset.cpp:264-277)."""
    opt = entry.option
    if opt is not None and opt.neg and opt.is_negative(entry.key):
        return "false" if entry.value in TRUTHY else "true"
    return entry.value


def canonical_name(name: str) -> str:
    if name in (GLOBAL_SECTION, DEFAULT_SECTION):
        return name
    idx = name.rfind(":")
    if idx < 0:
        return name
    tag = name[idx + 1 :]
    m = _TAG.search(tag)
    canon = (m.group(1) if m else tag).upper()
    return name[: idx + 1] + canon if canon != tag else name


@dataclass
class PresetFile:
    """A parsed preset: the lines, the server's view of the sections, and every problem."""

    text: str
    path: str | None
    lines: list[IniLine]
    sections: dict[str, IniSection]
    problems: list[IniProblem] = field(default_factory=list)

    @property
    def global_section(self) -> IniSection | None:
        return self.sections.get(GLOBAL_SECTION)

    @property
    def models(self) -> list[IniSection]:
        """Model sections the router lists (a `default` section counts only with options)."""
        return [
            s for name, s in self.sections.items()
            if name != GLOBAL_SECTION and not (name == DEFAULT_SECTION and not s.options() and not _has_unknown(s))
        ]

    def model(self, name: str) -> IniSection | None:
        return next((s for s in self.models if s.name == name or s.model_name == name), None)

    def effective_options(self, section: IniSection) -> dict[ServerOption, IniEntry]:
        """`[*]` cascaded under the section (section wins per option)."""
        out = dict(self.global_section.options()) if self.global_section else {}
        out.update(section.options())
        return out

    @property
    def server_accepts(self) -> bool:
        """False when the router would refuse to start with this file."""
        return not any(p.rejects for p in self.problems)

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)


def _has_unknown(s: IniSection) -> bool:
    return any(e.option is None and e.key != "version" for e in s.entries)


# --------------------------------------------------------------------------- scanning


def _line_of(pos: int, newlines: list[int]) -> int:
    return bisect.bisect_right(newlines, pos - 1) + 1


def _newline_offsets(text: str) -> list[int]:
    """Offsets where a new physical line starts, minus one (so bisect gives 1-based lines)."""
    out: list[int] = []
    for m in re.finditer(r"\r\n|\n|\r", text):
        out.append(m.end() - 1)  # the last character of the line break
    return out


def _diagnose(raw: str) -> str:
    """Why a line matches none of the four line forms (all of these fail the whole file)."""
    stripped = raw.rstrip("\r\n")
    if re.match(r"[ \t]+[A-Za-z0-9_.\-]+[ \t]*=", stripped):
        return "key lines must start in the first column; remove the leading blanks (llama-server rejects indented keys)"
    if stripped.startswith("["):
        if "]" not in stripped:
            return "section header without a closing ']'"
        if re.match(r"\[[ \t]*\]", stripped):
            return "empty section name"
        return "text after the section header's ']' that is not a comment"
    m = re.match(r"([^=]*)=", stripped)
    if m:
        key = m.group(1).strip()
        if not key:
            return "a '=' without a key"
        if re.match(r"[0-9\-.]", key):
            return f"key {key!r} starts with {key[0]!r}; keys start with a letter or '_' and never with dashes"
        if re.search(r"[ \t]", key):
            return f"key {key!r} contains a blank; option names have no spaces"
        return f"key {key!r} contains characters other than letters, digits, '_', '.' and '-'"
    return "not a [section], key = value, comment or blank line (a value must follow 'key =')"


def scan(text: str) -> tuple[list[IniLine], list[IniProblem]]:
    """Split `text` into line units exactly as preset.cpp's PEG grammar does."""
    nl = _newline_offsets(text)
    lines: list[IniLine] = []
    problems: list[IniProblem] = []
    pos, n = 0, len(text)
    while pos < n:
        ln = _line_of(pos, nl)
        m = _HEADER.match(text, pos)
        if m:
            lines.append(IniLine("header", pos, m.end(), ln, name=m.group(1), after=m.group(2)))
            pos = m.end()
            continue
        m = _KV.match(text, pos)
        if m:
            lines.append(IniLine("kv", pos, m.end(), ln, key=m.group(1), value=m.group(2), after=m.group(3)))
            pos = m.end()
            continue
        m = _COMMENT.match(text, pos) or _BLANK.match(text, pos)
        if m and m.end() > pos:
            lines.append(IniLine("comment" if text[pos:m.end()].strip() else "blank", pos, m.end(), ln))
            pos = m.end()
            continue
        m = _LINE_END.match(text, pos)
        end = m.end() if m and m.end() > pos else n
        lines.append(IniLine("invalid", pos, end, ln))
        problems.append(IniProblem(ln, None, None, "error", f"{_diagnose(text[pos:end])}. llama-server refuses the whole file (\"failed to parse server config file\").", True))
        pos = end
    return lines, problems


# --------------------------------------------------------------------------- loading


def parse_preset(
    text: str,
    path: str | os.PathLike[str] | None = None,
    *,
    accepted: frozenset[str] | None = None,
    models_max: int = DEFAULT_MODELS_MAX,
) -> PresetFile:
    """Parse and check a preset. `accepted`: option spellings of the installed server, if known."""
    lines, problems = scan(text)
    sections: dict[str, IniSection] = {}
    current = DEFAULT_SECTION
    headers: dict[str, int] = {}
    for u in lines:
        if u.kind == "header":
            assert u.name is not None
            current = u.name
            if current in sections and current in headers:
                problems.append(IniProblem(u.line, current, None, "warning", f"section [{current}] appears again (first on line {headers[current]}); this header replaces the earlier section and all its keys are lost. Merge the two sections."))
            elif current in sections and current == DEFAULT_SECTION and sections[current].entries:
                problems.append(IniProblem(u.line, current, None, "warning", "[default] replaces the keys written before the first section header."))
            sections.pop(current, None)
            sections[current] = IniSection(current, u.line)
            headers[current] = u.line
        elif u.kind == "kv":
            assert u.key is not None and u.value is not None
            sec = sections.setdefault(current, IniSection(current, None))
            opt = None if u.key == "version" else option_for_ini_key(u.key)  # skipped by the server
            sec.entries.append(IniEntry(u.key, u.value, u.line, opt))
    pf = PresetFile(text, os.fspath(path) if path is not None else None, lines, sections, problems)
    _check_lines(pf)
    _check_sections(pf, accepted)
    _check_router(pf, models_max)
    pf.problems.sort(key=lambda p: (p.line or 0, p.severity != "error"))
    return pf


def read_preset(path: str | os.PathLike[str], **kw: object) -> PresetFile:
    """Read a preset file (bytes kept: undecodable bytes survive a rewrite)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"preset file {p} does not exist (llama-server: \"preset file does not exist\").")
    text = p.read_bytes().decode("utf-8", errors="surrogateescape")
    return parse_preset(text, p, **kw)  # type: ignore[arg-type]


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
        on = e.value not in FALSEY
        value = {("--mmap", True): "mmap", ("--mmap", False): "none", ("--no-mmap", True): "none", ("--no-mmap", False): "mmap", ("--mlock", True): "mlock"}.get((removed.spellings[0], on))
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

    host, port and api-key are never written (the router forces or strips them).
    """
    extra = _extra_entries(list(settings.extra_args), section)
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


# --------------------------------------------------------------------------- safe write


@dataclass
class WriteResult:
    path: Path
    backup: Path | None
    replaced: bool
    removed_duplicates: int = 0


def _detect_newline(text: str) -> str:
    m = re.search(r"\r\n|\n|\r", text)
    return m.group(0) if m else "\n"


def replace_section_text(text: str, name: str, new_section: str) -> tuple[str, bool, int]:
    """`text` with section `name` replaced by `new_section` (or appended); returns (text, replaced, dups removed).

    A section's block runs from its header to the next header; comment and blank lines just before
    the next header stay (they usually describe the next section). Later duplicates of the section
    are removed so the written one is the one the server uses.
    """
    lines, _ = scan(text)
    blocks: list[tuple[int, int]] = []
    for idx, u in enumerate(lines):
        if u.kind == "header" and u.name == name:
            j = idx + 1
            while j < len(lines) and lines[j].kind != "header":
                j += 1
            k = j
            while k > idx + 1 and lines[k - 1].kind in ("comment", "blank"):
                k -= 1
            end = lines[k - 1].end
            blocks.append((u.start, end))
    nl = _detect_newline(text)
    if not blocks:
        prefix = text
        if prefix and not prefix.endswith(("\n", "\r")):
            prefix += nl
        unified = prefix[-64:].replace("\r\n", "\n").replace("\r", "\n")
        if prefix.strip() and not re.search(r"\n[ \t]*\n$", unified):
            prefix += nl
        return prefix + new_section, False, 0
    out = text
    for start, end in reversed(blocks[1:]):
        out = out[:start] + out[end:]
    start, end = blocks[0]
    return out[:start] + new_section + out[end:], True, len(blocks) - 1


def write_section(
    path: str | os.PathLike[str],
    name: str,
    settings: Settings,
    *,
    preset_only: dict[str, str] | None = None,
    accepted: frozenset[str] | None = None,
    backup: bool = True,
) -> WriteResult:
    """Add or replace section `name` in the preset at `path`, keeping everything else byte for byte.

    Refuses (IniWriteError) when a value would be cut or rejected, or when the result would be
    refused by llama-server. The previous file is kept as `FILE.bak`; the write is atomic
    (temp file in the same directory, fsync, `os.replace`) and keeps the file's permissions.
    """
    target = Path(os.path.realpath(path))
    old = target.read_bytes().decode("utf-8", errors="surrogateescape") if target.exists() else ""
    if old:
        before = parse_preset(old, target, accepted=accepted)
        if not before.server_accepts:
            first = next(p for p in before.problems if p.rejects)
            raise IniWriteError(f"{target} is already refused by llama-server ({first}); fix it first, mtp-tune will not write into it.")
        implicit = before.sections.get(DEFAULT_SECTION)
        if name == DEFAULT_SECTION and implicit is not None and implicit.line is None and implicit.entries:
            raise IniWriteError(f"{target} starts with keys before any section, which llama-server already reads as model 'default'; a [default] section would silently replace them. Choose another section name.")
    nl = _detect_newline(old) if old else "\n"
    if preset_only is None and old:
        # keep the section's own load-on-startup / stop-timeout / dedup-cache-models
        prev = before.sections.get(name)
        preset_only = {e.option.ini_key: e.value for e in (prev.options().values() if prev else []) if e.option and e.option.preset_only}
    section = section_text(name, settings_to_entries(settings, name, preset_only), nl)
    if not old:
        new, replaced, dups = "version = 1" + nl + nl + section, False, 0
    else:
        new, replaced, dups = replace_section_text(old, name, section)
    after = parse_preset(new, target, accepted=accepted)
    bad = [p for p in after.problems if p.rejects or (p.severity == "error" and p.section == name)]
    if bad:
        listing = "; ".join(str(p) for p in bad[:5])
        raise IniWriteError(f"not written: llama-server would reject or misread {target}: {listing}")
    if after.model(name) is None:
        raise IniWriteError(f"not written: section [{name}] would not be read back as a model.")
    bak: Path | None = None
    if backup and target.exists():
        bak = target.with_name(target.name + ".bak")
        shutil.copy2(target, bak)
    atomic_write_bytes(target, new.encode("utf-8", errors="surrogateescape"))
    return WriteResult(target, bak, replaced, dups)


def atomic_write_bytes(target: Path, data: bytes) -> None:
    """Write `data` to `target` atomically: temp file in the same directory, fsync, rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o7777 if target.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
