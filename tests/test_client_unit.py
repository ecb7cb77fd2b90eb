"""LlamaClient against recorded llama-server responses (tests/data/server_http) served by a fake
transport, and a raw socket that drops the connection mid-stream."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tui.core.server.client import LlamaClient
from tui.core.server.client_errors import (
    ClientTimeout,
    ServerGone,
    ServerHTTPError,
    ServerLoading,
    ServerUnreachable,
    Unauthorized,
)
from tui.core.server.metrics import parse_prometheus

DATA = Path(__file__).parent / "data" / "server_http"
Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler, **kw: object) -> LlamaClient:
    return LlamaClient("http://127.0.0.1:9", transport=httpx.MockTransport(handler), **kw)  # type: ignore[arg-type]


def sse(path: str) -> bytes:
    return (DATA / path).read_bytes()


# ---- metrics -----------------------------------------------------------------------------------


def test_parse_prometheus_spec_decode_and_positions() -> None:
    m = parse_prometheus((DATA / "metrics_mtp.txt").read_text())
    assert m.value("llamacpp:tokens_predicted_total") == 1056 and m.value("n_decode_total") == 278
    assert (m.draft_tokens, m.accepted_tokens, m.drafts) == (783, 783, 264)
    assert m.accepted_per_position == {0: 264, 1: 264, 2: 255}
    assert m.acceptance_rate == 1.0
    assert m.mean_accept_len == pytest.approx(1 + 783 / 264)
    assert m.types["llamacpp:spec_decode_num_drafts_total"] == "counter"
    assert m.types["llamacpp:predicted_tokens_seconds"] == "gauge"
    assert "Accepted tokens per draft position" in m.help["llamacpp:spec_decode_num_accepted_tokens_per_pos_total"]


def test_parse_prometheus_without_drafts_and_odd_lines() -> None:
    text = (
        "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 12\n"
        'other_metric{a="x\\"y",b="2"} 3.5 1700000000\n'
        "garbage line here\nllamacpp:bad NaNx\n"
    )
    m = parse_prometheus(text)
    assert m.draft_tokens == 0 and m.acceptance_rate is None and m.mean_accept_len is None
    assert m.accepted_per_position == {}
    assert m.series("other_metric:x") == {} and m.labeled["other_metric"] == {(("a", 'x"y'), ("b", "2")): 3.5}
    assert m.value("tokens_predicted_total") == 12


# ---- requests ----------------------------------------------------------------------------------


async def test_health_loading_and_ok() -> None:
    seq = iter([httpx.Response(503, json={"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}),
                httpx.Response(200, json={"status": "ok"})])
    async with client(lambda r: next(seq)) as c:
        h = await c.health()
        assert h.loading and not h.ok and h.status == "loading"
        h = await c.health()
        assert h.ok and h.status == "ok"


async def test_api_key_sent_as_bearer_and_401_mapped() -> None:
    seen: list[str | None] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(r.headers.get("authorization"))
        if r.headers.get("authorization") != "Bearer k1":
            return httpx.Response(401, json={"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}})
        return httpx.Response(200, json=[{"id": 0, "speculative": True}])

    async with client(handler, api_key="k1") as c:
        assert await c.speculative_enabled() is True
    async with client(handler) as c:
        with pytest.raises(Unauthorized, match="Invalid API Key") as ei:
            await c.slots()
    assert ei.value.status == 401 and ei.value.error_type == "authentication_error"
    assert seen == ["Bearer k1", None]


async def test_props_says_none_but_slots_tell_the_truth() -> None:
    props = json.loads((DATA / "GET_props.json").read_text())["body"]
    slots = json.loads((DATA / "GET_slots_after.json").read_text())["body"]

    def handler(r: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=props if r.url.path == "/props" else slots)

    async with client(handler) as c:
        p = await c.props()
        assert p["default_generation_settings"]["params"]["speculative.types"] == "none"
        assert await c.speculative_enabled() is True


async def test_router_model_goes_into_query_and_body() -> None:
    seen: list[tuple[str, str, dict]] = []
    models = json.loads((DATA / "GET_models_after_startup.json").read_text())

    def handler(r: httpx.Request) -> httpx.Response:
        body = json.loads(r.content) if r.content else {}
        seen.append((r.url.path, r.url.params.get("model", ""), body))
        if r.url.path == "/models":
            return httpx.Response(200, json=models)
        if r.url.path == "/models/load":
            return httpx.Response(400, json={"error": {"code": 400, "message": "model is already running", "type": "invalid_request_error"}})
        if r.url.path == "/metrics":
            return httpx.Response(200, text="llamacpp:n_decode_total 1\n")
        return httpx.Response(200, json={"content": "x", "timings": {"predicted_n": 1}})

    async with client(handler, model="tiny-mtp") as c:
        assert (await c.model_status())["value"] == "loaded"  # type: ignore[index]
        assert (await c.model_status("tiny-nomtp"))["value"] == "unloaded"  # type: ignore[index]
        assert await c.model_status("nope") is None
        assert await c.load_model() is False
        await c.metrics()
        await c.complete("hi", n_predict=1)
    assert ("/metrics", "tiny-mtp", {}) in seen
    assert seen[-1][0] == "/completion" and seen[-1][2]["model"] == "tiny-mtp"
    assert seen[3][2] == {"model": "tiny-mtp"}


async def test_plain_completion_without_drafts_keeps_timings_untouched() -> None:
    timings = {"cache_n": 0, "prompt_n": 3, "prompt_ms": 1.0, "prompt_per_token_ms": 0.3, "prompt_per_second": 3000.0,
               "predicted_n": 8, "predicted_ms": 2.0, "predicted_per_token_ms": 0.28, "predicted_per_second": 3500.0}
    body = {"content": "abc", "stop": True, "timings": timings, "generation_settings": {"speculative.types": "none"}}
    sent: list[dict] = []

    def handler(r: httpx.Request) -> httpx.Response:
        sent.append(json.loads(r.content))
        return httpx.Response(200, json=body)

    async with client(handler) as c:
        r = await c.complete("Hello", n_predict=8, temperature=0, cache_prompt=False)
    assert r.timings == timings  # no invented draft_n keys
    assert r.draft_n == 0 and r.draft_n_accepted == 0 and r.acceptance is None
    assert r.text == "abc" and r.ttft_s is None and r.wall_s >= 0 and not r.stream
    assert r.generation_settings == {"speculative.types": "none"}
    assert sent == [{"prompt": "Hello", "n_predict": 8, "stream": False, "temperature": 0, "cache_prompt": False}]


async def test_completion_stream_recorded() -> None:
    async with client(lambda r: httpx.Response(200, content=sse("POST_completion_stream.txt"))) as c:
        pieces: list[str] = []
        r = await c.complete("Hello world", n_predict=48, stream=True, on_text=pieces.append)
    assert r.stream and r.chunks == 49 and len(pieces) == 48
    assert r.text == "".join(pieces) and r.text.startswith("6p2ght~The")
    assert r.timings["draft_n"] == 35 and r.timings["draft_n_accepted"] == 35 and r.acceptance == 1.0
    assert r.response["stop"] is True and r.generation_settings["speculative.types"] == "none,draft-mtp"  # type: ignore[index]
    assert r.ttft_s is not None and r.ttft_s <= r.wall_s


async def test_chat_stream_recorded_with_usage_and_done() -> None:
    sent: list[dict] = []

    def handler(r: httpx.Request) -> httpx.Response:
        sent.append(json.loads(r.content))
        return httpx.Response(200, content=sse("POST_v1_chat_completions_stream.txt"))

    async with client(handler) as c:
        r = await c.chat([{"role": "user", "content": "hi"}], max_tokens=48, stream=True)
    assert sent[0]["stream_options"] == {"include_usage": True} and sent[0]["max_tokens"] == 48
    assert r.usage == {"completion_tokens": 48, "prompt_tokens": 23, "total_tokens": 71,
                       "prompt_tokens_details": {"cached_tokens": 19}}
    assert r.timings["draft_n"] == 35 and r.timings["cache_n"] == 19
    assert r.text and r.ttft_s is not None


async def test_error_status_and_stream_error_event() -> None:
    async with client(lambda r: httpx.Response(400, json={"error": {"code": 400, "message": "model 'x' not found",
                                                                    "type": "invalid_request_error"}})) as c:
        with pytest.raises(ServerHTTPError, match="not found") as ei:
            await c.complete("x", stream=True)
        assert ei.value.status == 400
    err = b'data: {"error":{"code":500,"message":"context shift disabled","type":"server_error"}}\n\n'
    async with client(lambda r: httpx.Response(200, content=err)) as c:
        with pytest.raises(ServerHTTPError, match="context shift"):
            await c.complete("x", stream=True)
    async with client(lambda r: httpx.Response(503, json={"error": {"message": "Loading model"}})) as c:
        with pytest.raises(ServerLoading):
            await c.props()


async def test_stream_ending_without_final_chunk_is_server_gone() -> None:
    cut = b"".join(sse("POST_completion_stream.txt").split(b"\n\n")[:5]) + b"\n\n"
    async with client(lambda r: httpx.Response(200, content=cut)) as c:
        with pytest.raises(ServerGone) as ei:
            await c.complete("x", stream=True)
    assert ei.value.during == "stream"


async def test_timeouts_and_transport_errors_are_client_errors() -> None:
    def slow(r: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=r)

    def reset(r: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=r)

    async with client(slow) as c:
        with pytest.raises(ClientTimeout):
            await c.health()
    async with client(reset) as c:
        with pytest.raises(ServerGone) as ei:
            await c.metrics()
    assert ei.value.during == "request"


async def test_nothing_listening_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    async with LlamaClient(f"http://127.0.0.1:{port}") as c:
        with pytest.raises(ServerUnreachable) as ei:
            await c.health()
    assert isinstance(ei.value, ServerGone) and ei.value.during == "connect"


# ---- a real socket that dies mid-stream ----------------------------------------------------------


@pytest.fixture
def dying_server() -> Iterator[str]:
    """Answers one streaming request with two chunks of a chunked body, then closes the socket."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            for piece in (b'data: {"content":"a","stop":false}\n\n', b'data: {"content":"b","stop":false}\n\n'):
                conn.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            conn.shutdown(socket.SHUT_RDWR)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{port}"
    t.join(5)
    srv.close()


async def test_connection_dropped_mid_stream(dying_server: str) -> None:
    got: list[str] = []
    async with LlamaClient(dying_server, timeout=10) as c:
        with pytest.raises(ServerGone) as ei:
            await c.complete("x", stream=True, on_text=got.append)
    assert got == ["a", "b"] and ei.value.during == "stream"
    assert "crashed or was killed" in str(ei.value)


def test_sync_use_via_asyncio_run() -> None:
    async def go() -> str:
        async with client(lambda r: httpx.Response(200, json={"status": "ok"})) as c:
            return (await c.health()).status

    assert asyncio.run(go()) == "ok"



async def test_a_get_on_a_connection_the_server_dropped_is_sent_once_more() -> None:
    # The router closes a kept-alive connection as it is reused right after a child loads.
    calls: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        calls.append(r.method)
        if len(calls) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=r)
        return httpx.Response(200, json={"status": "ok"})

    async with client(handler) as c:
        assert (await c.health()).ok
    assert calls == ["GET", "GET"]


async def test_a_dropped_post_is_not_sent_twice() -> None:
    calls: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        calls.append(r.method)
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=r)

    async with client(handler) as c:
        with pytest.raises(ServerGone):
            await c.load_model("m")
    assert calls == ["POST"]
