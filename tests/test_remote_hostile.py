"""A hostile or broken host: the Hugging Face token reaches the Hub endpoint's origin only, and every
remote read ends in one sentence, with bounded requests, instead of hanging or a traceback.

Two loopback servers (127.0.0.1, two ports): `hub` is the Hub (`HF_ENDPOINT`), `other` any other
host. What each received (its path, its Authorization header) comes from the servers' own logs; a
slow or silent host is met with the client's bounds made short (`ranged.Limits`), never with a
sleep in the test or an assertion on time.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.hostile_server import file_entry, paged_tree, redirect, silent, trickle
from tests.helpers.range_server import LoopbackHub, serve
from tests.helpers.remote_cli import child_env, one_error, plan_cli
from tui.core.remote import fetch
from tui.core.remote.errors import RemoteError
from tui.core.remote.header import read_remote_header
from tui.core.remote.hub import HubFile
from tui.core.remote.hub_client import MAX_PAGES, repo_commit_and_files
from tui.core.remote.ranged import Limits, new_client
from tui.core.remote.source import ModelSource

TOKEN = "hf_CANARYcanary0123456789"
FLAGS = ("--gpus", "cpu", "--json")


@pytest.fixture
def other() -> Iterator[LoopbackHub]:
    """A second loopback host, which is not the Hub."""
    with serve() as h:
        yield h


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    """Ends every trickling or silent answer when the test is done (they wait on it, bounded)."""
    ev = threading.Event()
    yield ev
    ev.set()


def _url(source_url: str, token: str | None = TOKEN) -> fetch.Fetched:
    return fetch.fetch_model(ModelSource("url", source_url, token=token))


# ---- the token goes to the Hub endpoint's origin only ----

def test_a_url_on_another_host_gets_no_token(hub: LoopbackHub, other: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    """Was: `HF_TOKEN=T plan -mu http://any-host/x.gguf` sent `Authorization: Bearer T` there."""
    _url(other.add_file("m-Q4_K_M.gguf", tiny_models["tiny-mtp"]))
    assert other.log and all(h.auth == "" for h in other.log)
    _url(hub.add_file("m-Q8_0.gguf", tiny_models["tiny-mtp"]))  # the Hub's own origin: the token goes
    assert hub.log and all(h.auth == f"Bearer {TOKEN}" for h in hub.log)
    other.clear()
    out = plan_cli("-mu", f"{other.url}/files/m-Q4_K_M.gguf", "--refresh", *FLAGS,
                   env=child_env(HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN))
    assert out.returncode == 0, out.stderr
    assert other.log and all(h.auth == "" for h in other.log)


def test_a_redirect_off_the_hub_drops_the_token(hub: LoopbackHub, other: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    """A Hub resolve URL redirecting to storage elsewhere (as the real Hub's does): the Hub's routes
    get the token, the other host none (httpx drops Authorization when a redirect leaves the origin)."""
    hub.add_repo("u/m", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]}, token=TOKEN)
    commit = hub.repos["u/m"].commit
    hub.routes[f"/u/m/resolve/{commit}/m-Q4_K_M.gguf"] = redirect(other.add_file("blob", tiny_models["tiny-mtp"]))
    got = fetch.fetch_model(ModelSource("hf", "u/m", token=TOKEN))
    assert got.repo_file == "m-Q4_K_M.gguf" and other.log
    assert all(h.auth == "" for h in other.log)
    assert hub.log and all(h.auth == f"Bearer {TOKEN}" for h in hub.log)


def test_a_listing_whose_next_page_is_elsewhere_stops(hub: LoopbackHub, other: LoopbackHub,
                                                      tiny_models: dict[str, Path]) -> None:
    """Was: the token sent with every page on another origin (48 requests). Now: not one request there."""
    hub.add_repo("u/m", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]})
    tree = f"/api/models/u/m/tree/{hub.repos['u/m'].commit}"
    hub.routes[tree] = paged_tree([[file_entry("m-Q4_K_M.gguf", 1)]], lambda i: f"{other.url}{tree}?cursor={i + 1}")
    with pytest.raises(RemoteError, match="continues on another host") as err:
        fetch.fetch_model(ModelSource("hf", "u/m", token=TOKEN))
    assert other.url.split("//")[1] in str(err.value) and other.log == []
    assert len(hub.hits(tree)) == 1


def test_an_endless_listing_stops_at_the_page_cap(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    hub.add_repo("u/m", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]})
    tree = f"/api/models/u/m/tree/{hub.repos['u/m'].commit}"
    hub.routes[tree] = paged_tree([[file_entry(f"f{i}.txt", 1)] for i in range(3)], lambda i: f"{tree}?cursor={i + 1}")
    with pytest.raises(RemoteError, match=f"goes on past {MAX_PAGES} pages"):
        fetch.fetch_model(ModelSource("hf", "u/m"))
    assert len(hub.hits(tree)) == MAX_PAGES and len(hub.log) == MAX_PAGES + 1  # and the refs


def test_a_listing_of_several_pages_on_the_hub_is_read_whole(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    """The control: pages on the endpoint's own origin are followed (relative links too), with the token."""
    hub.add_repo("u/m", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]}, token=TOKEN)
    tree = f"/api/models/u/m/tree/{hub.repos['u/m'].commit}"
    size = tiny_models["tiny-mtp"].stat().st_size
    pages = [[file_entry("README.md", 5)], [file_entry("m-Q4_K_M.gguf", size)]]
    hub.routes[tree] = paged_tree(pages, lambda i: f"{tree}?cursor=1" if i == 0 else None)
    commit, files = repo_commit_and_files(hub.url + "/", "u/m", TOKEN)
    assert [f.path for f in files] == ["README.md", "m-Q4_K_M.gguf"] and commit == hub.repos["u/m"].commit
    assert len(hub.hits(tree)) == 2 and all(h.auth == f"Bearer {TOKEN}" for h in hub.log)


