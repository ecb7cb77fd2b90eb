"""Helpers shared by the subcommands: error printing and JSON output."""

from __future__ import annotations

import json
import sys
from typing import Any


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
