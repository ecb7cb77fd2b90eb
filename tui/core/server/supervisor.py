"""Launch, watch, restart and stop a real llama-server, and never leave one behind.

The supervisor owns one server process at a time. It starts it from an argv list (never a shell
string) on 127.0.0.1 and a free port, with the log verbosity that prints the memory lines (`-lv 4
--log-colors off`). Three kinds of threads do the work so the caller never blocks on the server:

* a reader thread per launch copies the server's output to a log file (one per launch, under
  `data_dir()/logs/`), a bounded in-memory tail and the memory-report parser, and notices the
  process ending at once (EOF or a poll of the process, whichever comes first);
* a watcher thread per launch polls `/health` (503 "Loading model" = loading, 200 = ready; router
  mode: `GET /models` status of the chosen model) with a bounded, configurable timeout;
* one dispatcher thread per supervisor delivers state changes and log lines to listeners, in order,
  so a slow or failing listener never stalls the reader.

No orphans: the server runs in its own session/process group (so stop() can signal the whole group,
router children included) and, on Linux, with PR_SET_PDEATHSIG=SIGKILL so it dies with mtp-tune even
when mtp-tune is killed with SIGKILL. The fork happens on one long-lived thread, because the kernel
sends the parent-death signal when the *thread* that forked exits. An atexit hook and SIGTERM/SIGHUP
handlers stop every live server on the way out.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import ctypes.util
import datetime as _dt
import itertools
import logging
import os
import queue
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import httpx

from tui.core.server.failures import (
    Failure,
    FailureKind,
    classify,
    ready_timeout,
    router_model_failure,
    router_unknown_model,
)
from tui.core.options.reader import occurrences, without
from tui.core.options.reader import value as opt_value
from tui.core.options.redact import redact_argv
from tui.core.paths import data_dir
from tui.core.server.history import new_log_path, record_history
from tui.core.server.process import SpawnError, child_env, exited_nowait, free_port, register, spawn, unregister

log = logging.getLogger(__name__)

DEFAULT_READY_TIMEOUT = 180.0
DEFAULT_STOP_GRACE = 5.0
DEFAULT_TAIL_LINES = 2000
#: Lines kept from the start of each launch for classification (argument and load errors come first).
HEAD_LINES = 400

VERBOSITY_OPTIONS = ("-lv", "-v")  # any spelling of either (the reader knows them all)
_LOADED = re.compile(r"llama_server: (?:model loaded|listening on )")
_ROUTER_SPAWN = re.compile(r"spawning server instance with name=(\S+) on port (\d+)")
_ROUTER_EXIT = re.compile(r"instance name=(\S+) exited with status (-?\d+)")


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


def _default_memreport() -> LineParser | None:
    try:
        from tui.core.server.memreport import MemoryReport
    except ImportError:  # pragma: no cover - memreport ships with the app
        return None
    return MemoryReport()


class SupervisorError(RuntimeError):
    """A misuse of the supervisor (e.g. start() while a server is running); one clear sentence."""


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


# ----------------------------------------------------------------------------------------------
# Event delivery


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


# ----------------------------------------------------------------------------------------------


class Supervisor:
    """Owns one llama-server process at a time: start, watch, restart, stop. Thread-safe.

    `args` are llama-server's arguments without the binary (e.g. `["-m", "model.gguf", "-c", "4096"]`);
    `--host`/`--port` in them override `host`/`port`. `router_model` turns on router mode: the args
    carry `--models-preset FILE` and readiness means that model reports status "loaded".
    Listeners are called on the supervisor's own threads; a UI adapts them to its messages.
    """

    def __init__(
        self,
        binary: str | Path,
        args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
        stop_grace: float = DEFAULT_STOP_GRACE,
        tail_lines: int = DEFAULT_TAIL_LINES,
        log_dir: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        keep_llama_env: bool = False,
        api_key: str | None = None,
        router_model: str | None = None,
        poll_interval: float = 0.25,
        known_options: Iterable[str] | None = None,
        memreport_factory: Callable[[], LineParser | None] | None = _default_memreport,
        record_history: bool = True,
        cwd: str | Path | None = None,
    ) -> None:
        self.binary = Path(binary)
        self.record_history = record_history
        self._args = list(args)
        self._host = host
        self._fixed_port = port
        self._auto_port: int | None = None
        self.ready_timeout = float(ready_timeout)
        self.stop_grace = float(stop_grace)
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._env = env
        self._cwd = cwd
        self._keep_llama_env = keep_llama_env
        self._api_key = api_key
        self.router_model = router_model
        self.poll_interval = poll_interval
        self._known_options = frozenset(known_options) if known_options else None
        self._memreport_factory = memreport_factory

        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._mem_lock = threading.Lock()
        self._state = ServerState.STOPPED
        self._launch: Launch | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._memreport: LineParser | None = None
        self._line_hooks: list[Callable[[str], None]] = []
        self._ids = itertools.count(1)
        self.events = EventHub(f"supervisor-{id(self):x}")
        register(self)

    # ---- read-only views -----------------------------------------------------------------

    @property
    def state(self) -> ServerState:
        return self._state

    @property
    def launch(self) -> Launch | None:
        """The current (or last) launch."""
        return self._launch

    @property
    def failure(self) -> Failure | None:
        return self._launch.failure if self._launch else None

    @property
    def pid(self) -> int | None:
        return self._launch.pid if self._launch else None

    @property
    def base_url(self) -> str | None:
        return self._launch.url if self._launch else None

    @property
    def port(self) -> int | None:
        return self._launch.port if self._launch else None

    @property
    def log_path(self) -> Path | None:
        return self._launch.log_path if self._launch else None

    @property
    def args(self) -> list[str]:
        return list(self._args)

    @property
    def api_key(self) -> str | None:
        if self._api_key:
            return self._api_key
        given = opt_value(self._args, "--api-key")
        return given.split(",")[0] if given else None

    def tail(self, n: int | None = None) -> list[str]:
        """The last log lines of the current launch (bounded)."""
        with self._lock:
            lines = list(self._tail)
        return lines if n is None else lines[-n:]

    def memory_report(self) -> LineParser | None:
        """The live memory-report parser of the current launch (read it via memory_snapshot())."""
        return self._memreport

    def memory_snapshot(self) -> dict[str, Any] | None:
        """A consistent copy of the memory report (`to_dict()`), safe while the reader feeds it."""
        with self._mem_lock:
            rep = self._memreport
            to_dict = getattr(rep, "to_dict", None)
            return to_dict() if callable(to_dict) else None

    # ---- listeners -----------------------------------------------------------------------

    def add_state_listener(self, fn: StateListener) -> Callable[[], None]:
        """Call `fn(StateEvent)` on each state change; returns an unsubscribe function."""
        return self.events.add_state_listener(fn)

    def add_log_listener(self, fn: LogListener) -> Callable[[], None]:
        """Call `fn(LogLine)` for each server log line (on the dispatcher thread)."""
        return self.events.add_log_listener(fn)

    def on_log_line(self, fn: Callable[[str], None]) -> Callable[[], None]:
        """Feed every log line to `fn` synchronously on the reader thread (parsers; keep it fast)."""
        with self._lock:
            self._line_hooks.append(fn)

        def remove() -> None:
            with self._lock:
                if fn in self._line_hooks:
                    self._line_hooks.remove(fn)

        return remove

    # ---- control -------------------------------------------------------------------------

    def build_argv(self, args: Sequence[str] | None = None) -> tuple[list[str], str, int | None]:
        """The argv a launch would run (host, port and log flags added) and its host and port."""
        given = list(self._args if args is None else args)
        host = opt_value(given, "--host") or self._host
        port_s = opt_value(given, "--port")
        rest = without(given, "--host", "--port")
        try:
            port = int(port_s) if port_s else self._fixed_port
        except ValueError:
            raise SupervisorError(f"--port {port_s}: not a port number; give 1-65535 or leave it out "
                                  "so mtp-tune picks a free port.") from None
        argv = [str(self.binary), *rest]
        if not any(occurrences(rest, f) for f in VERBOSITY_OPTIONS):
            argv += ["-lv", "4"]
        if not occurrences(rest, "--log-colors"):
            argv += ["--log-colors", "off"]
        return argv, host, port

    def start(self, args: Sequence[str] | None = None) -> Launch:
        """Start the server (returns once the process exists; use wait_ready() to wait for it)."""
        with self._lock:
            if self._state.running:
                raise SupervisorError(f"llama-server is already {self._state.value} (pid {self.pid}); "
                                      "use restart() to change its settings.")
            if args is not None:
                self._args = list(args)
            launch = self._spawn_locked(port_retries=0)
        if self.record_history and launch.pid:
            record_history(self._args, self.binary, launch.pid, launch.log_path)
        return launch

    def restart(self, new_args: Sequence[str] | None = None) -> Launch:
        """Stop the running server (if any) and start it again, with `new_args` if given."""
        self.stop()
        return self.start(new_args)

    def wait_ready(self, timeout: float | None = None) -> ServerState:
        """Block until ready or ended (or `timeout`); returns the state then."""
        limit = self.ready_timeout + self.stop_grace + 10.0 if timeout is None else timeout
        deadline = time.monotonic() + limit
        with self._cond:
            while self._state not in (ServerState.READY,) and not self._state.final:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._state

    def wait_for(self, states: Iterable[ServerState], timeout: float) -> ServerState:
        """Block until the state is one of `states` (or `timeout`); returns the state then."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._state not in wanted:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._state

    def stop(self, grace: float | None = None) -> int | None:
        """SIGTERM the server's process group, wait `grace` s, then SIGKILL it. Returns the exit code."""
        grace = self.stop_grace if grace is None else grace
        with self._lock:
            launch, proc = self._launch, self._proc
            if launch is None or proc is None or launch.exited.is_set():
                return launch.exit_code if launch else None
            launch.stop_requested = True
            self._set_state(launch, ServerState.STOPPING)
        self._terminate(launch, proc, grace)
        return launch.exit_code

    def close(self) -> None:
        """Stop the server and forget this supervisor (no more cleanup on exit needed)."""
        self.stop()
        unregister(self)

    def __enter__(self) -> "Supervisor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals: launching ------------------------------------------------------------

    def _spawn_locked(self, port_retries: int) -> Launch:
        argv, host, port = self.build_argv()
        auto = port is None
        if port is None:
            if self._auto_port is None or port_retries:
                self._auto_port = free_port(host if host not in ("0.0.0.0", "::") else "127.0.0.1")
            port = self._auto_port
        argv += ["--host", host, "--port", str(port)]
        launch_id = next(self._ids)
        launch = Launch(
            id=launch_id, argv=argv, host=host, port=port, log_path=new_log_path(self._log_dir, launch_id),
            started_at=time.monotonic(), started_wall=time.time(), router_model=self.router_model,
            auto_port=auto, port_retries=port_retries,
        )
        previous = self._state
        self._launch = launch
        self._tail.clear()
        with self._mem_lock:
            self._memreport = self._memreport_factory() if self._memreport_factory else None
        self._state = ServerState.STARTING
        self._cond.notify_all()
        detail = " ".join(redact_argv(argv))
        if port_retries:
            detail = f"the free port picked before was taken meanwhile; retrying on port {port}: {detail}"
        self.events.emit_state(StateEvent(ServerState.STARTING, previous, launch_id, launch.started_at, detail=detail))
        logf = None
        if launch.log_path is not None:
            try:
                logf = open(launch.log_path, "ab", buffering=0)
                header = f"# mtp-tune launch {launch_id} at {_dt.datetime.now().isoformat(timespec='seconds')}\n"
                header += "# argv: " + " ".join(redact_argv(argv)) + "\n"
                logf.write(header.encode())
            except OSError:
                logf = None
        env = child_env(self._env, self._keep_llama_env)
        try:
            proc = spawn(argv, env=env, cwd=self._cwd)
        except (OSError, SpawnError) as e:
            if logf:
                logf.write(f"# could not start: {e}\n".encode())
                logf.close()
            launch.failure = _spawn_failure(self.binary, e, launch.log_path)
            launch.ended_at = time.monotonic()
            launch.exited.set()
            self._set_state(launch, ServerState.FAILED, launch.failure)
            return launch
        self._proc = proc
        launch.pid = proc.pid
        threading.Thread(target=self._read, args=(launch, proc, logf), name=f"llama-server-{proc.pid}-reader",
                         daemon=True).start()
        threading.Thread(target=self._watch, args=(launch, proc), name=f"llama-server-{proc.pid}-watch",
                         daemon=True).start()
        return launch

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
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        poller = select.poll()  # not select(): fds above 1024 are normal in a long-running app
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        buf = b""
        try:
            ended = False
            while not ended:
                if poller.poll(200):
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                elif exited_nowait(proc.pid):
                    # Ended, but a grandchild may hold the pipe open: take what is there and stop.
                    chunk, ended = self._drain(fd), True
                else:
                    continue
                if logf:
                    try:
                        logf.write(chunk)
                    except OSError:
                        pass
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    self._on_line(launch, raw)
            if buf:
                self._on_line(launch, buf)
        finally:
            rc = self._reap(proc)
            if logf:
                try:
                    logf.write(f"# exit code {rc}\n".encode())
                    logf.close()
                except OSError:
                    pass
            try:
                proc.stdout.close()
            except OSError:
                pass
            self._on_exit(launch, rc)
            launch.wake.set()

    @staticmethod
    def _drain(fd: int) -> bytes:
        """Whatever is readable right now (bounded, in case a writer keeps going)."""
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        out = b""
        while len(out) < 16 * 1024 * 1024 and poller.poll(0):
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
        return out

    def _on_line(self, launch: Launch, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        now = time.monotonic()
        with self._lock:
            current = launch is self._launch
            launch.n_lines += 1
            if len(launch.head) < HEAD_LINES:
                launch.head.append(text)
            if current:
                self._tail.append(text)
            hooks = list(self._line_hooks) if current else []
        if current and self._memreport is not None:
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
        if _LOADED.search(text):
            launch.loaded_line.set()
            launch.wake.set()
        if launch.router_model:
            m = _ROUTER_SPAWN.search(text)
            if m:
                launch.router_ports[m.group(1)] = m.group(2)
            m = _ROUTER_EXIT.search(text)
            if m:
                launch.router_exits[m.group(1)] = (int(m.group(2)), launch.n_lines)
                if m.group(1) == launch.router_model and int(m.group(2)) != 0:
                    self._router_child_died(launch, int(m.group(2)))
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

    def _reap(self, proc: subprocess.Popen[bytes]) -> int:
        """Wait for the leader without reaping, kill what is left of its group, then reap it."""
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # stragglers (router children); leader is a zombie
        except (ProcessLookupError, PermissionError):
            pass
        return proc.wait()

    def _launch_lines(self, launch: Launch) -> list[str]:
        with self._lock:
            tail = list(self._tail) if launch is self._launch else []
        head = launch.head
        skipped = max(0, launch.n_lines - len(head) - len(tail))
        overlap = max(0, len(head) + len(tail) - launch.n_lines)
        return head + (["# ..."] if skipped else []) + tail[overlap:]

    def _on_exit(self, launch: Launch, rc: int) -> None:
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
                                   was_ready=launch.ready_at is not None, known_options=self._known_options)
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

    def _client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(timeout=httpx.Timeout(5.0, connect=2.0), headers=headers, trust_env=False)

    def _watch(self, launch: Launch, proc: subprocess.Popen[bytes]) -> None:
        deadline = launch.started_at + self.ready_timeout
        interval = 0.01
        try:
            with self._client() as http:
                base = launch.url
                router_loading_since: float | None = None
                seen_loading = False
                while not launch.exited.is_set() and not launch.stop_requested:
                    if time.monotonic() > deadline:
                        self._fail_and_kill(launch, proc, ready_timeout(
                            self.ready_timeout, self._state.value, launch.log_path,
                            (self.tail(1) or [None])[-1]))
                        return
                    if router_loading_since is None:
                        code = _get_status(http, base + "/health")
                        if code == 503:
                            self._set_state(launch, ServerState.LOADING)
                        elif code == 200:
                            if not launch.router_model:
                                # Let the reader catch up with the load lines, so the memory report is
                                # complete when READY is announced (bounded; the log line may be absent).
                                launch.loaded_line.wait(1.0)
                                self._set_state(launch, ServerState.READY)
                                return
                            failure = self._router_trigger_load(http, base, launch)
                            if failure is not None:
                                self._fail_and_kill(launch, proc, failure)
                                return
                            router_loading_since = launch.n_lines
                            self._set_state(launch, ServerState.LOADING)
                    else:
                        status = self._router_status(http, base, launch.router_model)
                        value = (status or {}).get("value")
                        if value == "loaded":
                            self._set_state(launch, ServerState.READY)
                            return
                        if value == "loading":
                            seen_loading = True
                        ex = launch.router_exits.get(launch.router_model)
                        child_failed = ex is not None and ex[0] != 0 and ex[1] > router_loading_since
                        if child_failed or (status and status.get("failed") and seen_loading and value != "loading"):
                            code = ex[0] if ex else status.get("exit_code") if status else None
                            self._fail_and_kill(launch, proc, router_model_failure(
                                launch.router_model, code, self._router_child_lines(launch), launch.log_path))
                            return
                    if launch.wake.wait(interval):
                        launch.wake.clear()
                    interval = min(self.poll_interval, interval * 2)
        except Exception as e:  # pragma: no cover - a bug here must not leave the launch hanging
            log.exception("readiness watcher failed")
            self._fail_and_kill(launch, proc, Failure(
                FailureKind.UNKNOWN, f"mtp-tune's readiness check failed ({e!r}), so it stopped llama-server.",
                None, "Report this mtp-tune bug with the log.", raw_log_path=launch.log_path))

    def _router_trigger_load(self, http: httpx.Client, base: str, launch: Launch) -> Failure | None:
        name = launch.router_model
        assert name is not None
        try:
            r = http.post(base + "/models/load", json={"model": name})
        except httpx.HTTPError:
            return None  # the process is probably ending; the reader will classify it
        if r.status_code == 404 or (r.status_code == 400 and "not found" in r.text):
            names: list[str] = []
            try:
                names = [m.get("id", "?") for m in http.get(base + "/models").json().get("data", [])]
            except (httpx.HTTPError, ValueError, AttributeError):
                pass
            return router_unknown_model(name, names, launch.log_path)
        return None  # 200 success, or 400 "model is already running"

    @staticmethod
    def _router_status(http: httpx.Client, base: str, name: str | None) -> dict[str, Any] | None:
        try:
            r = http.get(base + "/models")
            data = r.json().get("data", []) if r.status_code == 200 else []
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        for m in data:
            if m.get("id") == name or name in (m.get("aliases") or []):
                st = m.get("status")
                return st if isinstance(st, dict) else None
        return None

    def _router_child_lines(self, launch: Launch) -> list[str]:
        port = launch.router_ports.get(launch.router_model or "")
        lines = self._launch_lines(launch)
        if port is None:
            return lines
        prefix = f"[{port}] "
        return [ln for ln in lines if ln.startswith(prefix)] or lines

    def _fail_and_kill(self, launch: Launch, proc: subprocess.Popen[bytes], failure: Failure) -> None:
        with self._lock:
            if launch.exited.is_set() or launch.stop_requested:
                return
            launch.failure = failure
        self._terminate(launch, proc, self.stop_grace)

    def _terminate(self, launch: Launch, proc: subprocess.Popen[bytes], grace: float) -> None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            if launch.exited.is_set():
                return
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            except PermissionError:  # pragma: no cover - group gone and pid reused elsewhere
                proc.send_signal(sig)
            if launch.exited.wait(wait):
                return
        # The reader should have reaped it by now; if not, do not hang the caller.
        log.warning("llama-server pid %s did not go away after SIGKILL", proc.pid)

    def _terminate_now(self, grace: float) -> None:
        with self._lock:
            launch, proc = self._launch, self._proc
            if launch is None or proc is None or launch.exited.is_set():
                return
            launch.stop_requested = True
        self._terminate(launch, proc, grace)


def _get_status(http: httpx.Client, url: str) -> int | None:
    try:
        return http.get(url).status_code
    except httpx.HTTPError:
        return None


def _spawn_failure(binary: Path, e: BaseException, log_path: Path | None) -> Failure:
    if isinstance(e, FileNotFoundError):
        msg = f"The llama-server binary {binary} does not exist."
    elif isinstance(e, PermissionError):
        msg = f"The llama-server binary {binary} is not executable (permission denied)."
    else:
        msg = f"llama-server ({binary}) could not be started: {e}."
    return Failure(FailureKind.SERVER_NOT_FOUND, msg, str(binary),
                   "Point mtp-tune at a working llama-server (--server-bin, $MTP_TUNE_LLAMA_SERVER) or let it "
                   "build one.", raw_log_path=log_path)
