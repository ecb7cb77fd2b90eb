"""Everything a request to llama-server can end in other than an answer, one class per way.

Every error the client raises is a `ClientError` with a one-sentence message: a server that went
away (`ServerGone`, `ServerUnreachable`), a timeout, or an error status read from llama-server's JSON
error body (`http_error`: 503 is `ServerLoading`, 401 `Unauthorized`).
"""

from __future__ import annotations

import json
from typing import Any


class ClientError(Exception):
    """Base class: every error the client raises is one of these, with a one-sentence message."""


class ServerGone(ClientError):
    """The server went away: refused the connection, or dropped it in the middle of a request."""

    def __init__(self, message: str, url: str, during: str) -> None:
        super().__init__(message)
        self.url = url
        self.during = during  # "connect", "request" or "stream"


class ServerUnreachable(ServerGone):
    """Nothing listens at the URL (connection refused or name not resolved)."""


class ClientTimeout(ClientError):
    """The server did not answer within the client's timeout."""


class ServerHTTPError(ClientError):
    """The server answered with an error status; `message`/`error_type` come from its JSON body."""

    def __init__(self, status: int, message: str, error_type: str | None = None, body: Any = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.error_type = error_type
        self.body = body


class ServerLoading(ServerHTTPError):
    """HTTP 503 "Loading model": the server is up but not ready yet."""


class Unauthorized(ServerHTTPError):
    """HTTP 401: the server wants an API key (or another one)."""


def http_error(status: int, content: bytes) -> ServerHTTPError:
    """The error an HTTP error status and llama-server's JSON body (`{"error": {...}}`) amount to."""
    message, etype, body = "", None, None
    try:
        body = json.loads(content)
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            message, etype = str(err.get("message", "")), err.get("type")
        elif err is not None:
            message = str(err)
    except ValueError:
        message = content.decode("utf-8", "replace")[:300]
    message = message or f"HTTP {status}"
    cls = ServerLoading if status == 503 else Unauthorized if status == 401 else ServerHTTPError
    return cls(status, message, etype, body)
