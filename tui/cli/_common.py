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
