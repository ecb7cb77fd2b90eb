"""`plan -hf REPO[:QUANT] [-hff FILE] [-hft TOKEN]`: the file(s) llama-server's own `-hf` would
download, chosen by llama.cpp's rules, planned from their headers.

The real Hub is never reached: HF_ENDPOINT points at the loopback server of
tests/helpers/range_server.py, which answers the Hub's routes (`/api/models/REPO/refs`, `.../tree/REV`,
`/REPO/resolve/REV/PATH` -> `/blobs/SHA`) for repos made of real GGUF files, gated ones included.
The pure rules of tui/core/remote/hub.py are checked against cases read from llama.cpp b11434's
common/download.cpp and common/hf-cache.cpp (the function each case comes from is named).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.range_server import LoopbackHub, serve
from tests.helpers.remote_cli import child_env, figures, one_error, plan_cli, plan_json
from tests.helpers.split_model import split_gguf
from tui.core.remote import fetch
from tui.core.remote.errors import RemoteError
from tui.core.remote.hub import (HubFile, endpoint, find_best_model, is_model_file, resolve_files, resolve_url,
                                 split_files, split_info, split_repo_tag)
from tui.core.remote.hub_client import _pick_commit
from tui.core.remote.source import ModelSource

FLAGS = ("--gpus", "2x16GiB", "-c", "4096")
TOKEN = "hf_loopbackSecret123"


def _hf(spec: str, hf_file: str = "", token: str | None = None) -> fetch.Fetched:
    return fetch.fetch_hf(ModelSource("hf", spec, hf_file, token))


# ---- through the loopback Hub ----

def test_default_quant_is_q4_k_m_then_q8_0_then_the_first_model(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    t = tiny_models
    hub.add_repo("u/all", {"m-Q2_K.gguf": t["tiny-nomtp"], "m-Q8_0.gguf": t["tiny-mtp-q8_0"], "m-Q4_K_M.gguf": t["tiny-mtp"]})
    hub.add_repo("u/no-q4", {"m-Q2_K.gguf": t["tiny-nomtp"], "m-Q8_0.gguf": t["tiny-mtp-q8_0"]})
    hub.add_repo("u/neither", {"mmproj-m-F16.gguf": t["tiny-mtp"], "m-IQ3_XS.gguf": t["tiny-moe-mtp"], "m-F16.gguf": t["tiny-nomtp"]})
    assert _hf("u/all").repo_file == "m-Q4_K_M.gguf"
    assert _hf("u/no-q4").repo_file == "m-Q8_0.gguf"
    assert _hf("u/neither").repo_file == "m-IQ3_XS.gguf"  # the first model file, the projector skipped
    remote = plan_json("-hf", "u/all", *FLAGS)
    assert remote["remote"]["file"] == "m-Q4_K_M.gguf" and remote["remote"]["source"] == "u/all"
    assert figures(remote) == figures(plan_json("-m", str(t["tiny-mtp"]), *FLAGS))


def test_a_quant_tag_is_matched_case_insensitively(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    hub.add_repo("u/m", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"], "m-Q8_0.gguf": tiny_models["tiny-mtp-q8_0"]})
    assert _hf("u/m:Q8_0").repo_file == "m-Q8_0.gguf"
    remote = plan_json("-hf", "u/m:q8_0", *FLAGS)
    assert remote["remote"]["file"] == "m-Q8_0.gguf"
    assert figures(remote) == figures(plan_json("-m", str(tiny_models["tiny-mtp-q8_0"]), *FLAGS))
    with pytest.raises(RemoteError, match=r"no GGUF file matching the quant 'Q5_K_M'.*m-Q4_K_M\.gguf, m-Q8_0\.gguf"):
        _hf("u/m:Q5_K_M")  # a tag given and not found: no fallback (find_best_model)


def test_hff_names_the_file(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    hub.add_repo("u/m", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"], "sub/other.gguf": tiny_models["tiny-nomtp"]})
    remote = plan_json("-hf", "u/m", "-hff", "sub/other.gguf", *FLAGS)
    assert remote["remote"]["file"] == "sub/other.gguf"
    assert figures(remote) == figures(plan_json("-m", str(tiny_models["tiny-nomtp"]), *FLAGS))
    assert [h.path for h in hub.hits("/resolve/")] == [f"/u/m/resolve/{hub.repos['u/m'].commit}/sub/other.gguf"]


def test_a_split_set_is_every_part_in_order(hub: LoopbackHub, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    whole = tiny_models["tiny-moe-mtp"]
    parts = split_gguf(whole, tmp_path / "Q4_K_M" / "m-Q4_K_M.gguf", 3)
    other = split_gguf(tiny_models["tiny-mtp"], tmp_path / "x" / "m-Q4_K_M.gguf", 2)  # same prefix, another count
    files = {f"Q4_K_M/{parts[i].name}": parts[i] for i in (2, 0, 1)}  # listed out of order
    files.update({f"Q4_K_M/{p.name}": p for p in other})
    hub.add_repo("u/split", files)
    got = _hf("u/split")
    assert got.repo_file == f"Q4_K_M/{parts[0].name}" and len(got.urls) == 3
    assert [u.rsplit("/", 1)[1] for u in got.urls] == [p.name for p in parts]
    assert len(hub.hits("/resolve/")) >= 3
    remote = plan_json("-hf", "u/split", *FLAGS)
    assert figures(remote) == figures(plan_json("-m", str(parts[0]), *FLAGS))
    assert figures(remote, file_size=False) == figures(plan_json("-m", str(whole), *FLAGS), file_size=False)
    assert len(_hf("u/split", f"Q4_K_M/{other[0].name}").urls) == 2  # -hff part 1: its own set


def test_sidecars_are_never_the_model(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    t = tiny_models["tiny-nomtp"]
    hub.add_repo("u/side", {"mmproj-m-Q4_K_M.gguf": t, "mtp-m-Q4_K_M.gguf": t, "m-Q4_K_M.imatrix.gguf": t,
                            "eagle3-m-Q4_K_M.gguf": t, "dflash-m-Q4_K_M.gguf": t, "m-Q4_K_M.gguf": tiny_models["tiny-mtp"]})
    assert _hf("u/side").repo_file == "m-Q4_K_M.gguf"


def test_a_preset_repo_is_refused(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    hub.add_repo("u/preset", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]}, extra={"preset.ini": b"[m]\nhf-repo = u/x\n"})
    msg = one_error(plan_cli("-hf", "u/preset", *FLAGS, "--json"))
    assert "u/preset holds a preset.ini" in msg and "plan the model it names" in msg
    assert not hub.hits("/resolve/")


def test_a_gated_repo_asks_for_a_token_and_takes_it(hub: LoopbackHub, tiny_models: dict[str, Path],
                                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    hub.add_repo("u/gated", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]}, token=TOKEN)
    msg = one_error(plan_cli("-hf", "u/gated", *FLAGS, "--json"))
    assert "u/gated" in msg and "401" in msg and "-hft TOKEN" in msg and "HF_TOKEN" in msg
    assert all(h.auth == "" for h in hub.log)
    msg = one_error(plan_cli("-hf", "u/gated", "-hft", "hf_wrong", *FLAGS, "--json"))
    assert "401" in msg
    hub.clear()
    ok = plan_json("-hf", "u/gated", "-hft", TOKEN, *FLAGS)
    assert ok["remote"]["file"] == "m-Q4_K_M.gguf"
    for route in ("/api/models/u/gated/refs", "/api/models/u/gated/tree/", "/u/gated/resolve/", "/blobs/"):
        assert hub.hits(route), route
    assert all(h.auth == f"Bearer {TOKEN}" for h in hub.log)  # every Hub route, the blob too

    hub.clear()
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with_env = plan_json("-hf", "u/gated", *FLAGS, env=child_env(MTP_TUNE_REMOTE_DIR=str(tmp_path / "fresh")))
    assert figures(with_env) == figures(ok) and hub.hits("/resolve/") and hub.hits("/refs")
    assert all(h.auth == f"Bearer {TOKEN}" for h in hub.log)


def test_the_listing_is_cached_and_refresh_lists_again(hub: LoopbackHub, tiny_models: dict[str, Path]) -> None:
    hub.add_repo("u/m", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]})
    first = plan_cli("-hf", "u/m", *FLAGS)
    assert first.returncode == 0, first.stderr
    assert "listing u/m" in first.stderr and "reading the header of m-Q4_K_M.gguf" in first.stderr
    assert hub.hits("/refs") and hub.hits("/tree/") and hub.hits("/blobs/")
    assert not hub.hits("/api/agent-harnesses"), "huggingface_hub sent telemetry"
    hub.clear()
    second = plan_cli("-hf", "u/m", *FLAGS)
    assert second.returncode == 0 and hub.log == []
    assert "from the cache, no request" in second.stdout.splitlines()[0] and "listing" not in second.stderr
    refreshed = plan_json("-hf", "u/m", *FLAGS, "--refresh")
    assert hub.hits("/refs") and hub.hits("/tree/") and not hub.hits("/resolve/")  # a commit's header never changes
    assert not refreshed["remote"]["cached"] and "whose header is cached" in refreshed["remote"]["notes"][0]


def test_mu_of_a_resolve_url_follows_the_redirect_with_hf_token(hub: LoopbackHub, tiny_models: dict[str, Path],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`-mu https://HUB/REPO/resolve/main/FILE` is a plain URL that redirects; llama-server sends
    HF_TOKEN (or -hft) as its bearer, so a gated file planned this way needs the same token."""
    hub.add_repo("u/gated", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]}, token=TOKEN)
    url = f"{hub.url}/u/gated/resolve/main/m-Q4_K_M.gguf"
    assert "401" in one_error(plan_cli("-mu", url, *FLAGS, "--json")) and all(h.auth == "" for h in hub.log)
    hub.clear()
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    remote = plan_json("-mu", url, *FLAGS)
    assert figures(remote) == figures(plan_json("-m", str(tiny_models["tiny-mtp"]), *FLAGS))
    assert [h.status for h in hub.log] == [302, 206] and all(h.auth == f"Bearer {TOKEN}" for h in hub.log)


