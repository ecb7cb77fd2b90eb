"""Where a launch's downloads land (llama.cpp's cache rules), the per-launch `Downloads` record, and a
failed download read into one explained sentence.

The logs in the classification tests are the lines llama-server b11434 printed at the supervisor's
`-lv 4` against the loopback Hub (tests/helpers/range_server.py), copied verbatim.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.core.options.argv import settings_from_argv
from tui.core.server.classify import classify
from tui.core.server.download import TEMP_SUFFIX
from tui.core.server.download_failures import download_stalled
from tui.core.server.download_watch import Downloads, Spot, hub_cache, llama_cache, url_files, watch_spots
from tui.core.server.failures import FailureKind

OID = "e0b3ad0e4b420e4d28c8ce05cefe5ebca457505d1cf2827f7e14e1cf168c25c8"


def _settings(*argv: str):  # noqa: ANN202 - Settings
    return settings_from_argv(list(argv)).settings


# ---- where the files are ---------------------------------------------------------------------


@pytest.mark.parametrize("env, want", [
    ({"LLAMA_CACHE": "/l", "HF_HUB_CACHE": "/h"}, "/l"),
    ({"HF_HUB_CACHE": "/h", "HF_HOME": "/hh"}, "/h"),
    ({"HUGGINGFACE_HUB_CACHE": "/hh2", "HF_HOME": "/hh"}, "/hh2"),
    ({"HF_HOME": "/hh", "XDG_CACHE_HOME": "/x"}, "/hh/hub"),
    ({"XDG_CACHE_HOME": "/x", "HOME": "/home/u"}, "/x/huggingface/hub"),
    ({"HOME": "/home/u"}, "/home/u/.cache/huggingface/hub"),
    ({"LLAMA_CACHE": "", "HOME": "/home/u"}, "/home/u/.cache/huggingface/hub"),  # empty is unset (getenv + empty())
])
def test_hub_cache_follows_hf_cache_cpp(env: dict[str, str], want: str) -> None:
    assert hub_cache(env) == Path(want)


def test_llama_cache_follows_fs_get_cache_directory() -> None:
    assert llama_cache({"LLAMA_CACHE": "/l", "XDG_CACHE_HOME": "/x"}) == Path("/l")
    assert llama_cache({"XDG_CACHE_HOME": "/x"}) == Path("/x/llama.cpp")
    assert llama_cache({"HOME": "/home/u"}) == Path("/home/u/.cache/llama.cpp")


def test_spots_for_hf_mu_and_none() -> None:
    env = {"LLAMA_CACHE": "/c"}
    hf = watch_spots(_settings("-hf", "user/repo:Q4_K_M", "--spec-draft-hf", "user/draft"), env)
    assert hf == [Spot(Path("/c/models--user--repo/blobs"), "*" + TEMP_SUFFIX, "user/repo:Q4_K_M"),
                  Spot(Path("/c/models--user--draft/blobs"), "*" + TEMP_SUFFIX, "user/draft")]
    mu = watch_spots(_settings("-mu", "http://h/f/x.gguf?dl=1", "-m", "/d/my.gguf"), env)
    assert mu == [Spot(Path("/d"), "my.gguf" + TEMP_SUFFIX, "my.gguf")]
    split = watch_spots(_settings("-mu", "http://h/m-00001-of-00002.gguf", "-m", "/d/m.gguf"), env)
    assert [s.pattern for s in split] == ["m-00001-of-00002.gguf" + TEMP_SUFFIX, "m-00002-of-00002.gguf" + TEMP_SUFFIX]
    assert watch_spots(_settings("-mu", "http://h/x.gguf"), env) == []  # router mode: nothing downloads
    assert watch_spots(_settings("-hf", "user/repo", "--offline"), env) == []
    assert watch_spots(_settings("-m", "/d/x.gguf"), env) == []
    assert url_files("http://h/a/x-00001-of-00003.gguf")[-1] == "x-00003-of-00003.gguf"


# ---- the record --------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 10.0

    def __call__(self) -> float:
        return self.t


def test_downloads_finds_a_hub_blob_and_sees_it_through(tmp_path: Path) -> None:
    blobs = tmp_path / "models--user--repo" / "blobs"
    blobs.mkdir(parents=True)
    clock = Clock()
    dl = Downloads(watch_spots(_settings("-hf", "user/repo:Q4_K_M"), {"LLAMA_CACHE": str(tmp_path)}), clock=clock)
    assert not dl.check() and dl.summary() is None and dl.describe() == ""
    temp = blobs / (OID + TEMP_SUFFIX)
    with open(temp, "wb") as f:
        for _ in range(3):
            f.write(b"\0" * 1_048_576)
            f.flush()
            clock.t += 1.0
            assert dl.check()
    assert dl.last_activity == clock.t
    assert dl.describe() == "downloading user/repo:Q4_K_M (3.0 MiB, 1.0 MiB/s)"
    dl.expect({"m-Q4_K_M.gguf": 4 * 1_048_576})  # the plan's header record
    assert dl.describe() == "downloading m-Q4_K_M.gguf 75% (3.0 of 4.0 MiB, 1.0 MiB/s, ETA 1 s)"
    temp.rename(blobs / OID)
    assert not dl.check() and not dl.active
    assert dl.describe() == "downloaded m-Q4_K_M.gguf (3.0 MiB)"


def test_a_leftover_counts_once_this_launch_resumes_it(tmp_path: Path) -> None:
    dest = tmp_path / "x.gguf"
    left = tmp_path / ("x.gguf" + TEMP_SUFFIX)
    left.write_bytes(b"\0" * 100)  # an earlier launch was stopped here
    dl = Downloads(watch_spots(_settings("-mu", "http://h/x.gguf", "-m", str(dest)), {}))
    assert not dl.check() and dl.snapshots() == ()
    left.write_bytes(b"\0" * 300)  # resumed (a Range request from byte 100)
    assert dl.check() and dl.snapshots()[0].bytes == 300
    dl.finish()  # stopped again: the partial file is kept, as llama.cpp keeps it
    assert dl.describe() == "download of x.gguf stopped at 300 B" and left.exists()


def test_the_log_names_a_download_at_lv5(tmp_path: Path) -> None:
    blob = tmp_path / "models--user--repo" / "blobs" / OID
    url = "http://127.0.0.1:35577/user/repo/resolve/0123456789abcdef0123456789abcdef01234567/m-Q4_K_M.gguf"
    dl = Downloads([])
    dl.feed(f"0.00.007.638 D download task: {url} -> {blob}")
    dl.feed(f"0.00.008.034 D common_download_file_single_online: downloading from http://127.0.0.1/user/repo/resolve/"
            f"0123456789abcdef0123456789abcdef01234567/m-Q4_K_M.gguf to {blob}{TEMP_SUFFIX} (etag:\"e0b3ad\")...")
    (snap,) = dl.snapshots()
    assert (snap.name, snap.url, snap.phase) == ("m-Q4_K_M.gguf", url, "pending")  # the task's URL, port kept
    dl.feed("0.00.006.620 W common_download_file_single_online: retrying after 2 seconds...")
    dl.feed("0.00.009.000 E common_download_file_single_online: download failed after 3 attempts")
    assert dl.failed == "download failed after 3 attempts" and dl.snapshots()[0].phase == "gone"
    assert list(dl.notes) == ["retrying after 2 s", "download failed after 3 attempts"]


def test_a_split_set_is_summed(tmp_path: Path) -> None:
    blobs = tmp_path / "models--u--r" / "blobs"
    blobs.mkdir(parents=True)
    dl = Downloads(watch_spots(_settings("-hf", "u/r:Q8_0"), {"LLAMA_CACHE": str(tmp_path)}))
    (blobs / ("a" * 64 + TEMP_SUFFIX)).write_bytes(b"\0" * 1024)
    (blobs / ("b" * 64 + TEMP_SUFFIX)).write_bytes(b"\0" * 2048)
    dl.check()
    assert sorted(s.name for s in dl.snapshots()) == ["u/r:Q8_0 [aaaaaaaa]", "u/r:Q8_0 [bbbbbbbb]"]
    assert dl.describe() == "downloading 2 files (3.0 KiB)"
    dl.expect({}, total=6144)  # the plan knows the parts' sum
    assert dl.describe() == "downloading 2 files 50% (3.0 of 6.0 KiB)"


# ---- failures ----------------------------------------------------------------------------------

_LOAD_EMPTY = [  # what follows a Hub failure: llama.cpp loads the empty path it was left with
    "0.00.005.048 E llama_model_load_from_file_impl: exactly one out metadata, path_model, and file must be defined",
    "0.00.005.076 E cmn  common_init_: failed to load model ''",
    "0.00.005.077 E srv    load_model: failed to load model, ''",
    "0.00.005.373 E srv  llama_server: exiting due to model loading error",
]


def _classify(lines: list[str], *argv: str):  # noqa: ANN202 - Failure
    return classify(1, lines, argv=["llama-server", *argv, "-lv", "4"])


def test_gated_repo_asks_for_a_token() -> None:
    f = _classify(["0.00.003.176 E get_repo_commit: error: GET failed (401): Access to model is restricted. You must "
                   "have access to it.", "0.00.003.180 W get_repo_files: failed to resolve commit for user/gated",
                   *_LOAD_EMPTY], "-hf", "user/gated:Q4_K_M")
    assert f.kind == FailureKind.DOWNLOAD_FAILED and f.flag_or_file == "-hf"
    assert f.message == ("llama-server could not download user/gated: the Hub answered 401 (Access to model is "
                         "restricted. You must have access to it.), so the repository is gated or private.")
    assert "-hft" in f.fix and "HF_TOKEN" in f.fix and f.evidence and "401" in f.evidence


def test_a_refused_token_is_said_so() -> None:
    f = _classify(["0.00.001.000 W api_get: invalid token, authentication disabled",
                   "0.00.003.176 E get_repo_commit: error: GET failed (401): Access to model is restricted.",
                   *_LOAD_EMPTY], "-hf", "user/gated", "-hft", "nope")
    assert "ignored the token given" in f.fix


def test_missing_repo_and_no_network_and_no_such_quant() -> None:
    f = _classify(["0.00.003.274 E get_repo_commit: error: GET failed (404): Repository not found",
                   "0.00.003.295 W get_repo_files: failed to resolve commit for user/nope", *_LOAD_EMPTY],
                  "-hf", "user/nope:Q4_K_M")
    assert f.message == ("llama-server could not download user/nope: the Hub has no repository user/nope "
                         "(404 Repository not found).")
    f = _classify(["0.00.005.774 E get_repo_commit: error: HTTPLIB failed: Could not establish connection",
                   "0.00.005.778 W get_repo_files: failed to resolve commit for user/repo", *_LOAD_EMPTY],
                  "-hf", "user/repo:Q4_K_M")
    assert f.message == ("llama-server could not download user/repo: it could not reach the Hugging Face Hub "
                         "(Could not establish connection).") and "--offline" in f.fix
    f = _classify(["0.00.010.298 E common_download_get_hf_plan: no GGUF files found in repository user/repo",
                   "0.00.010.299 I Available GGUF files:", "0.00.010.300 I  - m-Q4_K_M.gguf", *_LOAD_EMPTY],
                  "-hf", "user/repo:Q8_0")
    assert f.message == "llama-server could not download user/repo: the repository has no GGUF model file for the quant Q8_0."
    assert f.fix.startswith("Pick one of m-Q4_K_M.gguf")


def test_a_file_the_host_refuses_or_never_answers() -> None:
    url = "http://127.0.0.1:45661/files/missing.gguf"
    f = _classify([f"0.00.010.008 E srv  llama_server: failed to download model: Download '{url}' failed with status "
                   "code: 404"], "-mu", url, "-m", "/d/x.gguf")
    assert f.message == f"llama-server could not download missing.gguf: {url} answered 404 (no such file)."
    assert f.flag_or_file == "-mu"
    f = _classify(["0.00.002.854 E srv  llama_server: failed to download model: Download "
                   "'http://127.0.0.1:44671/files/model.gguf' failed with status code: -1"], "-mu", "x", "-m", "/d/x")
    assert f.message == "llama-server could not download model.gguf: nothing answered at 127.0.0.1:44671."
    f = _classify(["0.00.006.600 E common_pull_file: download failed: Failed to read connection (status: -1)",
                   "0.00.006.620 W common_download_file_single_online: retrying after 2 seconds...",
                   "0.00.009.000 E common_download_file_single_online: download failed after 3 attempts",
                   "0.00.009.100 E srv  llama_server: failed to download model: Download "
                   "'http://u:secret@h:1/x.gguf' failed with status code: -1"], "-mu", "x", "-m", "/d/x")
    assert "broke off (Failed to read connection) three times" in f.message and "secret" not in f.explain()


def test_a_hub_hiccup_with_a_cached_model_is_not_a_download_failure() -> None:
    """hf-cache.cpp falls back to the cached files: the model loads, so the ending is something else."""
    f = _classify(["0.00.005.774 E get_repo_commit: error: HTTPLIB failed: Could not establish connection",
                   "0.00.006.000 I llama_model_loader: loaded meta data with 34 key-value pairs and 67 tensors from /c/x",
                   "0.00.007.000 E something else went wrong"], "-hf", "user/repo")
    assert f.kind != FailureKind.DOWNLOAD_FAILED


def test_a_stalled_download_is_explained() -> None:
    dl = Downloads([])
    assert download_stalled(dl.summary(), 180.0).message.startswith("llama-server's download of the model made no progress")