# ---- redirect loops, trickles, silence ----

def test_a_redirect_loop_is_one_sentence(hub: LoopbackHub) -> None:
    """Was: a traceback (httpx.TooManyRedirects)."""
    hub.routes["/loop/m.gguf"] = redirect(f"{hub.url}/loop/m.gguf")
    with pytest.raises(RemoteError, match="more than 10 times \\(a redirect loop\\)"):
        _url(f"{hub.url}/loop/m.gguf")
    assert len(hub.log) == 11
    hub.routes["/api/models/u/loop/refs"] = redirect("/api/models/u/loop/refs")
    with pytest.raises(RemoteError, match="redirect loop"):
        fetch.repo_listing("u/loop", None)
    assert "redirect loop" in one_error(plan_cli("-mu", f"{hub.url}/loop/m.gguf", *FLAGS))


def test_a_trickling_body_trips_the_progress_rule(hub: LoopbackHub, stop: threading.Event) -> None:
    """Was: one byte every 5 s kept a plan alive for ever (the timeout is per read). The rule's window
    is made short; the server trickles 1 byte per 20 ms, far below the minimum rate."""
    hub.routes["/slow/m.gguf"] = trickle(stop)
    with new_client() as client, pytest.raises(RemoteError) as err:
        read_remote_header(client, f"{hub.url}/slow/m.gguf", limits=Limits(window_s=0.2, min_rate_bps=64 << 10))
    msg = str(err.value)
    assert msg.startswith(hub.url.split("//")[1]) and " B/s over " in msg and "below the 64.0 KiB/s minimum" in msg, msg
    stop.set()
    assert hub.bytes_sent() < 1000


def test_a_read_past_its_deadline_stops(hub: LoopbackHub, stop: threading.Event) -> None:
    hub.routes["/slow/m.gguf"] = trickle(stop)
    with new_client() as client, pytest.raises(RemoteError, match="took longer than 0.3 s"):
        read_remote_header(client, f"{hub.url}/slow/m.gguf", limits=Limits(deadline_s=0.3, window_s=1e9))


