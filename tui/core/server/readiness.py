"""The one readiness poller: `/health` (503 = loading, 200 = ready) and, for a router, `/models`.

The supervisor's watcher thread and the attachment's poller both ask through a `Readiness`, which
talks through the client module's sync client, so the two can never disagree about what a status
code or a router model status means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tui.core.server.client import find_model, parse_prometheus, sync_client
from tui.core.server.events import ServerState
from tui.core.server.failures import Failure, FailureKind, router_unknown_model
from tui.core.server.handle import RunningSettings


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
