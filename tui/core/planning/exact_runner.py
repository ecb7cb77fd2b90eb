"""Exact plans off the caller's thread, newest request wins (what a UI re-planning on keystrokes needs).

A UI shows the instant estimate on every change and wants llama.cpp's figures once the settings
stop changing. `ExactRunner.submit()` returns at once; one worker thread waits `debounce_s` for the
settings to settle, runs `exact_plan` with a cancel event, and hands the result to `on_result` on
that worker thread (a UI posts it to itself as a message). A newer submit cancels the dry run in
flight, which stops its llama-server at once, and a stale result is never delivered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tui.core.planning.exact import ExactResult, exact_plan

ResultFn = Callable[[int, ExactResult], None]


class ExactRunner:
    """One background worker for exact plans; `submit` is cheap and thread-safe."""

    def __init__(self, on_result: ResultFn, *, debounce_s: float = 0.4,
                 plan_fn: Callable[..., ExactResult] = exact_plan) -> None:
        self.on_result = on_result
        self.debounce_s = debounce_s
        self._plan_fn = plan_fn
        self._cond = threading.Condition()
        self._pending: tuple[int, tuple[Any, ...], dict[str, Any]] | None = None
        self._latest = 0
        self._cancel: threading.Event | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="exact-plan", daemon=True)
        self._thread.start()

    def submit(self, *args: Any, **kwargs: Any) -> int:
        """Plan `exact_plan(*args, **kwargs)` soon; returns the request id passed to `on_result`."""
        with self._cond:
            self._latest += 1
            self._pending = (self._latest, args, kwargs)
            if self._cancel is not None:
                self._cancel.set()  # the running dry run is stale now
            self._cond.notify_all()
            return self._latest

    def cancel(self) -> None:
        """Drop the pending request and stop the running one (nothing is delivered for either)."""
        with self._cond:
            self._latest += 1
            self._pending = None
            if self._cancel is not None:
                self._cancel.set()
            self._cond.notify_all()

    def close(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._closed = True
        self.cancel()
        self._thread.join(timeout)

    def _next(self) -> tuple[int, tuple[Any, ...], dict[str, Any], threading.Event] | None:
        with self._cond:
            while True:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return None
                rid = self._latest
                # debounce: start only once no newer request came for debounce_s
                if self.debounce_s > 0 and self._cond.wait_for(lambda: self._latest != rid or self._closed, self.debounce_s):
                    continue
                job, self._pending = self._pending, None
                if job is None:
                    continue
                self._cancel = threading.Event()
                return (*job, self._cancel)

    def _run(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            rid, args, kwargs, cancel = job
            try:
                res = self._plan_fn(*args, cancel=cancel, **kwargs)
            except Exception as e:  # noqa: BLE001 - a worker must survive any bad input
                res = ExactResult("unavailable", f"exact mode failed: {e}")
            with self._cond:
                stale = rid != self._latest or cancel.is_set()
                self._cancel = None
            if not stale:
                self.on_result(rid, res)