def test_a_silent_host_times_out(hub: LoopbackHub, stop: threading.Event) -> None:
    """A file host and the Hub's API that accept the request and never answer."""
    hub.routes["/silent/m.gguf"] = silent(stop)
    with new_client() as client, pytest.raises(RemoteError, match=r"cannot reach 127\.0\.0\.1:\d+ \(timed out\)"):
        read_remote_header(client, f"{hub.url}/silent/m.gguf", limits=Limits(read_s=0.3))
    hub.routes["/api/models/u/m/refs"] = silent(stop)
    with pytest.raises(RemoteError, match=r"cannot reach 127\.0\.0\.1:\d+ \(timed out\)"):
        repo_commit_and_files(hub.url + "/", "u/m", None, limits=Limits(read_s=0.3))
    stop.set()


# ---- server text in messages: escaped and bounded ----

def test_escape_sequences_and_long_names_in_a_listing_are_quoted_safely(hub: LoopbackHub,
                                                                       tiny_models: dict[str, Path]) -> None:
    hostile = "\x1b]0;pwned\x07\x1b[2J-Q8_0.gguf"
    hub.add_repo("u/esc", {hostile: tiny_models["tiny-mtp"], "x" * 5000 + "-Q6_K.gguf": tiny_models["tiny-mtp"]})
    with pytest.raises(RemoteError) as err:
        fetch.fetch_model(ModelSource("hf", "u/esc:IQ1_S"))
    msg = str(err.value)
    assert "\x1b" not in msg and "\x07" not in msg and "\\x1b]0;pwned\\x07\\x1b[2J-Q8_0.gguf" in msg, msg
    assert len(msg) < 1000, len(msg)
    line = one_error(plan_cli("-hf", "u/esc:IQ1_S", *FLAGS))
    assert "\x1b" not in line and "u/esc has no GGUF file matching the quant 'IQ1_S'" in line


def test_a_garbled_content_range_is_quoted_bounded(hub: LoopbackHub) -> None:
    def route(h: object, head: bool) -> None:
        h._send(206, b"GGUF", head, {"Content-Range": "bytes junk" + "x" * 5000})  # type: ignore[attr-defined]
    hub.routes["/garbled.gguf"] = route
    with pytest.raises(RemoteError, match="without a valid Content-Range") as err:
        _url(f"{hub.url}/garbled.gguf")
    assert len(str(err.value)) < 400


# ---- the Hub's JSON of any shape ----

_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=12),
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4), max_leaves=20)
_COMMIT = "a" * 40
_ENTRY = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["file", "directory"]) | _JSON, "path": st.text(max_size=16) | _JSON,
    "size": st.integers(-5, 1 << 70) | _JSON, "lfs": _JSON | st.fixed_dictionaries({}, optional={"size": _JSON})})
_REFS = _JSON | st.just({"branches": [{"name": "main", "targetCommit": _COMMIT}]})


def _answer(value: Any) -> Any:
    def route(h: Any, head: bool) -> None:
        h._send(200, json.dumps(value).encode(), head, {"Content-Type": "application/json"})
    return route


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(refs=_REFS, page=_JSON | st.lists(_ENTRY, max_size=6))
def test_a_hub_answer_of_any_shape_is_a_listing_or_one_sentence(hub: LoopbackHub, refs: Any, page: Any) -> None:
    """Was: huggingface_hub's KeyError/TypeError on an answer of the wrong shape. Now: files (the
    entries of the wrong shape skipped, as llama.cpp skips them) or a RemoteError."""
    hub.routes["/api/models/u/h/refs"] = _answer(refs)
    hub.routes[f"/api/models/u/h/tree/{_COMMIT}"] = _answer(page)
    try:
        commit, files = repo_commit_and_files(hub.url + "/", "u/h", None)
    except RemoteError as exc:
        assert "\n" not in str(exc)
        return
    assert commit == _COMMIT and isinstance(page, list)
    assert all(isinstance(f, HubFile) and isinstance(f.path, str) and f.path and isinstance(f.size, int)
               and f.size >= 0 for f in files)
