"""Command-line entry point: `mtp-tune [app options]` opens the TUI, `mtp-tune COMMAND ...` runs a tool.

Each module in this package that defines `COMMAND` (its name), `HELP` (one line), `add_arguments(p)`
and `run(args) -> int` is a subcommand; modules are discovered. Its `--help` is its docstring, its
options, and its examples from `_epilogs.EPILOGS` (a test asks every command for two to four).
Start-up matters (bench/bench_plan_startup.py): a command imports its own module only, `--help` and an
unknown word list the commands from their sources without importing them, and `--version` alone reads
the installed metadata.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import pkgutil
import re
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from tui import package_version

#: a module's declaration as the listing reads it: a plain one-line string literal
_DECLARED = re.compile(r'^(COMMAND|HELP) = "([^"\\\n]*)"$', re.MULTILINE)


def _command_names() -> dict[str, str]:
    """Command name -> module name, without importing anything (module `demo_model` is `demo-model`)."""
    return {
        info.name.replace("_", "-"): info.name
        for info in pkgutil.iter_modules(__path__)
        if not info.name.startswith("_")
    }


def _listing() -> dict[str, str]:
    """Command name -> its one-line help, read from each module's source, not imported: `--help` and an
    unknown word would otherwise load every command's dependencies (the server supervisor, httpx,
    numpy: 0.4 s). A module that declares COMMAND or HELP some other way is imported to read them."""
    found: dict[str, str] = {}
    for module in _command_names().values():
        source = (Path(__file__).parent / f"{module}.py").read_text(encoding="utf-8")
        fields = dict(_DECLARED.findall(source))
        if "COMMAND" in fields and "HELP" in fields:
            found[fields["COMMAND"]] = fields["HELP"]
        elif re.search(r"^(COMMAND|HELP)\b", source, re.MULTILINE):
            mod = _load(module)
            if getattr(mod, "COMMAND", None):
                found[mod.COMMAND] = mod.HELP
    return found


def _load(module: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{module}")


def _commands(only: str | None = None) -> dict[str, ModuleType]:
    """Import the command modules (just one when `only` is given: start-up time matters)."""
    names = _command_names()
    wanted = {only: names[only]} if only in names else names
    found: dict[str, ModuleType] = {}
    for name, module in wanted.items():
        mod = _load(module)
        if getattr(mod, "COMMAND", None):
            found[mod.COMMAND] = mod
    return found


class _Version(argparse.Action):
    """`--version`: the installed version, looked up only when asked (importlib.metadata is 25 ms that
    every other command would pay while building its parser)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"mtp-tune {package_version()}")
        parser.exit()


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help with the paragraphs of a description or an epilog kept (argparse runs them
    into one: `tune --help` was a 25-line block) and indented lines (examples) kept as written; the
    rest is wrapped to the terminal's width as argparse wraps it."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        for para in re.split(r"\n[ \t]*\n", text.strip("\n")):
            lines: list[str] = []
            prose: list[str] = []
            for line in [*para.splitlines(), None]:
                if line is not None and not line[:1].isspace():
                    prose.append(line.strip())
                    continue
                if prose:
                    lines.append(textwrap.fill(" ".join(prose), width, initial_indent=indent, subsequent_indent=indent))
                    prose = []
                if line is not None:
                    lines.append(indent + line)
            out.append("\n".join(lines))
        return "\n\n".join(out)


def build_parser(commands: dict[str, ModuleType], listed: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """The parser of `commands` (imported modules, with their arguments), plus the names and help lines
    of `listed` ones (the top-level --help lists every command without importing it)."""
    from tui.cli._epilogs import EPILOGS, TOP

    parser = argparse.ArgumentParser(
        prog="mtp-tune", formatter_class=HelpFormatter, epilog=TOP,
        description="Tune llama-server's MTP speculative decoding. Without a command, opens the TUI "
        "(see `mtp-tune app --help` for its options): `mtp-tune [-m FILE | -hf REPO[:QUANT] | -mu URL | --demo] "
        "[llama-server flags]`.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    listed = listed or {}
    for name in sorted({*commands, *listed}):
        mod = commands.get(name)
        if mod is None:
            sub.add_parser(name, help=listed[name])
            continue
        p = sub.add_parser(name, help=mod.HELP, description=(mod.__doc__ or mod.HELP).strip(),
                           epilog=EPILOGS.get(name), formatter_class=HelpFormatter)
        mod.add_arguments(p)
    return parser


def unknown_command(word: str, names: list[str]) -> str:
    """One sentence for a word that is no command: the commands, and the nearest one."""
    near = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    hint = f" Did you mean `mtp-tune {near[0]}`?" if near else ""
    return (f"unknown command {word!r}. Commands: {', '.join(sorted(names))}; without one, `mtp-tune "
            f"[-m FILE | -hf REPO | -mu URL | --demo] [llama-server flags]` opens the TUI.{hint}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    names = _command_names()
    if argv and not argv[0].startswith("-") and argv[0] not in names:
        print(f"mtp-tune: {unknown_command(argv[0], list(_listing()))}", file=sys.stderr)
        return 2
    # No command, only the TUI's options and llama-server flags: the TUI.
    if not argv or (argv[0] not in names and argv[0] not in ("-h", "--help", "--version")):
        argv = ["app", *argv]
    top = argv[0] in ("-h", "--help", "--version")  # the top-level parser: no command's module is imported
    commands = {} if top else _commands(argv[0])
    parser = build_parser(commands, _listing() if argv[0] in ("-h", "--help") else None)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    if args.command in ("app", "serve", "probe", "sweep"):
        # Servers are started from worker threads; signal handlers can only be set here.
        from tui.core.server.process import install_cleanup

        install_cleanup()
    try:
        return int(commands[args.command].run(args) or 0)
    except KeyboardInterrupt:
        print("mtp-tune: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `mtp-tune ... | head`
        sys.stderr.close()
        return 0
