"""Which options an installed llama-server accepts, read from its `--help` output.

Why: a user may run a newer or older build than the one `options.SERVER_OPTIONS` was taken from;
validation asks the installed binary instead of trusting the table. `--help` prints one entry per
option starting at column 0: the spellings joined by ", " (the first padded after its comma), then
an optional value hint, then the help text; continuation lines are indented (arg.cpp:184-220).
"""

from __future__ import annotations

import os
import re
import subprocess

from tui.core.server.process import child_env

_SPELLING = re.compile(r"-{1,2}[A-Za-z0-9][^\s,]*")


def _entry_spellings(line: str) -> list[str]:
    """Spellings at the start of one entry line, up to the value hint or the help text."""
    out: list[str] = []
    pos = 0
    while True:
        m = _SPELLING.match(line, pos)
        if not m:
            break
        out.append(m.group(0))
        pos = m.end()
        if line.startswith(",", pos):
            pos += 1
            while pos < len(line) and line[pos] == " ":
                pos += 1
            continue
        break  # a space (value hint or help text) or the end of the line
    return out


def parse_help(text: str) -> frozenset[str]:
    """Every option spelling (`-c`, `--ctx-size`, `--no-mmproj`, ...) in `llama-server --help` text.

    Removed options the server still registers (`--draft-max`) are included; `removed_options` names them.
    """
    found: set[str] = set()
    for line in text.splitlines():
        if line.startswith("-") and not line.startswith("---"):
            found.update(_entry_spellings(line))
    return frozenset(found)


_OPT_LINE = re.compile(r"^(-[^ ].*?)(?:\s{2,}|$)(.*)")


def removed_options(help_text: str) -> frozenset[str]:
    """Spellings that --help still lists but marks "the argument has been removed"."""
    removed: set[str] = set()
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        m = _OPT_LINE.match(line)
        if not m:
            continue
        desc = m.group(2) + " " + " ".join(ln.strip() for ln in lines[i + 1 : i + 3] if ln.startswith(" "))
        if "has been removed" in desc:
            removed.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", m.group(1)))
    return frozenset(removed)


def parse_help_entries(text: str) -> list[tuple[str, ...]]:
    """The spellings of each entry, in order; one tuple per option (useful for diagnostics)."""
    return [
        tuple(sp)
        for line in text.splitlines()
        if line.startswith("-") and not line.startswith("---") and (sp := _entry_spellings(line))
    ]


def server_help(server: str | os.PathLike[str], timeout: float = 15.0) -> str:
    """Run `server --help` (no LLAMA_ARG_* in its environment) and return what it printed."""
    env = child_env()
    done = subprocess.run([os.fspath(server), "--help"], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL, check=False)
    return done.stdout + done.stderr


def accepted_options(server: str | os.PathLike[str], timeout: float = 15.0) -> frozenset[str]:
    """The option spellings `server` accepts, from its `--help`."""
    return parse_help(server_help(server, timeout))
