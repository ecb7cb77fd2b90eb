"""A probe run: every prompt of a suite N times against one server, each request's `timings` recorded.

Order: a short warm-up request (not recorded), then passes: pass r sends every prompt once, so slow
drift (clocks, thermals) spreads over all prompts instead of biasing one. How one request is sent
and bracketed by `/metrics` scrapes (mean acceptance length = 1 + accepted / drafts) is `transport`.

At concurrency N (`RunConfig.concurrency`) each pass is N streams at once (`concurrency`: which
prompts each sends, what the run reports), and `/metrics` brackets the pass's whole concurrent phase
instead of each request (the counters are server-wide); a server with fewer slots is refused at the
start, in one sentence.

What a run takes and returns is `run_types`. The run is recorded as it goes through a `RunSink` (the
results store): if the server dies, the run ends `failed` with every request done so far; if it is
cancelled (a `threading.Event`, or asyncio cancellation), it ends `cancelled` the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from tui.core.probes import hygiene
from tui.core.probes.concurrency import run_summary, stream_order
from tui.core.probes.hygiene import ProbeWarning
from tui.core.probes.records import RequestRecord
from tui.core.options.settings import mtp_from_settings
from tui.core.probes.run_types import (
    ProbeProgress, ProbeRun, ProgressFn, RunConfig, RunContext, RunSink,
)
from tui.core.probes.suites import ProbePrompt, Suite
from tui.core.probes.transport import (
    Cancelled, MetricsScraper, ProbeClient, RunFailed, cancellable, counter_delta, send,
)
from tui.core.server.client_errors import ClientError, ClientTimeout, ServerGone, ServerHTTPError
from tui.core.server.replies import CompletionResult

#: Tokens of the warm-up request: enough to allocate every graph once.
WARMUP_N_PREDICT = 8
WARMUP_TEXT = "Name three primary colours."


class ProbeRunner:
    """Runs one suite against one server. Use `await runner.run()` (or `run_probe_sync`)."""

    def __init__(
        self,
        client: ProbeClient,
        suite: Suite,
        config: RunConfig | None = None,
        *,
        context: RunContext | None = None,
        sink: RunSink | None = None,
        progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        if not suite.prompts:
            raise ValueError(f"suite {suite.name!r} has no prompts")
        self.client = client
        self.suite = suite
        self.config = config or RunConfig()
        self.context = context or RunContext(url="")
        self.sink = sink
        self.progress = progress
        self.cancel = cancel
        self.records: list[RequestRecord] = []
        #: Per pass run at concurrency N > 1, the /metrics delta over its whole concurrent phase.
        self.phase_deltas: dict[int, dict[str, float]] = {}
        self.run_id: int | None = None
        self._metrics = MetricsScraper(client, cancel)
        self._server: dict[str, Any] = dict(self.context.server)
        self._env_warnings: list[ProbeWarning] = []

    @property
    def total(self) -> int:
        return len(self.suite.prompts) * self.config.repeat * self.config.concurrency

    def _emit(self, event: str, **kw: Any) -> None:
        if self.progress is None:
            return
        with contextlib.suppress(Exception):  # a broken UI callback must not lose the run
            self.progress(ProbeProgress(event, len(self.records), self.total, self.run_id, **kw))

    # ---- the run ---------------------------------------------------------------------------

    async def run(self) -> ProbeRun:
        started = time.time()
        self._begin()
        self._emit("started", message=f"{self.suite.name}: {self.total} requests")
        status, error = "ok", None
        try:
            await self._discover()
            self._env_check()
            if self.config.warmup:
                await self._warmup()
            await self._label_from_server()
            await self._passes()
            self._env_check()
        except Cancelled:
            status, error = "cancelled", "cancelled by the user"
        except asyncio.CancelledError:
            self._finish("cancelled", "cancelled", started)
            raise
        except RunFailed as exc:
            status, error = "failed", str(exc)
        except ClientError as exc:
            status, error = "failed", str(exc)
        if status == "ok" and any(not r.ok for r in self.records):
            bad = [r for r in self.records if not r.ok]
            status, error = "failed", f"{len(bad)} request(s) failed; first: {bad[0].prompt}: {bad[0].error}"
        return self._finish(status, error, started)

    def _begin(self) -> None:
        if self.sink is None:
            return
        ctx = self.context
        self.run_id = self.sink.begin_run(
            suite=self.suite.name, url=ctx.url, label=ctx.label, model=ctx.model,
            mtp=mtp_from_settings(ctx.settings), settings=ctx.settings,
            config={**self.config.to_json(), "suite": self.suite.to_json()},
            server=self._server or None, hardware=ctx.hardware, plan=ctx.plan, memory=ctx.memory,
        )

    def _finish(self, status: str, error: str | None, started: float) -> ProbeRun:
        summary = run_summary(self.records, [p.name for p in self.suite.prompts], self.config.concurrency,
                              self.phase_deltas)
        warnings = self._warnings()
        if self.sink is not None and self.run_id is not None:
            self.sink.finish_run(
                self.run_id, status, summary=summary, warnings=[w.to_json() for w in warnings], error=error
            )
        run = ProbeRun(
            run_id=self.run_id, status=status, suite=self.suite.name, config=self.config,
            requests=list(self.records), summary=summary, warnings=warnings, error=error,
            server=self._server, started_at=started, finished_at=time.time(),
        )
        self._emit("finished", status=status, message=error or "")
        return run

    def _warnings(self) -> list[ProbeWarning]:
        base = list(self.context.extra_warnings) + self._env_warnings
        if not self.records:  # nothing was measured: request checks would only add noise to the error
            return hygiene.dedupe(base)
        total_slots = self._server.get("total_slots")
        return hygiene.dedupe(
            base
            + hygiene.check_requests(
                self.records,
                repeat=self.config.repeat,
                total_slots=total_slots if isinstance(total_slots, int) else None,
                configured_parallel=self.context.configured_parallel,
                concurrency=self.config.concurrency,
                metrics_error=self._metrics.error,
                min_generation=self.config.min_generation,
            )
        )

    def _env_check(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # no getloadavg on some platforms
            self._env_warnings.extend(hygiene.check_host_load(os.getloadavg()[0], os.cpu_count()))
        fn = self.context.environment_check
        if fn is None:
            return
        try:
            self._env_warnings.extend(fn())
        except Exception as exc:  # telemetry trouble must not lose the measurement
            self._env_warnings.append(ProbeWarning("environment_check", f"GPU/host check failed: {exc}", "info"))

    async def _discover(self) -> None:
        """What the server says about itself: slots, model, context, build, speculation (from /slots)."""
        try:
            props = await self._cancellable(self.client.props())
        except ServerHTTPError as exc:
            raise RunFailed(f"the server at {self.context.url} refused /props: {exc}") from None
        gs = props.get("default_generation_settings") or {}
        found: dict[str, Any] = {
            "total_slots": props.get("total_slots"),
            "model_path": props.get("model_path"),
            "n_ctx": gs.get("n_ctx"),
            "build_info": props.get("build_info"),
            "model_alias": props.get("model_alias"),
        }
        try:
            slots = await self._cancellable(self.client.slots())
            found["speculative"] = any(bool(s.get("speculative")) for s in slots) if slots else None
        except ServerHTTPError:
            found["speculative"] = None
        self._server.update({k: v for k, v in found.items() if v is not None})
        n, slots = self.config.concurrency, found.get("total_slots")
        if isinstance(slots, int) and slots < n:  # each request would wait for a slot: no longer N at once
            raise RunFailed(f"the server at {self.context.url} has {slots} slot{'s' if slots != 1 else ''}, fewer than "
                            f"the concurrency {n}: relaunch it with -np {n}, or probe with --concurrency {slots}.")
        if self.sink is not None and self.run_id is not None:
            fields: dict[str, Any] = {"server": self._server}
            if mtp_from_settings(self.context.settings) is None and found.get("speculative") is not None:
                fields["mtp"] = bool(found["speculative"])
            if not self.context.model and found.get("model_path"):
                fields["model"] = found["model_path"]
            self.sink.update_run(self.run_id, **fields)

    async def _label_from_server(self) -> None:
        """Label the run from what the server runs with, never from a form it did not see."""
        ctx = self.context
        if ctx.running is None:
            return
        try:
            rs = await self._cancellable(asyncio.to_thread(ctx.running))
        except Cancelled:
            raise
        except Exception:  # the label keeps what was known at the start
            return
        if rs is None:
            return
        self._server["running"] = rs.to_json()
        fields: dict[str, Any] = {"server": self._server}
        if rs.mtp is not None:
            fields["mtp"] = bool(rs.mtp)
        if ctx.label_of is not None:
            ctx.label = ctx.label_of(rs)
            fields["label"] = ctx.label
        if ctx.settings_of is not None:
            ctx.settings = ctx.settings_of(rs)
            fields["settings"] = ctx.settings
        if self.sink is not None and self.run_id is not None:
            self.sink.update_run(self.run_id, **fields)

    async def _warmup(self) -> None:
        """One short, unrecorded request in the suite's form (chat or raw), so first-use costs (graph
        allocation, CUDA init) stay out of the numbers; short so a long-prompt suite doesn't pay twice."""
        first = self.suite.prompts[0]
        p = ProbePrompt(
            name="warmup",
            messages=({"role": "user", "content": WARMUP_TEXT},) if first.is_chat else None,
            raw=None if first.is_chat else WARMUP_TEXT,
        )
        try:
            await self._cancellable(self._send(p, WARMUP_N_PREDICT, None))
        except ServerHTTPError:
            pass  # a real problem shows up again, and is recorded, on the first probe request

    async def _passes(self) -> None:
        """Pass after pass; within a pass, one stream (N = 1, each request bracketed by /metrics) or N
        streams at once (`concurrency`), the whole concurrent phase bracketed: the pass's delta is
        kept (`phase_deltas`) and announced (`pass_done`) only when the phase ended whole."""
        broken: set[str] = set()
        seq = itertools.count()
        n = self.config.concurrency
        for rep in range(self.config.repeat):
            if n == 1:
                await self._stream(rep, self.suite.prompts, broken, seq, scrape=True)
                continue
            before = await self._metrics.scrape()
            await self._together([self._stream(rep, stream_order(self.suite.prompts, k), broken, seq, scrape=False)
                                  for k in range(n)])
            delta = counter_delta(before, await self._metrics.scrape())
            if delta is not None:
                self.phase_deltas[rep] = delta
                self._emit("pass_done", repeat=rep, metrics_delta=delta)

    async def _stream(self, rep: int, prompts: Sequence[ProbePrompt], broken: set[str], seq: Iterator[int], *,
                      scrape: bool) -> None:
        """Send `prompts` one after another (a prompt the server refused is skipped from then on)."""
        for p in prompts:
            if self.cancel is not None and self.cancel.is_set():
                raise Cancelled()
            if p.name in broken:
                continue
            rec = await self._one(next(seq), rep, p, scrape=scrape)
            if rec.error is not None:
                broken.add(p.name)

    @staticmethod
    async def _together(streams: list[Awaitable[None]]) -> None:
        """Run the streams at once; the first that fails (the server gone, a cancel) stops the others,
        which abandon their requests, and its error is the run's. Each stream's own waits are bounded
        (the client's timeouts, the cancel poll), so this is too."""
        tasks = [asyncio.ensure_future(s) for s in streams]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:  # also when this run itself is cancelled: no stream outlives it
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for t in tasks:
            if not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]

    async def _one(self, seq: int, rep: int, p: ProbePrompt, *, scrape: bool = True) -> RequestRecord:
        """One request, recorded; `scrape`: bracket it with /metrics (only when it runs alone)."""
        n_predict = p.n_predict or self.config.n_predict
        rec = RequestRecord(seq=seq, prompt=p.name, kind=p.kind, repeat=rep, n_predict=n_predict, started_at=time.time())
        self._emit("request_started", prompt=p.name, repeat=rep)
        before = await self._metrics.scrape() if scrape else None
        first_seen = False

        def on_first(_: str) -> None:
            nonlocal first_seen
            if not first_seen:
                first_seen = True
                self._emit("first_token", prompt=p.name, repeat=rep)

        try:
            res = await self._cancellable(self._send(p, n_predict, on_first))
        except (Cancelled, asyncio.CancelledError):
            raise
        except ServerGone as exc:
            rec.error = str(exc)
            self._record(rec)
            raise RunFailed(f"the server went away during {p.name} (pass {rep + 1}): {exc}") from None
        except ClientTimeout as exc:
            rec.error = str(exc)
            self._record(rec)
            raise RunFailed(f"the server stopped answering during {p.name} (pass {rep + 1}): {exc}") from None
        except ServerHTTPError as exc:
            rec.error = f"HTTP {exc.status}: {exc.message}"
            self._record(rec)
            return rec
        rec.timings = dict(res.timings)
        rec.ttft_ms = None if res.ttft_s is None else res.ttft_s * 1000.0
        rec.wall_ms = res.wall_s * 1000.0
        rec.content_chars = len(res.text)
        pn = rec.predicted_n
        rec.finish_reason = None if pn is None else ("length" if pn >= n_predict else "stop")
        rec.metrics_delta = counter_delta(before, await self._metrics.scrape() if scrape else None)
        if not rec.timings:
            rec.error = "the server's response carried no timings object"
        self._record(rec)
        return rec

    def _record(self, rec: RequestRecord) -> None:
        self.records.append(rec)
        if self.sink is not None and self.run_id is not None:
            self.sink.add_request(self.run_id, rec.to_json())
        self._emit("request_done", prompt=rec.prompt, repeat=rec.repeat, record=rec)

    async def _send(self, p: ProbePrompt, n_predict: int, on_first: Callable[[str], None] | None) -> CompletionResult:
        c = self.config
        return await send(self.client, p, n_predict, on_first, seed=c.seed, temperature=c.temperature,
                          ignore_eos=c.ignore_eos)

    async def _cancellable(self, aw: Any) -> Any:
        return await cancellable(aw, self.cancel)


async def run_probe(
    url: str,
    suite: Suite,
    config: RunConfig | None = None,
    *,
    api_key: str | None = None,
    context: RunContext | None = None,
    sink: RunSink | None = None,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
) -> ProbeRun:
    """Open a client on `url` and run `suite`."""
    from tui.core.server.client import LlamaClient

    ctx = context or RunContext(url=url)
    if not ctx.url:
        ctx.url = url
    async with LlamaClient(url, api_key=api_key) as client:
        runner = ProbeRunner(client, suite, config, context=ctx, sink=sink, progress=progress, cancel=cancel)
        return await runner.run()


def run_probe_sync(url: str, suite: Suite, config: RunConfig | None = None, **kw: Any) -> ProbeRun:
    """`run_probe` for threads and the CLI (runs its own event loop)."""
    return asyncio.run(run_probe(url, suite, config, **kw))
