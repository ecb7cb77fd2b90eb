"""Command-line entry point: `mtp-tune [app options]` opens the TUI, `mtp-tune COMMAND ...` runs a tool.

Each module in this package that defines `COMMAND` (its name), `HELP` (one line), `add_arguments(p)`
and `run(args) -> int` is a subcommand; modules are discovered, so adding one touches no other file.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import pkgutil
import sys
from types import ModuleType

from tui import package_version


def _command_names() -> dict[str, str]:
    """Command name -> module name, without importing anything (module `demo_model` is `demo-model`)."""
    return {
        info.name.replace("_", "-"): info.name
        for info in pkgutil.iter_modules(__path__)
        if not info.name.startswith("_")
    }


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


def build_parser(commands: dict[str, ModuleType]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mtp-tune",
        description="Tune llama-server's MTP speculative decoding. Without a command, opens the TUI "
        "(see `mtp-tune app --help` for its options): `mtp-tune [-m FILE | -hf REPO[:QUANT] | -mu URL | --demo] "
        "[llama-server flags]`.",
    )
    parser.add_argument("--version", action="version", version=f"mtp-tune {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod in sorted(commands.items()):
        p = sub.add_parser(name, help=mod.HELP, description=(mod.__doc__ or mod.HELP).strip())
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
        print(f"mtp-tune: {unknown_command(argv[0], list(_commands()))}", file=sys.stderr)
        return 2
    # No command, only the TUI's options and llama-server flags: the TUI.
    if not argv or (argv[0] not in names and argv[0] not in ("-h", "--help", "--version")):
        argv = ["app", *argv]
    commands = _commands(None if argv[0] in ("-h", "--help") else argv[0]) if argv[0] != "--version" else {}
    parser = build_parser(commands)
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