def test_a_stale_listing_is_used_offline_and_says_so(tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    with serve() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        hub.add_repo("u/m", {"m-Q4_K_M.gguf": tiny_models["tiny-mtp"]})
        online = _hf("u/m")
    notes: list[str] = []
    commit, files, from_cache = fetch.repo_listing("u/m", None, max_age_s=0, notes=notes)  # the Hub is gone
    assert from_cache and [f.path for f in files] == ["m-Q4_K_M.gguf"] and commit == hub.repos["u/m"].commit
    assert len(notes) == 1 and notes[0].startswith("offline: using the listing of u/m read 0.0 h ago")
    assert _hf("u/m").path == online.path  # fresh listing, cached header: no request needed
    with pytest.raises(RemoteError, match="cannot reach 127.0.0.1"):
        fetch.repo_listing("u/never-listed", None)


def test_huggingface_hub_is_imported_only_by_the_remote_package_with_telemetry_off() -> None:
    root = Path(__file__).resolve().parents[1] / "tui"
    users = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                   if "import huggingface_hub" in (text := p.read_text(encoding="utf-8")) or "from huggingface_hub" in text)
    assert users and all(u.startswith("core/remote/") for u in users), users
    code = "import tui.core.remote.fetch, huggingface_hub.constants as c; print(c.HF_HUB_DISABLE_TELEMETRY)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=60)
    assert out.stdout.strip() == "True", out.stderr


