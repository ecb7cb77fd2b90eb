"""LlamaClient end to end against the real llama-server (tiny MTP model, API key on)."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.helpers.supervisor_util import BASE_ARGS, FINAL, MTP_ARGS, make_supervisor, pid_gone
from tui.core.server.client import LlamaClient
from tui.core.server.client_errors import ServerGone, ServerUnreachable, Unauthorized
from tui.core.server.failures import FailureKind
from tui.core.server.events import ServerState
from tui.core.server.supervisor import Supervisor

KEY = "test-key-123"


@pytest.fixture(scope="module")
def server(server_bin: Path, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    root = tmp_path_factory.mktemp("client")
    args = ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS, *MTP_ARGS, "--spec-draft-n-max", "3", "--api-key", KEY]
    sup = make_supervisor(server_bin, args, root)
    sup.start()
    assert sup.wait_ready(60) == ServerState.READY, sup.tail(20)
    yield sup
    sup.close()


@pytest.fixture
async def c(server: Supervisor) -> AsyncIterator[LlamaClient]:
    async with LlamaClient(server.base_url, api_key=KEY) as client:  # type: ignore[arg-type]
        yield client


async def test_health_is_public_but_the_rest_needs_the_key(server: Supervisor) -> None:
    async with LlamaClient(server.base_url) as anon:  # type: ignore[arg-type]
        assert (await anon.health()).ok
        with pytest.raises(Unauthorized):
            await anon.slots()


async def test_completion_plain(c: LlamaClient) -> None:
    r = await c.complete("Hello world", n_predict=32, temperature=0, cache_prompt=False)
    t = r.timings
    assert t["predicted_n"] == 32 and t["cache_n"] == 0 and t["prompt_n"] > 0
    assert t["draft_n"] > 0 and t["draft_n_accepted"] == t["draft_n"]  # the bigram model: 100 %
    assert r.acceptance == 1.0 and r.text and r.ttft_s is None and r.wall_s > 0
    assert r.generation_settings["speculative.types"] == "none,draft-mtp"  # type: ignore[index]


async def test_completion_stream_matches_plain(c: LlamaClient) -> None:
    plain = await c.complete("Hello world", n_predict=32, temperature=0)
    seen: list[str] = []
    r = await c.complete("Hello world", n_predict=32, temperature=0, stream=True, on_text=seen.append)
    assert r.text == plain.text == "".join(seen)  # greedy: the same tokens
    assert r.timings["predicted_n"] == 32 and r.timings["draft_n"] > 0
    assert r.ttft_s is not None and 0 < r.ttft_s <= r.wall_s
    assert r.response["stop"] is True


async def test_chat_plain_and_stream(c: LlamaClient) -> None:
    msgs = [{"role": "user", "content": "Say something"}]
    plain = await c.chat(msgs, max_tokens=24, temperature=0)
    stream = await c.chat(msgs, max_tokens=24, temperature=0, stream=True)
    assert plain.text == stream.text and plain.text
    assert plain.usage and plain.usage["completion_tokens"] == 24
    assert stream.usage and stream.usage["completion_tokens"] == 24
    assert stream.timings["predicted_n"] == 24 and stream.timings["draft_n"] > 0
    assert stream.ttft_s is not None and stream.ttft_s <= stream.wall_s


async def test_props_slots_metrics(c: LlamaClient) -> None:
    await c.complete("Hello world", n_predict=48, temperature=0)
    props = await c.props()
    assert props["default_generation_settings"]["params"]["speculative.types"] == "none"  # llama-server quirk
    assert await c.speculative_enabled() is True  # /slots tells the truth
    m = await c.metrics()
    assert m.draft_tokens > 0 and m.accepted_tokens == m.draft_tokens and m.drafts > 0
    assert sorted(m.accepted_per_position) == [0, 1, 2]
    assert m.mean_accept_len is not None and 3.0 < m.mean_accept_len <= 4.0
    assert m.value("tokens_predicted_total") and m.types["llamacpp:tokens_predicted_total"] == "counter"


async def test_sigkill_mid_stream(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """The server is SIGKILLed after the first token: the client raises ServerGone, the supervisor says killed."""
    sup = make_supervisor(server_bin, ["-m", str(tiny_models["tiny-mtp"]), *BASE_ARGS, *MTP_ARGS], tmp_path)
    try:
        sup.start()
        assert sup.wait_ready(60) == ServerState.READY
        pid = sup.pid
        assert pid is not None
        killed: list[int] = []

        def kill_once(_: str) -> None:
            if not killed:
                killed.append(pid)
                os.kill(pid, signal.SIGKILL)

        async with LlamaClient(sup.base_url) as client:  # type: ignore[arg-type]
            with pytest.raises(ServerGone) as ei:
                await client.complete("Hello", n_predict=4000, ignore_eos=True, temperature=0, stream=True,
                                      on_text=kill_once)
            assert ei.value.during == "stream" and killed
            assert sup.wait_for(FINAL, 30) == ServerState.FAILED  # reaped: its socket is closed now
            with pytest.raises(ServerUnreachable):
                await client.health()
        f = sup.failure
        assert f is not None and f.kind == FailureKind.KILLED and f.signal == signal.SIGKILL
        assert "while serving a request" in f.message
        assert pid_gone(pid)
    finally:
        sup.close()
