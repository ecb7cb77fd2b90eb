"""The one readiness poller: `/health` (503 = loading, 200 = ready) and, for a router, `/models`.

The supervisor's watcher thread and the attachment's poller both ask through a `Readiness`, which
talks through the client module's sync client, so the two can never disagree about what a status
code or a router model status means.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tui.core.server.classify import router_model_failure
from tui.core.server.client import find_model, sync_client
from tui.core.server.events import ServerState
from tui.core.server.failures import Failure, FailureKind, router_unknown_model
from tui.core.server.handle import RunningSettings
from tui.core.server.launch import Launch
from tui.core.server.metrics import parse_prometheus

log = logging.getLogger(__name__)


class Readiness:
    """Polls one server at `base_url` (and, with `model`, that router model). Close it when done."""

    def __init__(self, base_url: str, api_key: str | None = None, model: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.http = sync_client(self.base_url, api_key)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Readiness":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- single questions ----------------------------------------------------------------

    def health(self) -> int | None:
        """The status code of GET /health, None when nothing answers."""
        try:
            return self.http.get("/health").status_code
        except httpx.HTTPError:
            return None

    def models(self) -> tuple[int | None, list[dict[str, Any]]]:
        """(status code, entries) of GET /models; (None, []) when nothing answers."""
        try:
            r = self.http.get("/models")
        except httpx.HTTPError:
            return None, []
        try:
            data = r.json().get("data", []) if r.status_code == 200 else []
        except (ValueError, AttributeError):
            data = []
        return r.status_code, [d for d in data if isinstance(d, dict)]

    def model_status(self) -> dict[str, Any] | None:
        """The router's `status` object for `model` (value loaded/loading/unloaded, failed, exit_code)."""
        _, data = self.models()
        entry = find_model(data, self.model)
        st = entry.get("status") if entry else None
        return st if isinstance(st, dict) else None

    def trigger_load(self, log_path: Path | None = None) -> Failure | None:
        """Ask the router to load `model`; a Failure when the router has no such model."""
        try:
            r = self.http.post("/models/load", json={"model": self.model})
        except httpx.HTTPError:
            return None  # the process is probably ending; the reader will classify it
        if r.status_code == 404 or (r.status_code == 400 and "not found" in r.text):
            _, data = self.models()
            return router_unknown_model(str(self.model), [str(m.get("id", "?")) for m in data], log_path)
        return None  # 200 success, or 400 "model is already running"

    def running_settings(self) -> RunningSettings | None:
        """What the server says it runs with (/props, /slots, /metrics); None when it does not answer."""
        params = {"model": self.model} if self.model else None
        try:
            r = self.http.get("/props", params=params)
            props = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        if not isinstance(props, dict):
            return None
        slots: list[dict[str, Any]] | None = None
        try:
            r = self.http.get("/slots", params=params)
            data = r.json() if r.status_code == 200 else None
            slots = [d for d in data if isinstance(d, dict)] if isinstance(data, list) else None
        except (httpx.HTTPError, ValueError):
            slots = None  # --no-slots: speculation stays unknown
        per_pos: dict[int, float] | None = None
        try:
            r = self.http.get("/metrics", params=params)
            per_pos = parse_prometheus(r.text).accepted_per_position if r.status_code == 200 else None
        except httpx.HTTPError:
            per_pos = None  # no --metrics: n-max stays unknown
        return RunningSettings.from_server(props, slots, per_pos)

    # ---- one look, for a server mtp-tune only watches ------------------------------------

    def observe(self) -> tuple[ServerState | None, Failure | None]:
        """Where the server is now, from HTTP alone: None when nothing answers."""
        code = self.health()
        if code is None:
            return None, None
        if code == 503:
            return ServerState.LOADING, None
        if code != 200:
            return ServerState.STARTING, None
        if not self.model:
            return ServerState.READY, None
        status, data = self.models()
        if status is None:
            return None, None
        if status == 401:
            return ServerState.FAILED, Failure(
                FailureKind.UNKNOWN, f"The server at {self.base_url} wants an API key.", self.base_url,
                "Give the key the server was started with (--api-key).")
        entry = find_model(data, self.model)
        if entry is not None:
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
        return ServerState.FAILED, Failure(
            FailureKind.ROUTER_MODEL_NOT_FOUND,
            f"The router at {self.base_url} has no model '{self.model}' (available: {names}).",
            self.model, "Pick one of the router's models.")


def watch_launch(
    launch: Launch,
    api_key: str | None,
    ready_timeout: float,
    poll_interval: float,
    *,
    set_state: Callable[[ServerState], object],
    fail: Callable[[Failure], None],
    timed_out: Callable[[], Failure],
    child_lines: Callable[[], list[str]],
) -> None:
    """Follow one launch until it is ready, fails or ends (the supervisor's watcher thread).

    /health 503 = loading, 200 = ready; in router mode 200 means the router listens, then the model
    is asked to load and its /models status (or its child's exit line) decides. Polls back off from
    10 ms to `poll_interval`; the reader's `launch.wake` cuts a wait short. Bounded by `ready_timeout`.
    """
    deadline = launch.started_at + ready_timeout
    interval = 0.01
    try:
        with Readiness(launch.url, api_key, launch.router_model) as probe:
            router_loading_since: int | None = None
            seen_loading = False
            while not launch.exited.is_set() and not launch.stop_requested:
                if time.monotonic() > deadline:
                    fail(timed_out())
                    return
                if router_loading_since is None:
                    code = probe.health()
                    if code == 503:
                        set_state(ServerState.LOADING)
                    elif code == 200:
                        if not launch.router_model:
                            # Let the reader catch up with the load lines, so the memory report is
                            # complete and its main loop runs when READY is announced (bounded; see launch.py).
                            launch.loaded_line.wait(2.0)
                            set_state(ServerState.READY)
                            return
                        failure = probe.trigger_load(launch.log_path)
                        if failure is not None:
                            fail(failure)
                            return
                        router_loading_since = launch.n_lines
                        set_state(ServerState.LOADING)
                else:
                    status = probe.model_status()
                    value = (status or {}).get("value")
                    if value == "loaded":
                        set_state(ServerState.READY)
                        return
                    if value == "loading":
                        seen_loading = True
                    ex = launch.router_exits.get(launch.router_model or "")
                    child_failed = ex is not None and ex[0] != 0 and ex[1] > router_loading_since
                    if child_failed or (status and status.get("failed") and seen_loading and value != "loading"):
                        code = ex[0] if ex else status.get("exit_code") if status else None
                        fail(router_model_failure(str(launch.router_model), code, child_lines(), launch.log_path))
                        return
                if launch.wake.wait(interval):
                    launch.wake.clear()
                interval = min(poll_interval, interval * 2)
    except Exception as e:  # pragma: no cover - a bug here must not leave the launch hanging
        log.exception("readiness watcher failed")
        fail(Failure(FailureKind.UNKNOWN, f"mtp-tune's readiness check failed ({e!r}), so it stopped llama-server.",
                     None, "Report this mtp-tune bug with the log.", raw_log_path=launch.log_path))
