"""Every `--help`: a short first paragraph, the docstring's paragraphs kept apart (argparse runs them
into one block), and two to four examples that the real parser accepts; the command reference in
docs/commands.md shows the same examples, and the README links one line per command to it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tui.cli import _command_names, _commands, _listing, build_parser, main
from tui.cli._common import check_server_args
from tui.cli._epilogs import EPILOGS

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


ROOT = Path(__file__).resolve().parent.parent


def test_the_command_reference_shows_the_examples_help_prints() -> None:
    """docs/commands.md has a section per command with the examples of its `--help`, word for word."""
    doc = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## ([\w-]+)", doc, re.MULTILINE)
    for command, epilog in EPILOGS.items():
        assert command in headings, command
        for line in epilog.splitlines():
            if line.strip().startswith("mtp-tune"):
                assert f"\n{line.strip()}\n" in doc, line


def test_the_readme_has_one_line_per_command_linking_to_its_section() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    doc_headings = re.findall(r"^## (.+)$", (ROOT / "docs" / "commands.md").read_text(encoding="utf-8"), re.MULTILINE)
    anchors = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in doc_headings}
    linked = re.findall(r"^- \[`mtp-tune[^`]*`\]\(docs/commands\.md#([\w-]+)\)", readme, re.MULTILINE)
    assert sorted(linked) == sorted(a for a in anchors if a != "llama-server-flags-on-every-command")
    assert len(linked) == len(_listing())
    assert "| command | what it does |" not in readme  # the reference table moved to docs/commands.md
