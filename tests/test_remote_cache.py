"""The header cache under concurrency: the TUI's estimate and its exact run ask for the same remote
header at once (two threads), and two mtp-tune processes may write the same entry. Over the loopback
Hub (tests/helpers/range_server.py); the real Hub is never reached."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.helpers.range_server import LoopbackHub
from tui.core.remote import cache, fetch
from tui.core.remote.errors import RemoteError
from tui.core.remote.header import read_remote_header
from tui.core.remote.ranged import new_client
from tui.core.remote.source import ModelSource

THREADS = 6


def _race(fn) -> list[object]:  # noqa: ANN001 - a callable of no argument
    """Run `fn` on THREADS threads released together; their results (or exceptions)."""
    start = threading.Barrier(THREADS)
    out: list[object] = [None] * THREADS

    def one(i: int) -> None:
        start.wait(timeout=30)
        try:
            out[i] = fn()
        except Exception as exc:  # noqa: BLE001 - the test reports what each thread got
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return out


@pytest.mark.parametrize("kind", ["hf", "url"])
def test_threads_asking_for_one_header_read_it_once(hub: LoopbackHub, tiny_models: dict[str, Path], kind: str) -> None:
    src = tiny_models["tiny-moe-mtp"]
    hub.rate_bps = 2_000_000  # the first read takes long enough for the others to arrive meanwhile
    if kind == "hf":
        hub.add_repo("me/tiny-GGUF", {"tiny-Q4_K_M.gguf": src})
        source = ModelSource("hf", "me/tiny-GGUF")
    else:
        source = ModelSource("url", hub.add_file(src.name, src))
    got = _race(lambda: fetch.fetch_model(source))
    assert all(isinstance(g, fetch.Fetched) for g in got), got
    paths = {g.path for g in got}  # type: ignore[union-attr]
    assert len(paths) == 1 and next(iter(paths)).stat().st_size == src.stat().st_size
    assert sum(not g.cached for g in got) == 1  # type: ignore[union-attr]
    hits = hub.wait_for("/blobs/" if kind == "hf" else "/files/")  # a hit is logged once its body is sent
    reads = [h for h in hits if h.range.startswith("bytes=0-") and h.status == 206]
    assert len(reads) == 1, hub.log  # one header read for six askers


def test_writers_of_one_entry_never_collide(hub: LoopbackHub, tiny_models: dict[str, Path],
                                                tmp_path: Path) -> None:
    """Writers of one key that share no thread lock (as two mtp-tune processes): each fills its own
    temporary folder, the entry's file lock orders the renames, none fails, none leaves a folder."""
    src = tiny_models["tiny-mtp"]
    url = hub.add_file(src.name, src)
    with new_client() as client:
        part = read_remote_header(client, url)
    root = tmp_path / "remote"
    first = cache.store("url|x", [part], root)
    second = cache.store("url|x", [part], root)  # an entry is already there
    assert first.path == second.path and cache.lookup("url|x", root) is not None
    got = _race(lambda: cache.store("url|y", [part], root))
    assert all(isinstance(g, cache.CachedModel) for g in got), [g for g in got if isinstance(g, Exception)]
    assert sorted(p.name for p in (root / "headers").iterdir() if p.suffix in (".tmp", ".old")) == []


def test_an_unwritable_cache_is_one_sentence(hub: LoopbackHub, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    src = tiny_models["tiny-mtp"]
    with new_client() as client:
        part = read_remote_header(client, hub.add_file(src.name, src))
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("x")
    with pytest.raises(RemoteError, match="the header cache at .* could not be written"):
        cache.store("url|z", [part], blocked)
