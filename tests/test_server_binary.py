"""`--help` runs once per binary (probe, validator and `mtp-tune profile` share it) and again when the file changes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tui.core.server.binary import ServerProbeError, accepted_options, probe, server_help

HELP = "-c,    --ctx-size N   size of the prompt context\n--spec-type [none|draft-mtp]   speculative type\n-fa,   --flash-attn   flash attention\n"


def _fake_server(path: Path, log: Path, extra: str = "") -> Path:
    """A script that answers --version and --help like llama-server and logs each --help run."""
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then echo "version: 0.6.0-dev (build 11434, commit abc123f)"; exit 0; fi\n'
        f'echo run >> "{log}"\n'
        f"printf '%s' '{HELP}{extra}'\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_help_runs_once_for_probe_and_accepted_options(tmp_path: Path) -> None:
    log = tmp_path / "help.log"
    server = _fake_server(tmp_path / "llama-server", log)
    info = probe(server)
    assert info.version == 11434 and info.supports_draft_mtp and info.accepts("--ctx-size")
    assert accepted_options(server) == {"-c", "--ctx-size", "--spec-type", "-fa", "--flash-attn"}
    assert server_help(server) == server_help(str(server))
    assert _runs(log) == 1


def test_a_changed_binary_is_asked_again(tmp_path: Path) -> None:
    log = tmp_path / "help.log"
    server = _fake_server(tmp_path / "llama-server", log)
    assert "--fit-target" not in accepted_options(server)
    _fake_server(server, log, extra="--fit-target MiB   margin per device\n")
    st = server.stat()
    os.utime(server, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a rebuild never keeps the mtime
    assert "--fit-target" in accepted_options(server)
    assert _runs(log) == 2


def test_a_missing_binary_says_so(tmp_path: Path) -> None:
    with pytest.raises(ServerProbeError, match="no such file"):
        server_help(tmp_path / "nope")
