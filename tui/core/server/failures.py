"""Why a llama-server launch or run ended, in one paragraph a user can act on.

A `Failure` says what happened, the offending flag or file, a suggested fix, and the raw log's
path so the UI can keep the full log one key away. `classify.classify()` reads an exit status and a
log into one; the builders here cover endings the supervisor decides itself (ready timeout, router).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path


class FailureKind(str, Enum):
    """Every way a launch or a run can end (other than a stop mtp-tune asked for)."""

    UNKNOWN_ARG = "unknown_arg"
    REMOVED_ARG = "removed_arg"
    BAD_ARG_VALUE = "bad_arg_value"
    UNSUPPORTED_CACHE_TYPE = "unsupported_cache_type"
    MISSING_MODEL = "missing_model"
    MODEL_UNREADABLE = "model_unreadable"
    NOT_GGUF = "not_gguf"
    TRUNCATED_GGUF = "truncated_gguf"
    UNSUPPORTED_MODEL = "unsupported_model"
    NO_MTP_LAYERS = "no_mtp_layers"
    PORT_IN_USE = "port_in_use"
    OOM_DEVICE = "oom_device"
    OOM_HOST = "oom_host"
    KILLED = "killed"
    CRASH = "crash"
    READY_TIMEOUT = "ready_timeout"
    PRESET_ERROR = "preset_error"
    ROUTER_MODEL_NOT_FOUND = "router_model_not_found"
    ROUTER_MODEL_FAILED = "router_model_failed"
    SERVER_NOT_FOUND = "server_not_found"
    DOWNLOAD_FAILED = "download_failed"  # -hf / -mu: the Hub or the host refused, or could not be reached
    EXITED = "exited"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Failure:
    """A classified ending. `message` says what happened, `fix` what to do; both are plain prose."""

    kind: FailureKind
    message: str
    flag_or_file: str | None = None
    fix: str = ""
    raw_log_path: Path | None = None
    exit_code: int | None = None
    signal: int | None = None
    evidence: str | None = None  # the log line the classification rests on, verbatim

    def explain(self) -> str:
        """The one paragraph shown to users: what happened, what to do, where the full log is."""
        parts = [self.message]
        if self.fix:
            parts.append(self.fix)
        if self.raw_log_path is not None:
            parts.append(f"Full server log: {self.raw_log_path}")
        return " ".join(parts)


# A log line: optional router child prefix "[port] ", optional timestamp "0.00.008.490 ", optional level.
_PREFIX = re.compile(r"^(?:\[\d+\]\s)?(?:\d+\.\d+\.\d+\.\d+\s)?(?:[IWEDT]\s)?")


def strip_prefix(line: str) -> str:
    """The message part of a llama-server log line (router prefix, timestamp and level removed)."""
    return _PREFIX.sub("", line.rstrip("\r\n"), count=1)


def ready_timeout(seconds: float, last_state: str, raw_log_path: Path | None = None,
                  last_line: str | None = None) -> Failure:
    """The server neither became ready nor exited within the readiness timeout."""
    tail = f" The last log line was: {strip_prefix(last_line).strip()}" if last_line else ""
    return Failure(FailureKind.READY_TIMEOUT,
                   f"llama-server was not ready after {seconds:g} s (still {last_state}), so mtp-tune stopped it.{tail}",
                   None,
                   "Big models on slow disks can take minutes to load: raise the ready timeout, or check that "
                   "the disk and the GPU are not busy.", raw_log_path=raw_log_path)


def router_unknown_model(model: str, available: Sequence[str], raw_log_path: Path | None = None) -> Failure:
    avail = ", ".join(available) if available else "none"
    return Failure(FailureKind.ROUTER_MODEL_NOT_FOUND,
                   f"The router has no model named '{model}' (available: {avail}).", model,
                   "Use a section name of the --models-preset file (or one of its aliases).",
                   raw_log_path=raw_log_path)
