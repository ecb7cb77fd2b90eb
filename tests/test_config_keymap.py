"""The `[keymap]` reader: ids and keys checked, each problem naming the file, the line and the id."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.core.config.keymap import key_problem, read_keymap

KNOWN = frozenset({"probe", "launch", "stop", "typing.probe", "runs_screen.mark"})


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_missing_file_or_section_is_an_empty_keymap(tmp_path: Path) -> None:
    assert read_keymap(tmp_path / "config.toml", KNOWN) == ({}, ())
    assert read_keymap(_write(tmp_path, "[other]\nx = 1\n"), KNOWN) == ({}, ())


def test_ids_and_nested_tables(tmp_path: Path) -> None:
    path = _write(tmp_path, '# mine\n[keymap]\nprobe = "P"\nlaunch = "ctrl+l, f5"\n\n'
                            '[keymap.typing]\nprobe = "f12"\n[keymap.runs_screen]\nmark = "question_mark"\n')
    keymap, problems = read_keymap(path, KNOWN)
    assert problems == ()
    assert keymap == {"probe": "P", "launch": "ctrl+l,f5", "typing.probe": "f12", "runs_screen.mark": "question_mark"}


def test_unknown_ids_are_reported_with_their_line_and_the_rest_applies(tmp_path: Path) -> None:
    path = _write(tmp_path, '[keymap]\nprobe = "P"\nprobbe = "Q"\n')
    keymap, problems = read_keymap(path, KNOWN)
    assert keymap == {"probe": "P"}
    (problem,) = problems
    assert problem.line == 3 and problem.binding_id == "probbe"
    assert str(problem).startswith(f"{path}, line 3: unknown id 'probbe'")


@pytest.mark.parametrize(("value", "why"), [
    ('"ctrl+"', "no key after it"), ('"notakey"', "is not a key name"), ('"cmd+x"', "'cmd' is not a modifier"),
    ('""', "no key given"), ("5", "give the key as a string"), ('"p,,q"', "no key given"),
])
def test_bad_keys_are_named(tmp_path: Path, value: str, why: str) -> None:
    path = _write(tmp_path, f'[keymap]\nlaunch = "L"\n\nstop = {value}\n')
    keymap, problems = read_keymap(path, KNOWN)
    assert keymap == {"launch": "L"}
    (problem,) = problems
    assert problem.line == 4 and problem.binding_id == "stop" and why in problem.message, problem


def test_toml_syntax_errors_name_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, '[keymap]\nprobe = "P"\nstop = \n')
    keymap, problems = read_keymap(path, KNOWN)
    assert keymap == {}
    (problem,) = problems
    assert problem.line == 3 and "not valid TOML" in str(problem) and str(path) in str(problem)


def test_a_keymap_that_is_not_a_table(tmp_path: Path) -> None:
    path = _write(tmp_path, 'keymap = "P"\n')
    keymap, problems = read_keymap(path, KNOWN)
    assert keymap == {} and problems[0].line == 1 and "must be a table" in problems[0].message


@pytest.mark.parametrize("key", ["P", "p", "?", "question_mark", "full_stop", "hyphen_minus", "f12", "ctrl+shift+x",
                                 "escape", "space", "alt+enter"])
def test_keys_terminals_send_are_accepted(key: str) -> None:
    assert key_problem(key) is None
