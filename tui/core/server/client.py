"""Async HTTP client for llama-server: health, props, slots, metrics, completions, router models.

It returns the server's `timings` object untouched (probes and comparisons are held to the server's
own numbers; `replies` has the result types and the stream readers) and knows llama-server's quirks:
`/props` always says `speculative.types: none` (speculation is read from `/slots`); router mode wants
`"model"` in POST bodies and `?model=` on GETs. A server that dies mid-request raises `ServerGone`
(`client_errors`), never a bare httpx error.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx

from tui.core.server.client_errors import (
    ClientError,
    ClientTimeout,
    ServerGone,
    ServerHTTPError,
    ServerUnreachable,
    http_error,
)
from tui.core.server.metrics import Metrics, parse_prometheus
from tui.core.server.replies import CompletionResult, Health, chat_delta, chat_text, completion_text, sse_events

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=5.0)
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0", "::")


def http_options(base_url: str, api_key: str | None) -> dict[str, Any]:
    """Headers and proxy rule every client of a server uses (the async one and the pollers' sync one)."""
    host = urlsplit(base_url).hostname or ""
    return {"headers": {"Authorization": f"Bearer {api_key}"} if api_key else {},
            # Proxies from the environment must not capture a local server.
            "trust_env": host not in _LOOPBACK}


def sync_client(base_url: str, api_key: str | None = None, timeout: float = 5.0) -> httpx.Client:
    """A short-timeout blocking client for the readiness pollers (threads, not an event loop)."""
    return httpx.Client(base_url=base_url.rstrip("/"), timeout=httpx.Timeout(timeout, connect=2.0),
                        **http_options(base_url, api_key))


def find_model(entries: Sequence[Mapping[str, Any]], name: str | None) -> Mapping[str, Any] | None:
    """The router's `/models` entry for `name` (its id or one of its aliases)."""
    for m in entries:
        if m.get("id") == name or name in (m.get("aliases") or []):
            return m
    return None


class LlamaClient:
    """One server (or one router model, with `model=`). Use as `async with LlamaClient(url) as c:`."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, transport=transport,
                                       **http_options(self.base_url, api_key))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "LlamaClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- plumbing ------------------------------------------------------------------------

    def _params(self, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        out = dict(params or {})
        if self.model and "model" not in out:
            out["model"] = self.model
        return out

    def _body(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.model and "model" not in body:
            body = {"model": self.model, **body}
        return body

    def _gone(self, e: Exception, during: str, path: str) -> ServerGone:
        url = self.base_url + path
        if isinstance(e, httpx.ConnectError):
            return ServerUnreachable(f"No llama-server answers at {self.base_url} ({e}).", url, "connect")
        what = "in the middle of the response stream" if during == "stream" else "before answering"
        return ServerGone(f"llama-server at {self.base_url} closed the connection {what} on {path}; "
                          "it probably crashed or was killed.", url, during)

    async def _request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                       json_body: Any = None, ok_statuses: Sequence[int] = ()) -> httpx.Response:
        try:
            try:
                r = await self._http.request(method, path, params=params, json=json_body)
            except httpx.RemoteProtocolError:
                if method != "GET":
                    raise
                # A kept-alive connection the server closed as it was reused (the router does this
                # right after a child loads): an idempotent GET is sent once more on a new one. A
                # server that is really gone then refuses the connection, and that is reported below.
                r = await self._http.request(method, path, params=params, json=json_body)
        except httpx.TimeoutException as e:
            raise ClientTimeout(f"llama-server at {self.base_url} did not answer {path} in time ({e!r}).") from e
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            raise self._gone(e, "request", path) from e
        except httpx.HTTPError as e:
            raise ClientError(f"request to {self.base_url}{path} failed: {e}") from e
        if r.status_code >= 400 and r.status_code not in ok_statuses:
            raise http_error(r.status_code, r.content)
        return r

    async def _json(self, method: str, path: str, **kw: Any) -> Any:
        r = await self._request(method, path, **kw)
        try:
            return r.json()
        except ValueError as e:
            raise ClientError(f"{path} returned something that is not JSON: {r.text[:200]!r}") from e

    # ---- monitoring ----------------------------------------------------------------------

    async def health(self) -> Health:
        """GET /health: 200 ok, 503 loading. Connection refused raises ServerUnreachable."""
        r = await self._request("GET", "/health", ok_statuses=(503, 500))
        try:
            body: Any = r.json()
        except ValueError:
            body = r.text
        if r.status_code == 200:
            status = body.get("status", "ok") if isinstance(body, dict) else "ok"
        elif r.status_code == 503:
            status = "loading"
        else:
            status = "error"
        return Health(r.status_code, status, body)

    async def props(self) -> dict[str, Any]:
        """GET /props (router: `?model=` proxies to that model). Its speculative.types is always "none"."""
        return await self._json("GET", "/props", params=self._params())

    async def slots(self) -> list[dict[str, Any]]:
        """GET /slots: one entry per slot, with `speculative: true` when a draft is attached."""
        data = await self._json("GET", "/slots", params=self._params())
        return data if isinstance(data, list) else []

    async def speculative_enabled(self) -> bool:
        """Whether speculation is on, read from /slots (the only place that tells the truth)."""
        return any(bool(s.get("speculative")) for s in await self.slots())

    async def metrics(self) -> Metrics:
        """GET /metrics (needs --metrics; 501 otherwise) parsed from Prometheus text."""
        r = await self._request("GET", "/metrics", params=self._params())
        return parse_prometheus(r.text)

    # ---- router --------------------------------------------------------------------------

    async def models(self) -> list[dict[str, Any]]:
        """GET /models (router): entries with `status.value` loaded/loading/unloaded, `failed`, `exit_code`."""
        data = await self._json("GET", "/models")
        return list(data.get("data", [])) if isinstance(data, dict) else []

    async def model_status(self, name: str | None = None) -> dict[str, Any] | None:
        entry = find_model(await self.models(), name or self.model)
        st = entry.get("status") if entry else None
        return st if isinstance(st, dict) else None

    async def load_model(self, name: str | None = None) -> bool:
        """POST /models/load; True if it started loading, False if it was already running."""
        r = await self._request("POST", "/models/load", json_body={"model": name or self.model}, ok_statuses=(400,))
        if r.status_code == 400:
            err = http_error(400, r.content)
            if "already" in err.message:
                return False
            raise err
        return True

    async def unload_model(self, name: str | None = None) -> None:
        await self._request("POST", "/models/unload", json_body={"model": name or self.model})

    # ---- generation ----------------------------------------------------------------------

    async def complete(self, prompt: str | list[Any], *, n_predict: int = 128, stream: bool = False,
                       on_text: Callable[[str], None] | None = None, **params: Any) -> CompletionResult:
        """POST /completion with a raw prompt (no chat template). Extra params go into the body."""
        body = self._body({"prompt": prompt, "n_predict": n_predict, "stream": stream, **params})
        if not stream:
            return await self._plain("/completion", body, completion_text)
        return await self._stream("/completion", body, on_text, chat=False)

    async def chat(self, messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = 128,
                   stream: bool = False, on_text: Callable[[str], None] | None = None,
                   **params: Any) -> CompletionResult:
        """POST /v1/chat/completions (the model's chat template applies)."""
        body: dict[str, Any] = {"messages": list(messages), "stream": stream, **params}
        if max_tokens is not None:
            body.setdefault("max_tokens", max_tokens)
        if stream:
            body.setdefault("stream_options", {"include_usage": True})
        body = self._body(body)
        if not stream:
            return await self._plain("/v1/chat/completions", body, chat_text)
        return await self._stream("/v1/chat/completions", body, on_text, chat=True)

    async def _plain(self, path: str, body: dict[str, Any], text_of: Callable[[dict[str, Any]], str]) -> CompletionResult:
        t0 = time.perf_counter()
        data = await self._json("POST", path, json_body=body)
        wall = time.perf_counter() - t0
        if not isinstance(data, dict):
            raise ClientError(f"{path} returned {type(data).__name__}, expected a JSON object")
        return CompletionResult(text=text_of(data), timings=dict(data.get("timings") or {}), ttft_s=None,
                                wall_s=wall, response=data, stream=False, usage=data.get("usage"))

    async def _stream(self, path: str, body: dict[str, Any], on_text: Callable[[str], None] | None,
                      chat: bool) -> CompletionResult:
        t0 = time.perf_counter()
        ttft: float | None = None
        parts: list[str] = []
        timings: dict[str, Any] = {}
        final: dict[str, Any] | None = None
        usage: dict[str, Any] | None = None
        chunks = 0
        done = False
        async with self._open_stream(path, body) as lines:
            try:
                async for data in sse_events(lines):
                    if data == "[DONE]":
                        done = True
                        break
                    try:
                        obj = json.loads(data)
                    except ValueError:
                        continue
                    if isinstance(obj, dict) and "error" in obj and not obj.get("choices"):
                        err = obj["error"] if isinstance(obj["error"], dict) else {"message": str(obj["error"])}
                        raise ServerHTTPError(int(err.get("code", 500) or 500), str(err.get("message", err)),
                                              err.get("type"), obj)
                    chunks += 1
                    piece = chat_delta(obj) if chat else str(obj.get("content") or "")
                    if piece:
                        if ttft is None:
                            ttft = time.perf_counter() - t0
                        parts.append(piece)
                        if on_text is not None:
                            on_text(piece)
                    if isinstance(obj.get("timings"), dict):
                        timings = dict(obj["timings"])
                        final = obj
                    if obj.get("usage"):
                        usage = obj["usage"]
                    if not chat and obj.get("stop"):
                        final = obj
                        done = True
                        break
            except (httpx.RemoteProtocolError, httpx.ReadError) as e:
                raise self._gone(e, "stream", path) from e
            except httpx.TimeoutException as e:
                raise ClientTimeout(f"llama-server at {self.base_url} stopped sending on {path} ({e!r}).") from e
        if not done:
            raise ServerGone(f"llama-server at {self.base_url} ended the {path} stream before its final chunk; "
                             "it probably crashed or was killed.", self.base_url + path, "stream")
        wall = time.perf_counter() - t0
        return CompletionResult(text="".join(parts), timings=timings, ttft_s=ttft, wall_s=wall,
                                response=final or {}, stream=True, chunks=chunks, usage=usage)

    @asynccontextmanager
    async def _open_stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[AsyncIterator[str]]:
        try:
            async with self._http.stream("POST", path, json=body) as r:
                if r.status_code >= 400:
                    raise http_error(r.status_code, await r.aread())
                yield r.aiter_lines()
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            raise self._gone(e, "stream", path) from e
        except httpx.TimeoutException as e:
            raise ClientTimeout(f"llama-server at {self.base_url} did not answer {path} in time ({e!r}).") from e
