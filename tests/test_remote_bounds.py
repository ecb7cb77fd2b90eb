"""A remote header that lies costs a bounded read: lengths and counts are checked before anything is
read, the size a server claims is checked before a sparse copy is made that large, a header past the
cap is refused, and a split set is checked from its first part. Costs are counted from the loopback
server's log (requests, body bytes) and tracemalloc, never from time or RSS.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from tests.helpers.hostile_server import gguf, gguf_string, kv_string, kv_string_array, lying_file
from tests.helpers.range_server import LoopbackHub
from tests.helpers.remote_cli import one_error, plan_cli
from tui.core.planning.gguf_meta import GGUFError
from tui.core.planning.gguf_reader import MAX_HEADER_BYTES, MAX_TENSORS, read_gguf
from tui.core.remote import fetch
from tui.core.remote.errors import RemoteError
from tui.core.remote.header import read_remote_header
from tui.core.remote.hub import MAX_SPLIT_PARTS
from tui.core.remote.ranged import Limits, RangedFile, new_client
from tui.core.remote.source import ModelSource

FIRST_READ = 256 << 10  # RangedFile's first request
TWO_TIB = 2 << 40  # a size below the 4 TiB cap, so the parser's own checks are what trip


def _lie(hub: LoopbackHub, name: str, data: bytes, claimed: int) -> str:
    hub.routes[f"/lie/{name}"] = lying_file(data, claimed)
    return f"{hub.url}/lie/{name}"


def _read(url: str, **kw: object) -> tuple[str, int]:
    """The RemoteError of reading `url`'s header, and the peak memory it took (tracemalloc)."""
    tracemalloc.start()
    try:
        with new_client() as client, pytest.raises(RemoteError) as err:
            read_remote_header(client, url, **kw)  # type: ignore[arg-type]
        return str(err.value), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_key_name_claiming_2_60_bytes_is_refused_before_it_is_read(hub: LoopbackHub) -> None:
    """Was: 629 MB buffered until the server stopped. Now: one request, the first read's bytes."""
    url = _lie(hub, "key.gguf", gguf(0, 1, gguf_string(b"x", claimed=1 << 60)), TWO_TIB)
    msg, peak = _read(url)
    assert f"the name of key 0 claims {1 << 60} bytes (at most 65535 allowed)" in msg, msg
    assert len(hub.log) == 1 and hub.bytes_sent() <= FIRST_READ
    assert peak < 4 << 20, peak
    line = one_error(plan_cli("-mu", url, "--gpus", "cpu", "--json"))
    assert "claims 1152921504606846976 bytes" in line and "damaged or truncated" in line


def test_a_value_claiming_32_gib_is_refused_at_the_header_cap(hub: LoopbackHub) -> None:
    url = _lie(hub, "value.gguf", gguf(0, 1, kv_string("general.name", b"x", claimed=32 << 30)), TWO_TIB)
    msg, peak = _read(url)
    assert f"larger than {MAX_HEADER_BYTES >> 20} MiB" in msg and "general.name" in msg, msg
    assert len(hub.log) == 1 and hub.bytes_sent() <= FIRST_READ and peak < 4 << 20


@pytest.mark.parametrize("count,why", [(1 << 40, "more than a 2199023255552-byte file can hold"),
                                       (1 << 30, f"at most {MAX_TENSORS} tensors")])
def test_huge_claimed_tensor_counts_are_refused_before_the_table_is_read(hub: LoopbackHub, count: int, why: str) -> None:
    """Was: 2^40 tensors parsed on past 1 GB. Now: the count is checked first, against the size the
    server claims (24 bytes a tensor at least) and against MAX_TENSORS (a count that would fit)."""
    url = _lie(hub, "tensors.gguf", gguf(count, 0), TWO_TIB)
    msg, peak = _read(url)
    assert f"claims {count} tensors" in msg and why in msg, msg
    assert len(hub.log) == 1 and peak < 4 << 20


def test_a_header_past_the_cap_is_refused_and_never_buffered(hub: LoopbackHub) -> None:
    """A true 1.6 MB header (200k empty tokens) read under a 1 MiB cap: the RangedFile refuses to
    buffer past the cap, and the server sent no more than the cap. The same header under the
    default cap reads (so it is the cap that stops it)."""
    data = gguf(0, 1, kv_string_array("tokenizer.ggml.tokens", 200_000))
    url = _lie(hub, "big.gguf", data, len(data))
    msg, _ = _read(url, limits=Limits(max_bytes=1 << 20))
    assert "goes on past 1 MiB, more than any real GGUF header" in msg and "mtp-tune stops reading it" in msg, msg
    assert hub.bytes_sent() <= 1 << 20
    with new_client() as client:
        assert read_remote_header(client, url).header_size == len(data)
    with new_client() as client:
        rf = RangedFile(client, url, limits=Limits(max_bytes=1 << 20))
        with pytest.raises(RemoteError, match="goes on past 1 MiB"):
            rf.read(len(data))
        assert len(rf.data) <= 1 << 20


