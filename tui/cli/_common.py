"""Helpers shared by the subcommands: error printing, JSON output and the llama-server flag check."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tui.core.options.settings import Settings


class ServerArgsError(ValueError):
    """llama-server flags that the one validator refuses; the message lists each problem by field."""


def fail(message: str, code: int = 2) -> int:
    """Print a one-paragraph error (never a traceback) and return the exit code."""
    print(f"mtp-tune: {message}", file=sys.stderr)
    return code


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def pass_unknown_to_server(p: Any) -> None:
    """Make `p` collect every option it does not know into `args.server_args`, in order.

    llama-server's flags are open-ended, so `mtp-tune serve|probe|sweep -m F -c 4096 -fa on` passes
    `-c 4096 -fa on` through; abbreviations are off so `--server...` never swallows one of ours.
    """
    p.set_defaults(server_args=[])
    p.allow_abbrev = False
    parse_known = p.parse_known_args

    def parse_known_args(args: Any = None, namespace: Any = None) -> tuple[Any, list[str]]:
        ns, extras = parse_known(args, namespace)
        rest = list(extras)
        if rest[:1] == ["--"]:
            rest = rest[1:]
        ns.server_args = list(getattr(ns, "server_args", []) or []) + rest
        return ns, []

    p.parse_known_args = parse_known_args


def check_server_args(server_args: Sequence[str], *, base: Settings | None = None, warn: bool = True) -> Settings:
    """The llama-server flags of any command as Settings, through the form's validator (`check_argv`).

    Raises `ServerArgsError` naming every refused value, before a plan is computed or a server
    starts (`mtp-tune plan -c abc` and `probe -c abc` stop here, exit 2). Warnings go to stderr.
    A missing model is left to the caller, which knows its own usage line.
    """
    from tui.core.options.validate import check_argv, errors

    settings, problems = check_argv(list(server_args), base=base, require_model=False)
    bad = errors(problems)
    if bad:
        raise ServerArgsError("the llama-server flags cannot be used:\n  " + "\n  ".join(p.message for p in bad))
    if warn:
        for p in problems:
            print(f"mtp-tune: warning: {p.message}", file=sys.stderr)
    return settings


def names_a_model(server_args: Sequence[str]) -> bool:
    """True when the llama-server flags give a model (`-m`/`--model` or `-hf`), read as the server reads them."""
    from tui.core.options import reader

    return any(reader.values(list(server_args), name) for name in ("--model", "--hf-repo"))
