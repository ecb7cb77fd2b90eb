"""Every `--help`: a short first paragraph, the docstring's paragraphs kept apart (argparse runs them
into one block), and two to four examples that the real parser accepts."""

from __future__ import annotations

import re
import shlex

import pytest

from tui.cli import _command_names, _commands, _listing, build_parser, main
from tui.cli._common import check_server_args

COMMANDS = sorted(_listing())  # the commands (a helper module such as plan_exact is none)


def help_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as ended:
        main([*argv, "--help"])
    assert ended.value.code == 0
    return capsys.readouterr().out


def examples(text: str) -> list[str]:
    """The example command lines of the epilog (`# ...` lines say what each does)."""
    block = text.split("\nexamples:\n", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip().startswith("mtp-tune")]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_two_to_four_examples_that_parse(command: str, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    found = examples(help_text(capsys, command))
    assert 2 <= len(found) <= 4, found
    for line in found:
        argv = shlex.split(line, comments=True)[1:]
        if argv[0] not in _command_names():
            argv = ["app", *argv]  # as `main` reads a line with no command: the TUI
        assert argv[0] == command, line  # each command's examples are of that command
        args = build_parser(_commands(argv[0])).parse_args(argv)  # a usage error would exit 2 here
        check_server_args(getattr(args, "server_args", []), warn=False)  # llama-server's flags are real ones


def test_the_top_level_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert len(examples(help_text(capsys))) >= 2


@pytest.mark.parametrize("command", COMMANDS)
def test_the_description_starts_short_and_keeps_its_paragraphs(command: str, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`tune --help` and `variants --help` were one 25-line paragraph each (issue 31)."""
    monkeypatch.setenv("COLUMNS", "100")
    text = help_text(capsys, command)
    after_usage = re.split(r"\n\n", text, maxsplit=1)[1]
    description = after_usage.split("\npositional arguments:\n")[0].split("\noptions:\n")[0]
    paragraphs = description.strip("\n").split("\n\n")
    assert len(paragraphs[0].splitlines()) <= 3, paragraphs[0]
    assert all(len(p.splitlines()) <= 14 for p in paragraphs), max(paragraphs, key=len)
