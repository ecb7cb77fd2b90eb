"""The preset reader stays linear on hostile files and keeps llama-server's exact reading.

Why: the value pattern once looked ahead over the rest of a blank run from every blank of it
(40k blanks: 17.6 s; 200k: minutes), and a `[` without its `]` rescanned the rest of the file from
every such line. Nothing here times anything (bench/bench_preset_parse.py measures): big inputs
must parse to the right result inside pytest's own timeout, and the scanner must give exactly what
the grammar's regex transcription gives on random small files (the reference below, kept here as
the oracle: correct, but quadratic on long blank runs, so only fed short texts).
"""

from __future__ import annotations

import re

from hypothesis import given, settings, strategies as st

from tui.core.presets import parse_preset, scan
from tui.core.presets.types import IniLine, IniProblem

# preset.cpp:186-224 transcribed literally (a look-ahead per value character): the oracle.
_NL = r"(?:\r\n|\n|\r)"
_EOL = rf"[ \t]*+(?:[;#][^\r\n]*+)?(?:{_NL}|\Z)"
_REF_HEADER = re.compile(rf"\[[ \t]*+([^\]]++)\]({_EOL})")
_REF_KV = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_.\-]*+)[ \t]*+=[ \t]*+((?:(?![ \t]*(?:[;#]|\r|\n|\Z)).)*+)({_EOL})", re.S)
_REF_OTHER = re.compile(rf"[ \t]*+[;#][^\r\n]*+(?:{_NL}|\Z)|[ \t]*+(?:{_NL}|\Z)")
_REF_LINE = re.compile(rf"[^\r\n]*(?:{_NL}|\Z)")


def reference_kinds(text: str) -> list[tuple[str, int, int, str | None, str | None]]:
    """(kind, start, end, name or key, value) per unit, by the literal transcription."""
    out: list[tuple[str, int, int, str | None, str | None]] = []
    pos = 0
    while pos < len(text):
        if m := _REF_HEADER.match(text, pos):
            out.append(("header", pos, m.end(), m.group(1), None))
        elif m := _REF_KV.match(text, pos):
            out.append(("kv", pos, m.end(), m.group(1), m.group(2)))
        elif (m := _REF_OTHER.match(text, pos)) and m.end() > pos:
            out.append(("comment" if text[pos:m.end()].strip() else "blank", pos, m.end(), None, None))
        else:
            m = _REF_LINE.match(text, pos)
            end = m.end() if m and m.end() > pos else len(text)
            out.append(("invalid", pos, end, None, None))
            pos = end
            continue
        pos = m.end()
    return out


def kinds(lines: list[IniLine]) -> list[tuple[str, int, int, str | None, str | None]]:
    return [(u.kind, u.start, u.end, u.name if u.kind == "header" else u.key, u.value) for u in lines]


PIECES = ["[", "]", " ", "\t", "\n", "\r", "\r\n", ";", "#", "=", "a", "k", "1", "-", "_", ".", "\v", "é",
          "ctx-size", "model", "  = ", "[m]\n"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30).map("".join))
def test_the_scanner_reads_every_small_file_as_the_grammar_does(text: str) -> None:
    lines, problems = scan(text)
    assert kinds(lines) == reference_kinds(text)
    assert [p.line for p in problems] == [u.line for u in lines if u.kind == "invalid"]


def test_a_value_with_200k_blanks_inside_keeps_them_and_drops_the_trailing_ones() -> None:
    inner = " " * 200_000
    text = f"[m]\nmodel = a{inner}b.gguf{inner}; note\nctx-size = 4096\n"
    pf = parse_preset(text)
    entries = pf.sections["m"].entries
    assert [(e.key, e.line) for e in entries] == [("model", 2), ("ctx-size", 3)]
    assert entries[0].value == f"a{inner}b.gguf"
    line = next(u for u in pf.lines if u.kind == "kv")
    assert line.after == inner + "; note\n"


def test_a_1_mb_line_of_each_kind_parses() -> None:
    mb = 1_000_000
    blanks = parse_preset("[m]\nmodel = x" + " " * mb + "\n")
    assert blanks.sections["m"].entries[0].value == "x"
    letters = parse_preset("[m]\nmodel = " + "a" * mb + ".gguf\n")
    assert len(letters.sections["m"].entries[0].value) == mb + 5
    invalid = parse_preset("[m]\n" + " " * mb + "x\n")
    assert [(p.line, p.rejects) for p in invalid.problems if p.rejects] == [(2, True)]
    name = parse_preset("[" + "n" * mb + "]\nmodel = a.gguf\n")
    assert list(name.sections) == ["n" * mb]


def test_unclosed_headers_and_a_late_bracket_are_each_one_invalid_line() -> None:
    n = 20_000
    lines, problems = scan("[m\n" * n)
    assert [u.kind for u in lines] == ["invalid"] * n
    assert [p.line for p in problems] == list(range(1, n + 1))
    # every '[' reaches the one ']' at the end, which is followed by text: never a header
    lines, problems = scan("[m\n" * n + "]x\n")
    assert len(problems) == n + 1 and not any(u.kind == "header" for u in lines)
    # the same file with the ']' closing the line: the first '[' swallows everything up to it
    lines, _ = scan("[m\n" * n + "]\nk = v\n")
    assert [u.kind for u in lines] == ["header", "kv"] and lines[0].name == "m\n[" * (n - 1) + "m\n"


def test_100k_sections_scan_to_100k_headers_with_their_lines() -> None:
    n = 100_000
    text = "".join(f"[m{i}]\nmodel = m{i}.gguf\nctx-size = 4096\n" for i in range(n))
    lines, problems = scan(text)
    assert problems == []
    headers = [u for u in lines if u.kind == "header"]
    assert len(headers) == n and len(lines) == 3 * n
    assert (headers[-1].name, headers[-1].line) == (f"m{n - 1}", 3 * n - 2)
    assert lines[-1].value == "4096" and lines[-1].line == 3 * n


def test_10k_sections_parse_with_their_checks() -> None:
    n = 10_000
    text = "".join(f"[m{i}]\nmodel = m{i}.gguf\nctx-size = 4096\n" for i in range(n)) + "[bad]\nctx-size = -5\n"
    pf = parse_preset(text)
    assert len(pf.models) == n + 1
    bad = [p for p in pf.problems if p.severity == "error"]
    assert [(p.line, p.section, p.key) for p in bad] == [(3 * n + 2, "bad", "ctx-size")]
    assert isinstance(bad[0], IniProblem) and "ctx-size" in bad[0].message
