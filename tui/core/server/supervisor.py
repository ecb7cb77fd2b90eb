"""Launch, watch, restart and stop a real llama-server, and never leave one behind.

The supervisor owns one server process at a time. It carries the Settings it was started with (the
one version of "what is running": history and probe labels read them) and builds the argv from them
only at spawn, as a list (never a shell string), on 127.0.0.1 and a free port, with the log verbosity
that prints the memory lines (`-lv 4 --log-colors off`); the API key goes through a 0600
`--api-key-file` (`keyfile`) and the Hugging Face token through the child's environment (HF_TOKEN),
never the argv. The caller never blocks on the server: a reader and a
watcher thread per launch follow it (`launch_threads`: log file under `data_dir()/logs/`, bounded
tail, memory report, readiness with a bounded timeout), and one dispatcher thread per supervisor
(`events.EventHub`) delivers state changes and log lines to listeners in order.

No orphans: processes are started by `spawn.spawn` (own process group, parent-death signal, the
long-lived spawner thread) and registered for stop-on-exit.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from copy import deepcopy
from pathlib import Path

from tui.core.options.redact import redact_argv
from tui.core.options.settings import Settings
from tui.core.server.events import DEFAULT_TAIL_LINES, LineParser, ServerState, StateEvent, default_memreport
from tui.core.server.download_watch import Downloads, watch_spots
from tui.core.server.failures import Failure
from tui.core.server.handle import RunningSettings
from tui.core.server.history import new_log_path, open_launch_log, record_history
from tui.core.server.keyfile import KeyFile, KeyFileError, split_keys
from tui.core.server.launch import Launch, launch_argv, secret_env, spawn_failure, withhold_token
from tui.core.server.launch_threads import LaunchThreads
from tui.core.server.process import child_env, free_port, register, unregister
from tui.core.server.spawn import SpawnError, spawn

log = logging.getLogger(__name__)

DEFAULT_READY_TIMEOUT = 180.0
DEFAULT_STOP_GRACE = 5.0


class SupervisorError(RuntimeError):
    """A misuse of the supervisor (e.g. start() while a server is running); one clear sentence."""


# ----------------------------------------------------------------------------------------------


class Supervisor(LaunchThreads):
    """Owns one llama-server process at a time: start, watch, restart, stop. Thread-safe.

    `settings` is what to run (`Settings(metrics=False)`, nothing given, by default); its host and
    port are where it listens (port None: a free one). An argv is read into Settings by the one
    reader (`settings_from_argv`; unknown flags are kept in `extra_args`, which reach the server
    verbatim). `router_model` turns on router mode: `extra_args` carry `--models-preset FILE` and
    readiness means that model reports status "loaded". Listeners are called on the supervisor's own
    threads; a UI adapts them to its messages.
    """

    def __init__(
        self,
        binary: str | Path,
        settings: Settings | None = None,
        *,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
        stop_grace: float = DEFAULT_STOP_GRACE,
        tail_lines: int = DEFAULT_TAIL_LINES,
        log_dir: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        keep_llama_env: bool = False,
        router_model: str | None = None,
        poll_interval: float = 0.25,
        known_options: Iterable[str] | None = None,
        memreport_factory: Callable[[], LineParser | None] | None = default_memreport,
        record_history: bool = True,
        cwd: str | Path | None = None,
    ) -> None:
        self.binary = Path(binary)
        self.record_history = record_history
        self._settings = deepcopy(settings if settings is not None else Settings(metrics=False))
        self._auto_port: int | None = None
        self.ready_timeout = float(ready_timeout)
        self.stop_grace = float(stop_grace)
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._env = env
        self._cwd = cwd
        self._keep_llama_env = keep_llama_env
        self.router_model = router_model
        self.poll_interval = poll_interval
        self._known_options = frozenset(known_options) if known_options else None
        self._memreport_factory = memreport_factory

        LaunchThreads.__init__(self, tail_lines, f"supervisor-{id(self):x}")
        self._ids = itertools.count(1)
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
    def downloads(self) -> Downloads | None:
        """What the current (or last) launch downloads (`-hf`, `-mu`); None for a model on disk."""
        return self._launch.downloads if self._launch else None

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
    def settings(self) -> Settings:
        """The Settings the next (or current) launch runs: a copy, the supervisor keeps its own."""
        return deepcopy(self._settings)

    @property
    def api_key(self) -> str | None:
        """The first key the server requires (what this process's own requests send)."""
        key = self._settings.api_key
        keys = [k for k in key.split(",") if k] if key else []
        return keys[0] if keys else None

    def running_settings(self) -> RunningSettings | None:
        """The settings of the current launch: the Settings it was started with (None before any launch).

        Never the argv read back: the free port and the log flags the supervisor adds are not part of
        a configuration (two runs must not differ by the port they got)."""
        launch = self._launch
        return RunningSettings.from_settings(deepcopy(launch.settings)) if launch is not None else None

    # ---- control -------------------------------------------------------------------------

    def build_argv(self, settings: Settings | None = None) -> tuple[list[str], str, int | None]:
        """The argv a launch would run (log flags added; host, port and key file come at spawn) and
        its host and port."""
        s = settings or self._settings
        try:
            split_keys(s.api_key or "")  # a key the file cannot carry is refused before anything starts
            return launch_argv(self.binary, s)
        except (ValueError, KeyFileError) as e:
            raise SupervisorError(str(e)) from None

    def start(self, settings: Settings | None = None) -> Launch:
        """Start the server (returns once the process exists; use wait_ready() to wait for it)."""
        with self._lock:
            if self._state.running:
                raise SupervisorError(f"llama-server is already {self._state.value} (pid {self.pid}); "
                                      "use restart() to change its settings.")
            if settings is not None:
                self.build_argv(settings)  # refuse a bad port or key before forgetting the old settings
                self._settings = deepcopy(settings)
            launch = self._spawn_locked(port_retries=0)
        if self.record_history and launch.pid:
            record_history(launch.settings, self.binary, launch.pid, launch.log_path)
        return launch

    def restart(self, new_settings: Settings | None = None) -> Launch:
        """Stop the running server (if any) and start it again, with `new_settings` if given."""
        self.stop()
        return self.start(new_settings)

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
        key_file = KeyFile(self._settings.api_key) if self._settings.api_key else None
        if key_file is not None:
            argv += ["--api-key-file", str(key_file.path)]
        launch_id = next(self._ids)
        launch = Launch(
            id=launch_id, argv=argv, host=host, port=port, log_path=new_log_path(self._log_dir, launch_id),
            started_at=time.monotonic(), started_wall=time.time(), router_model=self.router_model,
            settings=deepcopy(self._settings), key_file=key_file, auto_port=auto, port_retries=port_retries,
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
        env = child_env(self._env, self._keep_llama_env, secret_env(launch.settings))
        withheld = withhold_token(env, launch.settings)
        if withheld and logf:
            logf.write(f"# HF_TOKEN not passed on: {withheld} is not the Hub endpoint's origin, and "
                       "llama-server would send it there as the bearer of the download\n".encode())
        launch.token_given = bool(env.get("HF_TOKEN"))
        spots = watch_spots(launch.settings, env)
        launch.downloads = Downloads(spots) if spots else None
        try:
            proc = spawn(argv, env=env, cwd=self._cwd)
        except (OSError, SpawnError) as e:
            if logf:
                logf.write(f"# could not start: {e}\n".encode())
                logf.close()
            launch.failure = spawn_failure(self.binary, e, launch.log_path)
            launch.remove_key_file()
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
        if launch.downloads is not None:
            threading.Thread(target=self._follow_downloads, args=(launch,), name=f"llama-server-{proc.pid}-download",
                             daemon=True).start()
        return launch
