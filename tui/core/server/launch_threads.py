"""The threads that follow one launch and what they decide: ready, failed, exited, or a retry.

`LaunchThreads` is the supervisor's half that runs on its own threads: a reader thread per launch
copies the server's output to the log file, the tail and the memory-report parser and notices the
process ending at once; a watcher thread per launch asks `readiness` until the server is ready (or
the timeout); the end is classified into a `Failure`, and an automatic port taken between choosing
and binding it is retried once. Starting a launch (`_spawn_locked`) is the `Supervisor`'s.

A launch that downloads its model (`-hf`, `-mu`) has a download thread too: it polls the files
llama.cpp writes (`download_watch.Downloads`) while the server is starting and tells the download
listeners; the ready timeout then counts from the download's last progress, not from the start, so
a model that takes an hour to download is not stopped while it still arrives.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from tui.core.server.classify import classify, router_model_failure
from tui.core.server.download_failures import download_stalled
from tui.core.server.download_watch import Downloads
from tui.core.server.events import EventHub, HandleCore, LogLine, ServerState, StateEvent
from tui.core.server.failures import Failure, FailureKind, ready_timeout
from tui.core.server.launch import Launch
from tui.core.server.process import kill_group, pump_output
from tui.core.server.readiness import watch_launch

log = logging.getLogger(__name__)

DOWNLOAD_POLL_S = 0.5
DownloadListener = Callable[[Downloads], None]
_EXTEND = Failure(FailureKind.UNKNOWN, "still downloading")  # the watcher's "not yet": a new deadline, no stop


class LaunchThreads(HandleCore):
    """State, the reader and watcher threads of each launch, and stopping it. Thread-safe."""

    ready_timeout: float
    stop_grace: float
    poll_interval: float
    _known_options: frozenset[str] | None

    def __init__(self, tail_lines: int, name: str) -> None:
        HandleCore.__init__(self, tail_lines)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._state = ServerState.STOPPED
        self._launch: Launch | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._download_listeners: list[DownloadListener] = []
        self.events = EventHub(name)

    def add_download_listener(self, fn: DownloadListener) -> Callable[[], None]:
        """Call `fn(downloads)` when a download of a launch moves (at most every DOWNLOAD_POLL_S s, on
        the launch's download thread: keep it fast, post or print); returns an unsubscribe function."""
        with self._lock:
            self._download_listeners.append(fn)

        def remove() -> None:
            with self._lock:
                if fn in self._download_listeners:
                    self._download_listeners.remove(fn)

        return remove

    @property
    def api_key(self) -> str | None:  # the Supervisor's: the key its readiness polls send
        raise NotImplementedError

    def _spawn_locked(self, port_retries: int) -> Launch:  # the Supervisor's
        raise NotImplementedError

    def _set_state(self, launch: Launch, new: ServerState, failure: Failure | None = None, detail: str = "") -> bool:
        with self._lock:
            if launch is not self._launch or self._state == new:
                return False
            if self._state.final and new != ServerState.STARTING:
                return False
            if self._state == ServerState.STOPPING and not new.final:
                return False
            previous = self._state
            self._state = new
            now = time.monotonic()
            if new == ServerState.READY:
                launch.ready_at = now
            self._cond.notify_all()
            self.events.emit_state(StateEvent(new, previous, launch.id, now, failure, detail))
            return True

    # ---- internals: the reader thread ----------------------------------------------------

    def _read(self, launch: Launch, proc: subprocess.Popen[bytes], logf: Any) -> None:
        try:
            pump_output(proc, logf, lambda raw: self._on_line(launch, raw))
        finally:  # pump_output reaps the process even when it fails
            self._on_exit(launch, proc.returncode if proc.returncode is not None else -1)
            launch.wake.set()

    def _on_line(self, launch: Launch, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        now = time.monotonic()
        with self._lock:
            current = launch is self._launch
            child_died = launch.note_line(text)
        if current:
            self._feed_line(text)
        if launch.downloads is not None:
            launch.downloads.feed(text)
        if child_died is not None:
            self._router_child_died(launch, child_died)
        if current:
            self.events.emit_log(LogLine(launch.id, text, now))

    def _router_child_died(self, launch: Launch, status: int) -> None:
        """The model's child crashed after it was ready: the router lives on, but the model is gone."""
        with self._lock:
            proc = self._proc
            if launch is not self._launch or self._state != ServerState.READY or launch.stop_requested or proc is None:
                return
        failure = router_model_failure(launch.router_model, status, self._router_child_lines(launch), launch.log_path)
        # Stop the router too, as for any failure; not on this (reader) thread, which must see the exit.
        threading.Thread(target=self._fail_and_kill, args=(launch, proc, failure),
                         name="llama-server-router-child-died", daemon=True).start()

    def _launch_lines(self, launch: Launch) -> list[str]:
        with self._lock:
            tail = self.tail() if launch is self._launch else []
        head = launch.head
        skipped = max(0, launch.n_lines - len(head) - len(tail))
        overlap = max(0, len(head) + len(tail) - launch.n_lines)
        return head + (["# ..."] if skipped else []) + tail[overlap:]

    def _on_exit(self, launch: Launch, rc: int) -> None:
        launch.remove_key_file()  # before anyone hears of the end: a stopped launch leaves no key behind
        if launch.downloads is not None:
            launch.downloads.finish()  # before anyone hears of the end: an unfinished download stopped
        launch.ended_at = time.monotonic()
        launch.exit_code = rc
        retry = False
        with self._lock:
            if launch.stop_requested:
                new, failure = ServerState.STOPPED, None
            elif launch.failure is not None:  # ready timeout or router failure, decided by the watcher
                new, failure = ServerState.FAILED, launch.failure
            else:
                failure = classify(rc, self._launch_lines(launch), raw_log_path=launch.log_path, argv=launch.argv,
                                   was_ready=launch.ready_at is not None, known_options=self._known_options,
                                   token_given=launch.token_given)
                launch.failure = failure
                new = ServerState.EXITED if rc == 0 else ServerState.FAILED
                retry = (failure.kind == FailureKind.PORT_IN_USE and launch.auto_port
                         and launch.port_retries == 0 and launch.ready_at is None and launch is self._launch)
            if retry:
                # Our free port was taken between choosing it and binding it: try once more on a new one.
                launch.exited.set()
                self._spawn_locked(port_retries=1)
                return
            self._set_state(launch, new, failure)
            if launch is self._launch:
                self._proc = None
        launch.exited.set()

    # ---- internals: readiness ------------------------------------------------------------

    def _watch(self, launch: Launch, proc: subprocess.Popen[bytes]) -> None:
        budget = self.ready_timeout
        while True:
            more: list[float] = []
            watch_launch(
                launch, self.api_key, budget, self.poll_interval,
                set_state=lambda st: self._set_state(launch, st),
                fail=lambda failure: None if failure is _EXTEND else self._fail_and_kill(launch, proc, failure),
                timed_out=lambda: self._timed_out(launch, more),
                child_lines=lambda: self._router_child_lines(launch),
            )
            if not more:
                return
            budget = more[0]

    def _timed_out(self, launch: Launch, more: list[float]) -> Failure:
        """The ready timeout ran out: a download that moved within it earns a new deadline (`more`)."""
        dl = launch.downloads
        last = dl.last_activity if dl is not None else None
        if last is not None and time.monotonic() - last < self.ready_timeout:
            more.append(last - launch.started_at + self.ready_timeout)
            return _EXTEND
        if dl is not None and dl.active:
            return download_stalled(dl.summary(), self.ready_timeout, launch.log_path)
        return ready_timeout(self.ready_timeout, self._state.value, launch.log_path, (self.tail(1) or [None])[-1])

    # ---- internals: downloads ------------------------------------------------------------

    def _follow_downloads(self, launch: Launch) -> None:
        """The launch's download thread: polls where -hf/-mu write while the server starts (bounded by
        the launch: it ends once the server loads, or ends)."""
        dl = launch.downloads
        if dl is None:
            return
        told: object = ()  # the signature of no download: listeners hear of the first one found

        def over() -> bool:  # under self._cond
            return (launch.exited.is_set() or launch is not self._launch
                    or self._state not in (ServerState.STARTING, ServerState.STOPPING))

        try:
            while True:
                dl.check()
                with self._cond:
                    if over():
                        break
                told = self._tell_downloads(dl, told)
                with self._cond:  # a state change (loading, ready, the end) wakes it at once
                    self._cond.wait_for(over, DOWNLOAD_POLL_S)
            dl.check()
            if launch.exited.is_set():
                dl.finish()
            self._tell_downloads(dl, told)
        except Exception:  # pragma: no cover - a bug here must not take the launch down
            log.exception("download watcher failed")

    def _tell_downloads(self, dl: Downloads, told: object) -> object:
        now = dl.signature()
        if now != told:
            with self._lock:
                listeners = list(self._download_listeners)
            for fn in listeners:
                try:
                    fn(dl)
                except Exception:  # a listener bug must not stop the polling
                    log.exception("download listener failed")
        return now

    def _router_child_lines(self, launch: Launch) -> list[str]:
        return launch.router_child_lines(self._launch_lines(launch))

    def _fail_and_kill(self, launch: Launch, proc: subprocess.Popen[bytes], failure: Failure) -> None:
        with self._lock:
            if launch.exited.is_set() or launch.stop_requested:
                return
            launch.failure = failure
        self._terminate(launch, proc, self.stop_grace)

    def _terminate(self, launch: Launch, proc: subprocess.Popen[bytes], grace: float) -> None:
        # The reader thread reaps the process: its exit event says when it is gone (never hangs the caller).
        kill_group(proc, grace, ended=launch.exited.wait)

    def _terminate_now(self, grace: float) -> None:
        with self._lock:
            launch, proc = self._launch, self._proc
            if launch is None or proc is None or launch.exited.is_set():
                return
            launch.stop_requested = True
        self._terminate(launch, proc, grace)
