"""One probe request on the wire: how it is sent, how `/metrics` brackets it, how a cancel abandons it.

Every request uses a fixed seed, temperature 0 and `cache_prompt: false` and streams (for the
client-side time to first token); the `/metrics` counters scraped before and after it (or, at
concurrency N > 1, before and after the pass's whole concurrent phase) give the verification steps and
the accepted tokens per draft position (`counter_delta`). A set cancel event abandons the request in
flight within `CANCEL_POLL_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from tui.core.probes.positions import position_counters
from tui.core.probes.records import METRIC_COUNTERS
from tui.core.probes.suites import ProbePrompt
from tui.core.server.client_errors import ServerGone, ServerHTTPError
from tui.core.server.replies import CompletionResult
from tui.core.server.metrics import Metrics

CANCEL_POLL_S = 0.05


class ProbeClient(Protocol):
    """What a probe run needs from a client (`tui.core.server.client.LlamaClient` fits)."""

    async def chat(
        self, messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = ..., stream: bool = ...,
        on_text: Callable[[str], None] | None = ..., **params: Any,
    ) -> CompletionResult: ...

    async def complete(
        self, prompt: str | list[Any], *, n_predict: int = ..., stream: bool = ...,
        on_text: Callable[[str], None] | None = ..., **params: Any,
    ) -> CompletionResult: ...

    async def metrics(self) -> Metrics: ...

    async def props(self) -> dict[str, Any]: ...

    async def slots(self) -> list[dict[str, Any]]: ...


class Cancelled(Exception):
    """The cancel event was set: the run ends `cancelled` with what it has."""


class RunFailed(Exception):
    """The run cannot go on (the server went away or stopped answering): it ends `failed`."""


def metric_counters(m: Metrics) -> dict[str, float]:
    """The counters a run diffs, 0 for those the server has not emitted yet, and the accepted
    tokens per draft position (`positions`: absent until the first speculative request ends)."""
    return {**{name: float(m.value(name, 0.0) or 0.0) for name in METRIC_COUNTERS}, **position_counters(m)}


def counter_delta(before: Mapping[str, float] | None, after: Mapping[str, float] | None) -> dict[str, float] | None:
    """What the counters grew by between two scrapes (None when either is missing)."""
    if before is None or after is None:
        return None
    return {k: after[k] - before.get(k, 0.0) for k in after}


async def cancellable(aw: Any, cancel: threading.Event | None) -> Any:
    """Await `aw`, abandoning it promptly (raising `Cancelled`) when `cancel` is set."""
    if cancel is None:
        return await aw
    if cancel.is_set():
        if asyncio.iscoroutine(aw):
            aw.close()
        raise Cancelled()
    task = asyncio.ensure_future(aw)
    while True:
        done, _ = await asyncio.wait({task}, timeout=CANCEL_POLL_S)
        if done:
            return task.result()
        if cancel.is_set():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise Cancelled()


async def send(client: ProbeClient, p: ProbePrompt, n_predict: int, on_first: Callable[[str], None] | None, *,
               seed: int, temperature: float, ignore_eos: bool) -> CompletionResult:
    """One streamed request in the prompt's form (chat or raw completion)."""
    params: dict[str, Any] = {"seed": seed, "temperature": temperature, "cache_prompt": False}
    if ignore_eos:
        params["ignore_eos"] = True
    if p.messages is not None:
        return await client.chat(
            list(p.messages), max_tokens=n_predict, stream=True, on_text=on_first, n_predict=n_predict, **params
        )
    return await client.complete(p.raw or "", n_predict=n_predict, stream=True, on_text=on_first, **params)


class MetricsScraper:
    """Scrapes `/metrics` around each request (or concurrent phase); stops after the first refusal and
    remembers why."""

    def __init__(self, client: ProbeClient, cancel: threading.Event | None) -> None:
        self._client = client
        self._cancel = cancel
        self.error: str | None = None  # why /metrics gave nothing (then no request has a delta)

    async def scrape(self) -> dict[str, float] | None:
        if self.error is not None:
            return None
        try:
            m = await cancellable(self._client.metrics(), self._cancel)
        except ServerHTTPError as exc:
            self.error = f"HTTP {exc.status}: {exc.message}"
            return None
        except ServerGone:
            raise
        return metric_counters(m)