# ---- llama.cpp's rules, unit by unit ----

def test_split_info_as_get_gguf_split_info() -> None:
    s = split_info("Q4_K_M/Qwen3.6-35B-A3B-Q4_K_M-00002-of-00003.gguf")
    assert s is not None and (s.prefix, s.tag, s.index, s.count) == ("Q4_K_M/Qwen3.6-35B-A3B-Q4_K_M", "Q4_K_M", 2, 3)
    assert split_info("m-q8_0.gguf").tag == "Q8_0"  # type: ignore[union-attr]  # upper-cased
    assert split_info("Model.Q5_K_S.gguf").tag == "Q5_K_S"  # type: ignore[union-attr]  # `[-.]` before the tag
    assert split_info("Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf").tag == "Q4_K_XL"  # type: ignore[union-attr]
    assert split_info("model.gguf").tag == ""  # type: ignore[union-attr]
    u = split_info("M-Q4_0-00001-OF-00002.gguf")  # re_split is icase
    assert u is not None and (u.index, u.count, u.prefix) == (1, 2, "M-Q4_0")
    assert split_info("m-Q4_K_M.GGUF") is None and split_info("README.md") is None  # string_remove_suffix(".gguf")


def test_is_model_file_as_gguf_filename_is_model() -> None:
    assert is_model_file("m-Q4_K_M.gguf") and is_model_file("mtp-dir/m.gguf")  # the file name only
    for path in ("mmproj-F16.gguf", "sub/m-mmproj.gguf", "m-imatrix.gguf", "mtp-m-Q8_0.gguf", "eagle3-m.gguf",
                 "dflash-m.gguf", "dspark-m.gguf", "m.gguf.part1", "preset.ini"):
        assert not is_model_file(path), path


