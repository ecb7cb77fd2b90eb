"""Every way planning a remote model fails says so in one line, exits non-zero, never a traceback,
and names the problem and what to do.

The real Hub and the internet are never reached: the hosts are the loopback server of
tests/helpers/range_server.py (static files and the Hub's routes, misbehaving on request) and a
loopback port nobody listens on (the "no network" case).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helpers.range_server import LoopbackHub, closed_port_url
from tests.helpers.remote_cli import child_env, figures, one_error, plan_cli, plan_json
from tests.helpers.split_model import split_gguf
from tests.helpers.third_party import gemma3_270m  # noqa: F401  (a fixture)
from tui.core.planning.gguf_reader import read_gguf

FLAGS = ("--gpus", "cpu", "--json")  # --json: no progress lines, so stderr is the error alone


def _mu(url: str) -> str:
    return one_error(plan_cli("-mu", url, *FLAGS))


def _hf(*args: str) -> str:
    return one_error(plan_cli("-hf", *args, *FLAGS))


def test_no_network() -> None:
    url = closed_port_url("m-Q4_K_M.gguf")
    host = url.split("/")[2]
    msg = _mu(url)
    assert f"cannot reach {host} (connection refused)" in msg and "plan a downloaded file with -m" in msg
    hf = one_error(plan_cli("-hf", "u/m", *FLAGS, env=child_env(HF_ENDPOINT=f"http://{host}")))
    assert f"cannot reach {host}" in hf and "HF_ENDPOINT" in hf


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_file_asks_for_a_token(hub: LoopbackHub, status: int) -> None:
    hub.status_for["/files/m.gguf"] = status
    msg = _mu(f"{hub.url}/files/m.gguf")
    assert f"refused m.gguf ({status}" in msg and "-hft TOKEN" in msg and "HF_TOKEN" in msg


def test_a_gated_repo_asks_for_a_token(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    hub.add_repo("u/gated", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]}, token="hf_x")
    msg = _hf("u/gated")
    assert "refused u/gated (401 unauthorized)" in msg and "gated or private" in msg
    assert "-hft TOKEN" in msg and "HF_TOKEN" in msg


def test_not_found(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    msg = _mu(f"{hub.url}/files/gone-Q4_K_M.gguf")
    assert "gone-Q4_K_M.gguf was not found" in msg and "(404)" in msg
    assert "u/nope was not found" in _hf("u/nope") and "(404)" in _hf("u/nope")
    hub.add_repo("u/m", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]})
    msg = _hf("u/m", "-hff", "m-Q8_0.gguf")
    assert "-hff 'm-Q8_0.gguf' is not in u/m" in msg and "the repo has: m-Q4_K_M.gguf" in msg
    msg = _hf("u/m:IQ1_S")
    assert "u/m has no GGUF file matching the quant 'IQ1_S'" in msg and "m-Q4_K_M.gguf" in msg
    assert "expected <user>/<model>[:quant]" in _hf("just-a-name")
    hub.repos["u/m"].files.pop("m-Q4_K_M.gguf")  # listed a moment ago, gone from the commit since
    hub.repos["u/m"].files["m-Q8_0.gguf"] = tiny_models["tiny-mtp"]
    hub.status_for[f"/u/m/resolve/{hub.repos['u/m'].commit}/m-Q8_0.gguf"] = 404
    msg = _hf("u/m:Q8_0", "--refresh")
    assert "m-Q8_0.gguf was not found" in msg


def test_not_a_gguf(hub: LoopbackHub, tmp_path: Path) -> None:
    page = tmp_path / "page.gguf"
    page.write_text("<!doctype html><title>Hugging Face</title>\n" * 200)
    url = hub.add_file("page.gguf", page)
    msg = _mu(url)
    assert f"{url} is not a GGUF file (it starts with b'<!do'" in msg and "resolve/main/FILE.gguf" in msg
    assert hub.bytes_sent() == page.stat().st_size  # one read, the file is small


def test_a_host_that_ignores_range_is_refused_without_a_download(hub: LoopbackHub, gemma3_270m: Path) -> None:  # noqa: F811
    url = hub.add_file(gemma3_270m.name, gemma3_270m)
    hub.ignore_range.add(f"/files/{gemma3_270m.name}")
    t0 = time.monotonic()
    msg = _mu(url)
    assert "ignores HTTP Range requests" in msg and "download it, then plan it with -m FILE" in msg
    assert "(0.2 GiB)" in msg  # the size it announced
    done = hub.wait_for(f"/files/{gemma3_270m.name}", timeout=60)  # the handler ends when the client hangs up
    assert len(done) == 1 and done[0].status == 200
    size = gemma3_270m.stat().st_size
    assert done[0].sent < size // 8, f"the server sent {done[0].sent} of {size} bytes: the client read the body"
    assert time.monotonic() - t0 < 60


def test_a_header_cut_short(hub: LoopbackHub, gemma3_270m: Path, tmp_path: Path) -> None:  # noqa: F811
    cut = tmp_path / "cut-Q4_K_M.gguf"
    cut.write_bytes(gemma3_270m.read_bytes()[:100_000])  # inside the vocabulary
    url = hub.add_file(cut.name, cut)
    msg = _mu(url)
    assert msg.startswith(f"mtp-tune: {url}: key 'tokenizer.ggml.tokens'")  # the URL whole, not http:/host
    assert "the file ends at byte 100000" in msg and "truncated" in msg


def test_tensor_data_cut_short_is_said_as_for_a_file_on_disk(hub: LoopbackHub, gemma3_270m: Path,  # noqa: F811
                                                            tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gemma3_270m.read_bytes()[: read_gguf(gemma3_270m).data_offset + (1 << 20)])
    remote = plan_json("-mu", hub.add_file(cut.name, cut), "--gpus", "cpu")
    local = plan_json("-m", str(cut), "--gpus", "cpu")
    assert figures(remote) == figures(local)
    assert any("the tensor data is truncated" in w and "llama-server will refuse" in w for w in remote["model"]["warnings"])


def test_an_empty_file_and_a_416(hub: LoopbackHub, tmp_path: Path) -> None:
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert "could not serve a byte range of empty.gguf (416)" in _mu(hub.add_file(empty.name, empty))
    hub.status_for["/files/short.gguf"] = 416
    assert "(416): the file is shorter than its own header says" in _mu(f"{hub.url}/files/short.gguf")


def test_a_server_error(hub: LoopbackHub) -> None:
    hub.status_for["/files/m.gguf"] = 503
    assert "answered 503 for m.gguf: try again later" in _mu(f"{hub.url}/files/m.gguf")


def test_a_split_set_missing_a_part(hub: LoopbackHub, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    parts = split_gguf(tiny_models["tiny-moe-mtp"], tmp_path / "m.gguf", 3)
    urls = [hub.add_file(p.name, p) for p in parts[:2]]  # the third part is not there
    msg = _mu(urls[0])
    assert "m-00003-of-00003.gguf was not found" in msg and "(404)" in msg
