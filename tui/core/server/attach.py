"""Attach mode: watch a llama-server mtp-tune did not start, at a URL.

There is no process to supervise, so the state comes from HTTP alone: nothing answering yet =
starting, 503 = loading, 200 = ready (router: the chosen model's `GET /models` status), and a server
that stops answering after it was seen = exited. The same `ServerState`, `StateEvent`, listeners and
`LlamaClient` as the supervisor, so the UI treats both alike. A memory report needs the launch log:
give `log_file` (the server's `--log-file`, or its redirected output) and it is tailed from the start.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tui.core.server.client import LlamaClient
from tui.core.server.failures import Failure, FailureKind
from tui.core.server.supervisor import (
    DEFAULT_TAIL_LINES,
    EventHub,
    LineParser,
    LogLine,
    LogListener,
    ServerState,
    StateEvent,
    StateListener,
    _default_memreport,
)

log = logging.getLogger(__name__)


class Attachment:
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
        memreport_factory: Callable[[], LineParser | None] | None = _default_memreport,
    ) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.log_file = Path(log_file) if log_file is not None else None
        self.poll_interval = poll_interval
        self.gone_after = max(1, gone_after)
        self.events = EventHub(f"attach-{id(self):x}")
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._state = ServerState.STOPPED
        self._failure: Failure | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._mem_lock = threading.Lock()
        self._memreport: LineParser | None = (memreport_factory() if memreport_factory and log_file else None)
        self._line_hooks: list[Callable[[str], None]] = []
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

    def client(self) -> LlamaClient:
        """A new async client for this server (the caller closes it)."""
        return LlamaClient(self.url, api_key=self.api_key, model=self.model)

    def tail(self, n: int | None = None) -> list[str]:
        with self._lock:
            lines = list(self._tail)
        return lines if n is None else lines[-n:]

    def memory_report(self) -> LineParser | None:
        """The memory-report parser fed from `log_file`; None without a log file."""
        return self._memreport

    def memory_snapshot(self) -> dict[str, Any] | None:
        with self._mem_lock:
            to_dict = getattr(self._memreport, "to_dict", None)
            return to_dict() if callable(to_dict) else None

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

    def add_state_listener(self, fn: StateListener) -> Callable[[], None]:
        return self.events.add_state_listener(fn)

    def add_log_listener(self, fn: LogListener) -> Callable[[], None]:
        return self.events.add_log_listener(fn)

    def on_log_line(self, fn: Callable[[str], None]) -> Callable[[], None]:
        with self._lock:
            self._line_hooks.append(fn)
        return lambda: self._line_hooks.remove(fn) if fn in self._line_hooks else None

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
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._state != ServerState.READY and not self._state.final:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._state

    def wait_for(self, states: set[ServerState] | list[ServerState], timeout: float) -> ServerState:
        wanted = set(states)
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._state not in wanted:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._state

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
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        misses = 0
        seen = False
        host = httpx.URL(self.url).host
        with httpx.Client(timeout=httpx.Timeout(5.0, connect=2.0), headers=headers,
                          trust_env=host not in ("127.0.0.1", "localhost", "::1")) as http:
            while not self._stop.is_set():
                state, failure = self._probe(http)
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

    def _probe(self, http: httpx.Client) -> tuple[ServerState | None, Failure | None]:
        try:
            r = http.get(self.url + "/health")
        except httpx.HTTPError:
            return None, None
        if r.status_code == 503:
            return ServerState.LOADING, None
        if r.status_code != 200:
            return ServerState.STARTING, None
        if not self.model:
            return ServerState.READY, None
        try:
            m = http.get(self.url + "/models")
        except httpx.HTTPError:
            return None, None
        if m.status_code == 401:
            return ServerState.FAILED, Failure(FailureKind.UNKNOWN, f"The server at {self.url} wants an API key.",
                                               self.url, "Give the key the server was started with (--api-key).")
        try:
            data = m.json().get("data", [])
        except (ValueError, AttributeError):
            data = []
        for entry in data:
            if entry.get("id") == self.model or self.model in (entry.get("aliases") or []):
                st = entry.get("status") or {}
                value = st.get("value")
                if value == "loaded":
                    return ServerState.READY, None
                if value == "loading":
                    return ServerState.LOADING, None
                if st.get("failed"):
                    return ServerState.FAILED, Failure(
                        FailureKind.ROUTER_MODEL_FAILED,
                        f"The router's model '{self.model}' failed to load (exit code {st.get('exit_code')}).",
                        self.model, "The router's own log has the child's errors.")
                return ServerState.LOADING, None  # unloaded: it loads on the first request
        names = ", ".join(str(e.get("id")) for e in data) or "none"
        return ServerState.FAILED, Failure(FailureKind.ROUTER_MODEL_NOT_FOUND,
                                           f"The router at {self.url} has no model '{self.model}' (available: {names}).",
                                           self.model, "Pick one of the router's models.")

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
        with self._lock:
            self._tail.append(text)
            hooks = list(self._line_hooks)
        if self._memreport is not None:
            with self._mem_lock:
                try:
                    self._memreport.feed(text)
                except Exception:
                    log.exception("memory report parser failed on %r", text)
        for fn in hooks:
            try:
                fn(text)
            except Exception:
                log.exception("log line hook failed")
        self.events.emit_log(LogLine(0, text, time.monotonic()))
