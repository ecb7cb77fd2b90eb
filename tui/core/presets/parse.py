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
import os
import re
from pathlib import Path

from tui.core.options import option_for_ini_key
from tui.core.presets.types import (
    DEFAULT_MODELS_MAX,
    DEFAULT_SECTION,
    IniEntry,
    IniLine,
    IniProblem,
    IniSection,
    PresetFile,
)
from tui.core.presets.checks import _check_lines, _check_router, _check_sections


# PEG pieces of preset.cpp:186-224, as regexes anchored at a position.
_NL = r"(?:\r\n|\n|\r)"
# PEG repetition never gives characters back, hence the possessive `*+` / `++`.
_EOL = re.compile(rf"[ \t]*+(?:[;#][^\r\n]*+)?(?:{_NL}|\Z)")
# `key = value`: the value is every character up to the first `;`, `#` or line break, less its trailing
# blanks (the grammar's "any char not followed by blanks + end of value"). Read as one run and stripped,
# never with a look-ahead per character: that look-ahead rescanned each blank run from each of its
# blanks, quadratic in the run (40k blanks in one value took 17.6 s; bench/bench_preset_parse.py).
_KV_HEAD = re.compile(r"([a-zA-Z_][a-zA-Z0-9_.\-]*+)[ \t]*+=[ \t]*+([^;#\r\n]*+)")
_COMMENT = re.compile(rf"[ \t]*+[;#][^\r\n]*+(?:{_NL}|\Z)")
_BLANK = re.compile(rf"[ \t]*+(?:{_NL}|\Z)")
_LINE_END = re.compile(rf"[^\r\n]*(?:{_NL}|\Z)")


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


class _Headers:
    """`[name]` and the end of its line at a position, in time linear in the file however brackets fall.

    The grammar's name is every character up to the next `]` (newlines too), so a `[` line without
    its `]` reaches forward to the next `]` in the file; matched per line with a regex, a file of
    unclosed headers rescanned the rest of the file from each of them. The next `]` and whether a
    line may end after it depend only on where that `]` is, so both are found once per `]`.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.close = -2  # index of the next ']' (-1: none left; -2: not looked for yet)
        self.eol: re.Match[str] | None = None  # the line end after self.close, when one matches there

    def match(self, pos: int) -> tuple[str, re.Match[str]] | None:
        """(section name, the end of line after its `]`) when a header starts at `pos`, else None."""
        text = self.text
        if not text.startswith("[", pos):
            return None
        start = pos + 1
        while start < len(text) and text[start] in " \t":
            start += 1
        if self.close != -1 and self.close < start:
            self.close = text.find("]", start)
            self.eol = _EOL.match(text, self.close + 1) if self.close >= 0 else None
        if self.close <= start or self.eol is None:  # no ']', an empty name, or text after the ']'
            return None
        return text[start:self.close], self.eol


def scan(text: str) -> tuple[list[IniLine], list[IniProblem]]:
    """Split `text` into line units exactly as preset.cpp's PEG grammar does, in linear time."""
    nl = _newline_offsets(text)
    lines: list[IniLine] = []
    problems: list[IniProblem] = []
    headers = _Headers(text)
    pos, n = 0, len(text)
    while pos < n:
        ln = _line_of(pos, nl)
        h = headers.match(pos)
        if h:
            name, eol = h
            lines.append(IniLine("header", pos, eol.end(), ln, name=name, after=eol.group(0)))
            pos = eol.end()
            continue
        m = _KV_HEAD.match(text, pos)
        if m:
            value = m.group(2).rstrip(" \t")
            eol = _EOL.match(text, m.start(2) + len(value))
            assert eol is not None  # only blanks, then ';', '#', a line break or the end follow a value
            lines.append(IniLine("kv", pos, eol.end(), ln, key=m.group(1), value=value, after=eol.group(0)))
            pos = eol.end()
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
