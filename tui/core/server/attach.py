"""Attach mode: watch a llama-server mtp-tune did not start, at a URL.

There is no process to supervise, so the state comes from HTTP alone: nothing answering yet =
starting, 503 = loading, 200 = ready (router: the chosen model's `GET /models` status), and a server
that stops answering after it was seen = exited. The same `ServerState`, `StateEvent`, listeners and
`LlamaClient` as the supervisor, so the UI treats both alike. A memory report needs the launch log:
give `log_file` (the server's `--log-file`, or its redirected output) and it is tailed from the start.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tui.core.server.client import LlamaClient
from tui.core.server.events import DEFAULT_TAIL_LINES, EventHub, HandleCore, LineParser, LogLine, ServerState
from tui.core.server.events import StateEvent, default_memreport
from tui.core.server.failures import Failure, FailureKind
from tui.core.server.handle import RunningSettings
from tui.core.server.readiness import Readiness

log = logging.getLogger(__name__)


class Attachment(HandleCore):
    """Tracks an already-running server. `start()` begins polling; `detach()` stops watching."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        log_file: str | Path | None = None,
        poll_interval: float = 1.0,
        gone_after: int = 3,
        tail_lines: int = DEFAULT_TAIL_LINES,
        memreport_factory: Callable[[], LineParser | None] | None = default_memreport,
    ) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.log_file = Path(log_file) if log_file is not None else None
        self.poll_interval = poll_interval
        self.gone_after = max(1, gone_after)
        HandleCore.__init__(self, tail_lines)
        self.events = EventHub(f"attach-{id(self):x}")
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._state = ServerState.STOPPED
        self._failure: Failure | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._reset_log(memreport_factory() if memreport_factory and log_file else None)
        self._log_cond = threading.Condition()
        self._log_pos = 0  # bytes of log_file consumed so far
        self.ready_at: float | None = None
        self.attached_at: float | None = None

    # ---- views ---------------------------------------------------------------------------

    @property
    def state(self) -> ServerState:
        return self._state

    @property
    def failure(self) -> Failure | None:
        return self._failure

    @property
    def base_url(self) -> str:
        return self.url

    @property
    def log_path(self) -> Path | None:
        return self.log_file

    @property
    def pid(self) -> int | None:
        """Not ours: mtp-tune never signals a server it only watches."""
        return None

    def running_settings(self) -> RunningSettings | None:
        """What the server says it runs with (asks it now; None when it does not answer)."""
        with Readiness(self.url, self.api_key, self.model) as probe:
            return probe.running_settings()

    def release(self) -> None:
        self.detach()

    def client(self) -> LlamaClient:
        """A new async client for this server (the caller closes it)."""
        return LlamaClient(self.url, api_key=self.api_key, model=self.model)

    def sync_log(self, timeout: float = 5.0) -> bool:
        """Wait until everything now in `log_file` has been read (and fed to the memory report)."""
        if self.log_file is None:
            return False
        try:
            size = self.log_file.stat().st_size
        except OSError:
            return False
        with self._log_cond:
            return self._log_cond.wait_for(lambda: self._log_pos >= size, timeout)

    # ---- control -------------------------------------------------------------------------

    def start(self) -> "Attachment":
        with self._lock:
            if self._threads:
                return self
            self._stop.clear()
            self.attached_at = time.monotonic()
            self._set(ServerState.STARTING, detail=f"attaching to {self.url}")
            self._threads = [threading.Thread(target=self._poll, name="attach-poll", daemon=True)]
            if self.log_file is not None:
                self._threads.append(threading.Thread(target=self._follow, name="attach-tail", daemon=True))
            for t in self._threads:
                t.start()
        return self

    def detach(self, timeout: float = 5.0) -> None:
        """Stop watching (the server keeps running)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        with self._lock:
            self._threads = []
            self._set(ServerState.STOPPED, detail="detached")

    def wait_ready(self, timeout: float = 30.0) -> ServerState:
        return self._wait_until(lambda: self._state == ServerState.READY or self._state.final, timeout)

    def __enter__(self) -> "Attachment":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # ---- internals -----------------------------------------------------------------------

    def _set(self, new: ServerState, failure: Failure | None = None, detail: str = "") -> None:
        with self._lock:
            if new == self._state:
                return
            previous, self._state = self._state, new
            self._failure = failure if new in (ServerState.FAILED, ServerState.EXITED) else None
            now = time.monotonic()
            if new == ServerState.READY:
                self.ready_at = now
            self._cond.notify_all()
            self.events.emit_state(StateEvent(new, previous, 0, now, failure, detail))

    def _poll(self) -> None:
        misses = 0
        seen = False
        with Readiness(self.url, self.api_key, self.model) as probe:
            while not self._stop.is_set():
                state, failure = probe.observe()
                if state is None:
                    misses += 1
                    if seen and misses >= self.gone_after:
                        self._set(ServerState.EXITED, Failure(
                            FailureKind.EXITED, f"The server at {self.url} stopped answering.", self.url,
                            "It was started outside mtp-tune, so look at its own terminal or log; mtp-tune keeps "
                            "watching and reconnects when it comes back."))
                else:
                    misses = 0
                    seen = True
                    self._set(state, failure)
                self._stop.wait(self.poll_interval)

    def _follow(self) -> None:
        """Tail the log file from its start, following appends, truncation and replacement."""
        assert self.log_file is not None
        f = None
        ino = None
        buf = b""
        try:
            while not self._stop.is_set():
                if f is None:
                    try:
                        f = open(self.log_file, "rb")
                        ino = os.fstat(f.fileno()).st_ino
                    except OSError:
                        self._stop.wait(0.2)
                        continue
                chunk = f.read(65536)
                if chunk:
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for raw in lines:
                        self._line(raw.decode("utf-8", "replace").rstrip("\r"))
                    with self._log_cond:
                        self._log_pos = f.tell()
                        self._log_cond.notify_all()
                    continue
                try:
                    st = os.stat(self.log_file)
                    if st.st_ino != ino or st.st_size < f.tell():
                        f.close()
                        f, buf = None, b""
                        with self._log_cond:
                            self._log_pos = 0
                        continue
                except OSError:
                    pass
                self._stop.wait(0.2)
        finally:
            if f is not None:
                f.close()

    def _line(self, text: str) -> None:
        self._feed_line(text)
        self.events.emit_log(LogLine(0, text, time.monotonic()))
