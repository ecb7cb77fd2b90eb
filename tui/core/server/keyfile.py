"""The API key of one launch, in a 0600 file for `--api-key-file` instead of the argv.

Why: an argv is world-readable (`ps`, /proc/PID/cmdline); a file created 0600 (mkstemp: O_EXCL,
mode 0600 from the start) is readable by its owner only. llama-server b11434 (common/arg.cpp) reads
`--api-key-file` while parsing its arguments, one key per line, skipping empty lines and lines that
start with `#`; a router does not pass it to its children (server-models.cpp unset_reserved_args),
so the file is read once, at startup. It is kept until the launch ends anyway (a restart reads it
again) and then removed: by the supervisor when the server ends, and by the file's reaper
(`spawn.spawn_reaper`) when mtp-tune itself ends, even by SIGKILL.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from tui.core.server.spawn import spawn_reaper

REAPER_EXIT_S = 5.0


class KeyFileError(ValueError):
    """A key that `--api-key-file` cannot carry; one sentence naming the field."""


def split_keys(api_key: str) -> list[str]:
    """The keys `--api-key` means: llama-server splits its value at commas and drops empty ones."""
    keys = [k for k in api_key.split(",") if k]
    for k in keys:
        if k.startswith("#"):
            raise KeyFileError("api-key: a key that starts with '#' cannot be passed through --api-key-file "
                               "(llama-server reads that line as a comment); choose another key.")
        if "\n" in k or "\r" in k:
            raise KeyFileError("api-key: a key cannot contain a line break.")
    return keys


def key_dir() -> str | None:
    """$XDG_RUNTIME_DIR when it is a private directory of ours (tmpfs, never on disk), else the temp dir."""
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run and os.path.isdir(run):
        st = os.stat(run)
        if st.st_uid == os.getuid() and not st.st_mode & 0o077:
            return run
    return None


class KeyFile:
    """One launch's keys in a 0600 file, removed by `remove()` or, if mtp-tune dies, by its reaper."""

    def __init__(self, api_key: str) -> None:
        data = "".join(k + "\n" for k in split_keys(api_key)).encode()
        fd, name = tempfile.mkstemp(prefix="mtp-tune-key-", dir=key_dir())  # 0600, O_EXCL
        self.path = Path(name)
        self._reaper: subprocess.Popen[bytes] | None = None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            self._reaper = spawn_reaper(self.path)
        except BaseException:
            self.path.unlink(missing_ok=True)
            raise

    def remove(self) -> None:
        """Remove the file now and let its reaper go (idempotent)."""
        self.path.unlink(missing_ok=True)
        reaper, self._reaper = self._reaper, None
        if reaper is None:
            return
        try:
            assert reaper.stdin is not None
            reaper.stdin.close()  # EOF: the reaper removes the (already gone) file and exits
            reaper.wait(REAPER_EXIT_S)
        except (OSError, subprocess.TimeoutExpired):  # pragma: no cover - a stuck /bin/sh
            reaper.kill()
            reaper.wait(REAPER_EXIT_S)
