"""Stand-in llama-server builds for checks that only ask a binary `--version` and `--help`: the pinned
build's real --help text (tests/data/llama-server-help.txt) and an "older build" without one option."""

from __future__ import annotations

import stat
from pathlib import Path

HELP = (Path(__file__).parents[1] / "data" / "llama-server-help.txt").read_text(encoding="utf-8")
#: An older build: the pinned build's --help without `--spec-draft-p-min`.
OLD_HELP = "\n".join(line for line in HELP.splitlines() if not line.startswith("--spec-draft-p-min"))


def fake_server(root: Path, name: str, help_text: str, build: int) -> Path:
    """`root/name/llama-server`: answers `--version` and `--help` as a llama-server build does (nothing else)."""
    (root / name).mkdir()
    (root / name / "help.txt").write_text(help_text, encoding="utf-8")
    exe = root / name / "llama-server"
    exe.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'version: 0.6.0-dev (build {build}, commit "
                   f"abc1234)'; echo 'built with test'; else cat '{root / name / 'help.txt'}'; fi\n", encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe
