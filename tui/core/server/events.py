"""How a server's life reaches its watchers: states, events, log lines, and their ordered delivery.

Shared by the Supervisor (a server mtp-tune runs) and the Attachment (one it only watches), so a UI
treats both alike. `HandleCore` is the part both keep of the log: a bounded tail, the memory-report
parser and the synchronous line hooks.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from tui.core.server.failures import Failure

log = logging.getLogger(__name__)

DEFAULT_TAIL_LINES = 2000


class ServerState(str, Enum):
    """Where a server is in its life; the UI shows these words."""

    STOPPED = "stopped"
    STARTING = "starting"  # process started, HTTP not answering yet
    LOADING = "loading"  # HTTP 503 "Loading model" (router: model status "loading")
    READY = "ready"  # HTTP 200 (router: model status "loaded")
    STOPPING = "stopping"
    EXITED = "exited"  # ended on its own with code 0
    FAILED = "failed"  # ended badly, or never became ready; see `failure`

    @property
    def running(self) -> bool:
        return self in (ServerState.STARTING, ServerState.LOADING, ServerState.READY, ServerState.STOPPING)

    @property
    def final(self) -> bool:
        return self in (ServerState.STOPPED, ServerState.EXITED, ServerState.FAILED)


@dataclass(frozen=True)
class StateEvent:
    """One state change. `at` is time.monotonic(); `failure` is set for FAILED and EXITED."""

    state: ServerState
    previous: ServerState
    launch_id: int
    at: float
    failure: Failure | None = None
    detail: str = ""


@dataclass(frozen=True)
class LogLine:
    launch_id: int
    text: str
    at: float


StateListener = Callable[[StateEvent], None]
LogListener = Callable[[LogLine], None]


class LineParser(Protocol):
    """What the supervisor feeds every log line to (tui.core.server.memreport.MemoryReport fits)."""

    def feed(self, line: str) -> Any: ...


def default_memreport() -> LineParser | None:
    try:
        from tui.core.server.memreport import MemoryReport
    except ImportError:  # pragma: no cover - memreport ships with the app
        return None
    return MemoryReport()


class EventHub:
    """Delivers state events and log lines to listeners in order, on a thread of its own.

    The thread exits after a few idle seconds and is restarted on the next event, so discarded
    supervisors leave no thread behind. Listener exceptions are logged and swallowed.
    """

    IDLE_EXIT_S = 5.0

    def __init__(self, name: str) -> None:
        self._name = name
        self._q: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._state_listeners: list[StateListener] = []
        self._log_listeners: list[LogListener] = []

    def add_state_listener(self, fn: StateListener) -> Callable[[], None]:
        with self._lock:
            self._state_listeners.append(fn)
        return lambda: self._remove(self._state_listeners, fn)

    def add_log_listener(self, fn: LogListener) -> Callable[[], None]:
        with self._lock:
            self._log_listeners.append(fn)
        return lambda: self._remove(self._log_listeners, fn)

    def _remove(self, lst: list[Any], fn: Any) -> None:
        with self._lock:
            if fn in lst:
                lst.remove(fn)

    def emit_state(self, ev: StateEvent) -> None:
        self._put(("state", ev))

    def emit_log(self, line: LogLine) -> None:
        if self._log_listeners:
            self._put(("log", line))

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything emitted so far has been delivered (tests, CLI shutdown)."""
        done = threading.Event()
        self._put(("flush", done))
        return done.wait(timeout)

    def _put(self, item: tuple[str, Any]) -> None:
        with self._lock:
            self._q.put(item)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=f"{self._name}-events", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                kind, payload = self._q.get(timeout=self.IDLE_EXIT_S)
            except queue.Empty:
                with self._lock:
                    if self._q.empty():
                        self._thread = None
                        return
                continue
            if kind == "flush":
                payload.set()
                continue
            with self._lock:
                listeners = list(self._state_listeners if kind == "state" else self._log_listeners)
            for fn in listeners:
                try:
                    fn(payload)
                except Exception:  # a listener bug must not stop delivery
                    log.exception("supervisor %s listener failed", kind)




class HandleCore:
    """What every server handle keeps alike: the last log lines, the memory report fed from them,
    line hooks, listeners on `self.events`, and waiting on `self._cond` for `self._state`."""

    events: EventHub
    _cond: threading.Condition
    _state: ServerState

    def __init__(self, tail_lines: int = DEFAULT_TAIL_LINES) -> None:
        self._log_lock = threading.Lock()
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._mem_lock = threading.Lock()
        self._memreport: LineParser | None = None
        self._line_hooks: list[Callable[[str], None]] = []

    def tail(self, n: int | None = None) -> list[str]:
        """The last log lines (bounded)."""
        with self._log_lock:
            lines = list(self._tail)
        return lines if n is None else lines[-n:]

    def memory_report(self) -> LineParser | None:
        """The live memory-report parser (read it via memory_snapshot())."""
        return self._memreport

    def memory_snapshot(self) -> dict[str, Any] | None:
        """A consistent copy of the memory report (`to_dict()`), safe while the reader feeds it."""
        with self._mem_lock:
            to_dict = getattr(self._memreport, "to_dict", None)
            return to_dict() if callable(to_dict) else None

    def on_log_line(self, fn: Callable[[str], None]) -> Callable[[], None]:
        """Feed every log line to `fn` synchronously on the reader thread (parsers; keep it fast)."""
        with self._log_lock:
            self._line_hooks.append(fn)

        def remove() -> None:
            with self._log_lock:
                if fn in self._line_hooks:
                    self._line_hooks.remove(fn)

        return remove

    def add_state_listener(self, fn: StateListener) -> Callable[[], None]:
        """Call `fn(StateEvent)` on each state change; returns an unsubscribe function."""
        return self.events.add_state_listener(fn)

    def add_log_listener(self, fn: LogListener) -> Callable[[], None]:
        """Call `fn(LogLine)` for each server log line (on the dispatcher thread)."""
        return self.events.add_log_listener(fn)

    def wait_for(self, states: Iterable[ServerState], timeout: float) -> ServerState:
        """Block until the state is one of `states` (or `timeout`); returns the state then."""
        wanted = set(states)
        return self._wait_until(lambda: self._state in wanted, timeout)

    def _wait_until(self, done: Callable[[], bool], timeout: float) -> ServerState:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not done():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._state

    def _reset_log(self, memreport: LineParser | None) -> None:
        with self._log_lock:
            self._tail.clear()
        with self._mem_lock:
            self._memreport = memreport

    def _feed_line(self, text: str) -> None:
        """Keep `text` in the tail, feed it to the memory report and the hooks (never raises)."""
        with self._log_lock:
            self._tail.append(text)
            hooks = list(self._line_hooks)
        if self._memreport is not None:
            with self._mem_lock:
                try:
                    self._memreport.feed(text)
                except Exception:  # a parser bug must not stop log reading
                    log.exception("memory report parser failed on %r", text)
        for fn in hooks:
            try:
                fn(text)
            except Exception:
                log.exception("log line hook failed")
