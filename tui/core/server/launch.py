"""One start of llama-server, as data: what it ran, where it listens, its log and how it ended."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from tui.core.server.failures import Failure, FailureKind


@dataclass
class Launch:
    """One start of the server: argv, where it listens, its log, timings and how it ended."""

    id: int
    argv: list[str]
    host: str
    port: int
    log_path: Path | None
    started_at: float  # time.monotonic()
    started_wall: float  # time.time()
    router_model: str | None = None
    pid: int | None = None
    ready_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    failure: Failure | None = None
    stop_requested: bool = False
    auto_port: bool = False
    port_retries: int = 0
    exited: threading.Event = field(default_factory=threading.Event, repr=False)
    loaded_line: threading.Event = field(default_factory=threading.Event, repr=False)
    wake: threading.Event = field(default_factory=threading.Event, repr=False)  # poll /health now
    head: list[str] = field(default_factory=list, repr=False)
    n_lines: int = 0
    router_ports: dict[str, str] = field(default_factory=dict, repr=False)
    router_exits: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)  # name -> (status, line no)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def seconds_to_ready(self) -> float | None:
        return None if self.ready_at is None else self.ready_at - self.started_at


def spawn_failure(binary: Path, e: BaseException, log_path: Path | None) -> Failure:
    """Why the binary could not even be started, as a Failure the UI explains."""
    if isinstance(e, FileNotFoundError):
        msg = f"The llama-server binary {binary} does not exist."
    elif isinstance(e, PermissionError):
        msg = f"The llama-server binary {binary} is not executable (permission denied)."
    else:
        msg = f"llama-server ({binary}) could not be started: {e}."
    return Failure(FailureKind.SERVER_NOT_FOUND, msg, str(binary),
                   "Point mtp-tune at a working llama-server (--server-bin, $MTP_TUNE_LLAMA_SERVER) or let it "
                   "build one.", raw_log_path=log_path)
