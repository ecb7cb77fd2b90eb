"""Where each launch leaves a trace: its log file under data_dir()/logs and one history entry.

The supervisor is the only writer of launch history: every launch (TUI, CLI, sweep) records the
configuration it really started, once.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from tui.core.options.redact import redact_argv
from tui.core.options.settings import Settings
from tui.core.config.paths import data_dir, private_dir, private_file

log = logging.getLogger(__name__)

#: Launch logs kept under data_dir()/logs; older ones are deleted at each launch.
KEEP_LOG_FILES = 200
_LOG_SEQ = itertools.count(1)


def new_log_path(log_dir: Path | None, launch_id: int) -> Path | None:
    """A fresh log file path for one launch (None if the folder cannot be made); prunes old logs.
    The folder is private (0700): a log holds the model's path, prompts' effects and server output."""
    root = log_dir if log_dir is not None else data_dir() / "logs"
    try:
        private_dir(root)
    except OSError:
        return None
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    # Launch ids restart per Supervisor: a process-wide sequence keeps two supervisors apart.
    path = root / f"server-{stamp}-{os.getpid()}-{next(_LOG_SEQ)}-{launch_id}.log"
    try:
        old = sorted(root.glob("server-*.log"), key=lambda p: p.stat().st_mtime)
        for p in old[: max(0, len(old) - KEEP_LOG_FILES + 1)]:
            p.unlink(missing_ok=True)
    except OSError:
        pass
    return path


def open_launch_log(path: Path | None, launch_id: int, argv: Sequence[str]) -> BinaryIO | None:
    """Open a launch's log (created 0600) for appending, with a header naming the (redacted) argv; None
    if it cannot."""
    if path is None:
        return None
    try:
        logf = open(private_file(path), "ab", buffering=0)
        header = f"# mtp-tune launch {launch_id} at {_dt.datetime.now().isoformat(timespec='seconds')}\n"
        header += "# argv: " + " ".join(redact_argv(argv)) + "\n"
        logf.write(header.encode())
        return logf
    except OSError:
        return None


def record_history(settings: Settings, binary: Path, pid: int | None, log_path: Path | None) -> Path | None:
    """Keep every launched configuration (koboldcpp users asked for this after each OOM): the
    Settings the supervisor carries, as launched (the store redacts the key)."""
    try:
        from tui.core.presets.profiles import record_launch

        return record_launch(settings, {"binary": str(binary), "pid": pid, "log": str(log_path or "")})
    except Exception:  # history is a convenience: never fail a launch over it
        log.exception("could not record the launch in history")
        return None