def test_a_local_header_past_the_cap_is_refused_without_reading_it(tmp_path: Path) -> None:
    """The cap is the parser's, so a damaged local file is bounded too: a tokenizer of 2^24 strings
    (128 MiB of lengths) in a 200 MB sparse file is refused before the array is read."""
    p = tmp_path / "local.gguf"
    with open(p, "wb") as fh:
        fh.write(gguf(0, 1, gguf_string(b"tokenizer.ggml.tokens") + (9).to_bytes(4, "little")
                      + (8).to_bytes(4, "little") + (1 << 24).to_bytes(8, "little")))
        fh.truncate(200 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(GGUFError, match=f"larger than {MAX_HEADER_BYTES >> 20} MiB"):
            read_gguf(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak


def _no_big_sparse_file() -> None:
    root = Path(os.environ["MTP_TUNE_REMOTE_DIR"])
    sizes = [p.stat().st_size for p in root.rglob("*") if p.is_file()]
    assert all(s < 64 << 20 for s in sizes), sizes


def test_a_content_range_claiming_8_tib_is_refused(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    """Was: an 8 TiB sparse file in the cache. Now: refused at the first answer."""
    url = _lie(hub, "m-Q4_K_M.gguf", tiny_models["tiny-mtp"].read_bytes(), 1 << 43)
    with pytest.raises(RemoteError, match=f"is {1 << 43} bytes \\(Content-Range\\), more than the 4 TiB") as err:
        fetch.fetch_model(ModelSource("url", url))
    assert "127.0.0.1" in str(err.value) and len(hub.log) == 1
    _no_big_sparse_file()


def test_a_size_past_the_tensor_table_is_refused(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    """Below the 4 TiB cap the header's own tensor table bounds the file: its data ends at byte N."""
    data = tiny_models["tiny-mtp"].read_bytes()
    url = _lie(hub, "m-Q4_K_M.gguf", data, TWO_TIB)
    with pytest.raises(RemoteError, match=f"its header's tensors end at byte {len(data)}"):
        fetch.fetch_model(ModelSource("url", url))
    _no_big_sparse_file()


def test_a_size_that_disagrees_with_the_hub_listing_is_refused(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    model = tiny_models["tiny-mtp"]
    hub.add_repo("u/m", {"m-Q4_K_M.gguf": model})
    hub.routes[f"/blobs/{hub.oid(model)}"] = lying_file(model.read_bytes(), model.stat().st_size + 4096)
    with pytest.raises(RemoteError, match=f"but the Hub's listing says {model.stat().st_size}"):
        fetch.fetch_model(ModelSource("hf", "u/m"))
    _no_big_sparse_file()


def test_an_endless_split_name_is_refused_before_any_request(hub: LoopbackHub) -> None:
    """Was: thousands of part reads before part 1's split.count was checked."""
    url = f"{hub.url}/files/m-Q4_K_M-00001-of-99999.gguf"
    with pytest.raises(RemoteError, match=f"split set of 99999 parts, more than the {MAX_SPLIT_PARTS}"):
        fetch.fetch_model(ModelSource("url", url))
    assert hub.log == []
    assert "99999 parts" in one_error(plan_cli("-mu", url, "--gpus", "cpu", "--json"))


def test_a_split_name_is_checked_against_its_first_part(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    """A name saying 200 parts whose first part is a whole model: one header read, not 200."""
    hub.add_file("m-Q4_K_M-00001-of-00200.gguf", tiny_models["tiny-mtp"])
    with pytest.raises(RemoteError, match="says it is part 1 of 1, but 200 part"):
        fetch.fetch_model(ModelSource("url", f"{hub.url}/files/m-Q4_K_M-00001-of-00200.gguf"))
    assert {h.path for h in hub.log} == {"/files/m-Q4_K_M-00001-of-00200.gguf"}


def test_a_listed_split_set_is_checked_from_its_first_part_and_capped(hub: LoopbackHub,
                                                                     tiny_models: dict[str, Path]) -> None:
    tiny = tiny_models["tiny-mtp"]
    hub.add_repo("u/s", {f"m-Q4_K_M-{i:05d}-of-00200.gguf": tiny for i in range(1, 201)})
    with pytest.raises(RemoteError, match="says it is part 1 of 1, but 200 part"):
        fetch.fetch_model(ModelSource("hf", "u/s"))
    assert len(hub.hits("/resolve/")) == 1 and hub.hits("/resolve/")[0].path.endswith("-00001-of-00200.gguf")
    hub.clear()
    hub.add_repo("u/big", {f"m-Q4_K_M-{i:05d}-of-00300.gguf": tiny for i in range(1, 301)})
    with pytest.raises(RemoteError, match=f"300 parts, more than the {MAX_SPLIT_PARTS}"):
        fetch.fetch_model(ModelSource("hf", "u/big"))
    assert not hub.hits("/resolve/")
