"""Launch, watch, restart and stop a real llama-server, and never leave one behind.

The supervisor owns one server process at a time. It starts it from an argv list (never a shell
string) on 127.0.0.1 and a free port, with the log verbosity that prints the memory lines (`-lv 4
--log-colors off`). Three kinds of threads do the work so the caller never blocks on the server:

* a reader thread per launch copies the server's output to a log file (one per launch, under
  `data_dir()/logs/`), a bounded in-memory tail and the memory-report parser, and notices the
  process ending at once (EOF or a poll of the process, whichever comes first);
* a watcher thread per launch asks `readiness.Readiness` (/health; router: the model's /models
  status) with a bounded, configurable timeout;
* one dispatcher thread per supervisor (`events.EventHub`) delivers state changes and log lines to
  listeners, in order, so a slow or failing listener never stalls the reader.

No orphans: processes are started by `process.spawn` (own process group, parent-death signal, the
long-lived spawner thread) and registered for stop-on-exit.
"""

from __future__ import annotations

import itertools
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tui.core.options.reader import value as opt_value
from tui.core.options.redact import redact_argv
from tui.core.server.classify import classify, router_model_failure
from tui.core.server.events import (
    DEFAULT_TAIL_LINES,
    EventHub,
    HandleCore,
    LineParser,
    LogLine,
    ServerState,
    StateEvent,
    default_memreport,
)
from tui.core.server.failures import Failure, FailureKind, ready_timeout
from tui.core.server.handle import RunningSettings
from tui.core.server.history import new_log_path, open_launch_log, record_history
from tui.core.server.launch import Launch, launch_argv, spawn_failure
from tui.core.server.process import (
    SpawnError,
    child_env,
    free_port,
    kill_group,
    pump_output,
    register,
    spawn,
    unregister,
)
from tui.core.server.readiness import watch_launch

log = logging.getLogger(__name__)

DEFAULT_READY_TIMEOUT = 180.0
DEFAULT_STOP_GRACE = 5.0



class SupervisorError(RuntimeError):
    """A misuse of the supervisor (e.g. start() while a server is running); one clear sentence."""


# ----------------------------------------------------------------------------------------------


class Supervisor(HandleCore):
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
        memreport_factory: Callable[[], LineParser | None] | None = default_memreport,
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

        HandleCore.__init__(self, tail_lines)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._state = ServerState.STOPPED
        self._launch: Launch | None = None
        self._proc: subprocess.Popen[bytes] | None = None
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

    def running_settings(self) -> RunningSettings | None:
        """The settings of the current launch, read from the options it ran with (None before any launch).

        The options as launched, without the log flags, host and port the supervisor adds (they are
        not part of a configuration: two runs must not differ by the free port they got)."""
        launch = self._launch
        return RunningSettings.from_argv(launch.args) if launch is not None else None

    # ---- control -------------------------------------------------------------------------

    def build_argv(self, args: Sequence[str] | None = None) -> tuple[list[str], str, int | None]:
        """The argv a launch would run (host, port and log flags added) and its host and port."""
        try:
            return launch_argv(self.binary, self._args if args is None else args, self._host, self._fixed_port)
        except ValueError as e:
            raise SupervisorError(str(e)) from None

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
        return self._wait_until(lambda: self._state == ServerState.READY or self._state.final, limit)

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

    def release(self) -> None:
        self.close()

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
            args=list(self._args), auto_port=auto, port_retries=port_retries,
        )
        previous = self._state
        self._launch = launch
        self._reset_log(self._memreport_factory() if self._memreport_factory else None)
        self._state = ServerState.STARTING
        self._cond.notify_all()
        detail = " ".join(redact_argv(argv))
        if port_retries:
            detail = f"the free port picked before was taken meanwhile; retrying on port {port}: {detail}"
        self.events.emit_state(StateEvent(ServerState.STARTING, previous, launch_id, launch.started_at, detail=detail))
        logf = open_launch_log(launch.log_path, launch_id, argv)
        env = child_env(self._env, self._keep_llama_env)
        try:
            proc = spawn(argv, env=env, cwd=self._cwd)
        except (OSError, SpawnError) as e:
            if logf:
                logf.write(f"# could not start: {e}\n".encode())
                logf.close()
            launch.failure = spawn_failure(self.binary, e, launch.log_path)
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

    def _watch(self, launch: Launch, proc: subprocess.Popen[bytes]) -> None:
        watch_launch(
            launch, self.api_key, self.ready_timeout, self.poll_interval,
            set_state=lambda st: self._set_state(launch, st),
            fail=lambda failure: self._fail_and_kill(launch, proc, failure),
            timed_out=lambda: ready_timeout(self.ready_timeout, self._state.value, launch.log_path,
                                            (self.tail(1) or [None])[-1]),
            child_lines=lambda: self._router_child_lines(launch),
        )

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
