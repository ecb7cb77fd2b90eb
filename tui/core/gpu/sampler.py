"""The telemetry sampler: one background thread, immutable snapshots, never blocking a reader.

NVML calls take milliseconds and can stall on a sick GPU, so they never run on the UI thread.
The thread publishes each pass as a frozen `GpuSnapshot` by swapping one reference: `latest`
costs a reader nothing and can never see a half-written sample. Subscribers are called on the
sampler thread and must return quickly (the TUI posts a coalescing message and returns).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from tui.core.gpu.collect import TelemetrySource, collect_snapshot
from tui.core.gpu.types import GpuSnapshot, ServerView

DEFAULT_INTERVAL_S: Final = 1.0
MIN_INTERVAL_S: Final = 0.001

Subscriber = Callable[[GpuSnapshot], None]
ServerInput = ServerView | Callable[[], ServerView | None] | None


class GpuSampler:
    """Polls `source` every `interval_s` on a daemon thread between `start()` and `stop()`.

    `server` (a `ServerView` or a callable returning one) tells each pass which pids are ours and
    which model buffers the server reported, for the spill warning.
    """

    def __init__(
        self,
        source: TelemetrySource,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        server: ServerInput = None,
        proc_root: Path | str = "/proc",
        read_host: bool = True,
        thread_name: str = "mtp-tune-gpu-sampler",
    ) -> None:
        self._source = source
        self._interval_s = self._check_interval(interval_s)
        self._server = server
        self._proc_root = proc_root
        self._read_host = read_host
        self._thread_name = thread_name
        self._latest: GpuSnapshot | None = None
        self._seq = 0
        self._subscribers: tuple[Subscriber, ...] = ()
        self._sub_lock = threading.Lock()
        self._pass_lock = threading.Lock()  # one pass at a time (thread or sample_now)
        self._published = threading.Condition()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._errors: list[str] = []

    @staticmethod
    def _check_interval(value: float) -> float:
        if not value or value < MIN_INTERVAL_S:
            raise ValueError(f"sampler interval must be at least {MIN_INTERVAL_S} s, got {value!r}")
        return float(value)

    # -- reading (never blocks) ----------------------------------------------------------------

    @property
    def latest(self) -> GpuSnapshot | None:
        """The newest snapshot, or None before the first pass. One attribute read, lock-free."""
        return self._latest

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        self._interval_s = self._check_interval(value)
        self._wake.set()  # re-plan the next pass with the new interval

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def errors(self) -> tuple[str, ...]:
        """Recent subscriber or pass errors (kept, not raised: the thread must survive them)."""
        return tuple(self._errors)

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback(snapshot)` on the sampler thread after every pass; returns unsubscribe."""
        with self._sub_lock:
            self._subscribers = (*self._subscribers, callback)

        def unsubscribe() -> None:
            with self._sub_lock:
                subs = list(self._subscribers)
                if callback in subs:
                    subs.remove(callback)
                self._subscribers = tuple(subs)

        return unsubscribe

    def wait_for_next(self, after_seq: int = 0, timeout_s: float = 5.0) -> GpuSnapshot | None:
        """Block until a snapshot newer than `after_seq` exists (for CLIs and tests), or timeout."""
        deadline = time.monotonic() + timeout_s
        with self._published:
            while self._latest is None or self._latest.seq <= after_seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._published.wait(left)
            return self._latest

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start polling (a second call while running does nothing)."""
        if self.running:
            return
        self._stop = False
        self._wake.clear()
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> bool:
        """Stop polling; True when the thread ended within `timeout_s` (a pass may be in NVML)."""
        thread = self._thread
        self._stop = True
        self._wake.set()
        if thread is None:
            return True
        thread.join(timeout_s)
        if thread.is_alive():
            return False
        self._thread = None
        return True

    def refresh(self) -> None:
        """Take the next sample now instead of at the next tick."""
        self._wake.set()

    def sample_now(self) -> GpuSnapshot:
        """Run one pass on the caller's thread and publish it (used by the CLI's one-shot mode)."""
        return self._pass()

    # -- the thread ----------------------------------------------------------------------------

    def _server_view(self) -> ServerView | None:
        server = self._server
        if server is None or isinstance(server, ServerView):
            return server
        try:
            return server()
        except Exception as exc:  # noqa: BLE001 - a broken provider must not stop sampling
            self._note_error(f"server provider failed: {type(exc).__name__}: {exc}")
            return None

    def _note_error(self, text: str) -> None:
        self._errors = [*self._errors[-19:], text]

    def _pass(self) -> GpuSnapshot:
        with self._pass_lock:
            self._seq += 1
            snapshot = collect_snapshot(
                self._source,
                seq=self._seq,
                server=self._server_view(),
                proc_root=self._proc_root,
                read_host=self._read_host,
            )
            with self._published:
                self._latest = snapshot
                self._published.notify_all()
        for callback in self._subscribers:
            try:
                callback(snapshot)
            except Exception as exc:  # noqa: BLE001 - one bad subscriber must not starve the others
                self._note_error(f"subscriber {callback!r} failed: {type(exc).__name__}: {exc}")
        return snapshot

    def _run(self) -> None:
        while not self._stop:
            started = time.monotonic()
            try:
                self._pass()
            except Exception as exc:  # noqa: BLE001 - keep polling; the error is visible in .errors
                self._note_error(f"sampling pass failed: {type(exc).__name__}: {exc}")
            if self._stop:
                break
            delay = self._interval_s - (time.monotonic() - started)
            if delay > 0:
                self._wake.wait(delay)
            self._wake.clear()