def _files(*paths: str) -> list[HubFile]:
    return [HubFile(p, 1) for p in paths]


def test_find_best_model_as_llama_cpp() -> None:
    f = _files("m-Q8_0.gguf", "m-Q4_K_M-00002-of-00002.gguf", "mmproj-m-Q4_K_M.gguf", "m-Q4_K_M-00001-of-00002.gguf")
    assert find_best_model(f, "").path == "m-Q4_K_M-00001-of-00002.gguf"  # type: ignore[union-attr]  # tags before order
    assert find_best_model(f, "q8_0").path == "m-Q8_0.gguf"  # type: ignore[union-attr]  # std::regex::icase
    assert find_best_model(_files("m-Q4_K_M.gguf"), "Q4_K") is None  # "Q4_K[.-]": a prefix of a tag is not it
    assert find_best_model(_files("Q4_K-GGUF/m.gguf"), "Q4_K").path == "Q4_K-GGUF/m.gguf"  # type: ignore[union-attr]  # the path
    assert find_best_model(_files("m-F16.gguf", "m-BF16.gguf"), "IQ2_XS") is None  # a tag given: no fallback
    fallback = _files("README.md", "mmproj-F16.gguf", "m-F16-00002-of-00002.gguf", "m-F16-00001-of-00002.gguf")
    assert find_best_model(fallback, "").path == "m-F16-00001-of-00002.gguf"  # type: ignore[union-attr]
    assert find_best_model(_files("mmproj-F16.gguf", "README.md"), "") is None


def test_split_files_as_get_split_files() -> None:
    listing = _files("a/m-Q4_K_M-00002-of-00003.gguf", "a/m-Q4_K_M-00001-of-00003.gguf", "a/m-Q4_K_M-00001-of-00002.gguf",
                     "b/m-Q4_K_M-00002-of-00003.gguf", "a/m-Q4_K_M-00003-of-00003.gguf", "a/m-Q4_K_M.gguf")
    got = split_files(listing, HubFile("a/m-Q4_K_M-00001-of-00003.gguf", 1))
    assert [f.path for f in got] == [f"a/m-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]  # same prefix and count
    assert split_files(listing, HubFile("a/m-Q4_K_M.gguf", 1)) == [HubFile("a/m-Q4_K_M.gguf", 1)]  # count 1: itself


def test_resolve_files_as_common_download_get_hf_plan() -> None:
    listing = _files("sub/preset.ini", "m-Q4_K_M.gguf", "m-Q8_0.gguf")
    assert [f.path for f in resolve_files(listing, "u/m", "")] == ["m-Q4_K_M.gguf"]  # only a root preset.ini counts
    with pytest.raises(ValueError, match="preset.ini"):
        resolve_files(_files("preset.ini", "m-Q4_K_M.gguf"), "u/m", "")
    assert [f.path for f in resolve_files(listing, "u/m", "Q4_K_M", "m-Q8_0.gguf")] == ["m-Q8_0.gguf"]  # -hff wins
    with pytest.raises(ValueError, match=r"-hff 'M-Q8_0.gguf' is not in u/m; the repo has: m-Q4_K_M.gguf, m-Q8_0.gguf"):
        resolve_files(listing, "u/m", "", "M-Q8_0.gguf")  # f.path == model.hf_file: exact
    with pytest.raises(ValueError, match="no GGUF model file; the repo has no .gguf file"):
        resolve_files(_files("README.md"), "u/m", "")


def test_split_repo_tag_as_common_download_split_repo_tag() -> None:
    assert split_repo_tag("u/m:Q4_K_M") == ("u/m", "Q4_K_M")
    assert split_repo_tag("u/m") == ("u/m", "")
    assert split_repo_tag("u/m:x:Q8_0") == ("u/m", "Q8_0")  # parts.back()
    for bad in ("model", "a/b/c", ":Q4_K_M"):
        with pytest.raises(ValueError, match="expected <user>/<model>"):
            split_repo_tag(bad)


def test_endpoint_as_common_get_model_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    assert endpoint() == "https://huggingface.co/"
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert endpoint() == "http://127.0.0.1:9/"  # a trailing slash added
    monkeypatch.setenv("MODEL_ENDPOINT", "http://127.0.0.1:8/")
    assert endpoint() == "http://127.0.0.1:8/"  # MODEL_ENDPOINT wins
    assert resolve_url("u/m", "c" * 40, "sub/m.gguf") == f"http://127.0.0.1:8/u/m/resolve/{'c' * 40}/sub/m.gguf"


class _Branch:
    def __init__(self, name: str, target_commit: str) -> None:
        self.name, self.target_commit = name, target_commit


def test_pick_commit_as_get_repo_commit() -> None:
    a, b, c = "a" * 40, "B" * 40, "c" * 40
    assert _pick_commit([_Branch("dev", a), _Branch("main", c)]) == c  # main wins wherever it is
    assert _pick_commit([_Branch("main", "f" * 39), _Branch("x", "g" * 40), _Branch("dev", b)]) == b  # first valid
    assert _pick_commit([_Branch("main", "nothex")]) == ""


def test_url_parts_as_common_download_get_all_parts() -> None:
    url = "http://127.0.0.1:9/d/m-Q4_K_M-00002-of-00003.gguf"
    assert fetch.url_parts(url) == [f"http://127.0.0.1:9/d/m-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert fetch.url_parts("http://127.0.0.1:9/m.gguf") == ["http://127.0.0.1:9/m.gguf"]


def test_url_parts_follow_llama_cpp() -> None:
    """download.cpp `common_download_get_all_parts` -> `get_gguf_split_info(url)`: the split pattern is
    read from the URL as given, so a URL ending in a query is one file (llama-server fetches only it)."""
    from tui.core.remote.fetch import url_parts

    base = "http://127.0.0.1:1/files/m-Q4_K_M-00001-of-00003.gguf"
    assert url_parts(base) == [base.replace("00001", f"0000{i}") for i in (1, 2, 3)]
    assert url_parts(base + "?download=true") == [base + "?download=true"]
    assert url_parts("http://127.0.0.1:1/files/m-Q4_K_M.gguf") == ["http://127.0.0.1:1/files/m-Q4_K_M.gguf"]
