"""The download news in llama-server's log, how far a download got, and the words for it.

Every line below is a verbatim b11434 format string filled in (the file and function it comes from
are named), with the prefix llama.cpp's logger writes (`M.SS.mmm.uuu L `; `--log-colors off`), or a
line copied from a real `-lv 4`/`-lv 5` run against the loopback Hub.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tui.core.server.download import (
    TEMP_SUFFIX, DownloadProgress, DownloadSnapshot, LineKind, describe, file_name, human_bytes, human_duration,
    read_line, with_totals,
)

BLOB = "/c/models--user--repo/blobs/e0b3ad0e4b420e4d28c8ce05cefe5ebca457505d1cf2827f7e14e1cf168c25c8"
URL = "http://127.0.0.1:35577/user/repo/resolve/0123456789abcdef0123456789abcdef01234567/m-Q4_K_M.gguf"
MASKED = "http://127.0.0.1/user/repo/resolve/0123456789abcdef0123456789abcdef01234567/m-Q4_K_M.gguf"

# (line, kind, url, path, detail, number)
LINES = [
    # common/arg.cpp common_models_handler_apply: LOG_DBG("download task: %s -> %s\n")
    (f"0.00.007.638 D download task: {URL} -> {BLOB}", LineKind.TASK, URL, BLOB, "", None),
    # common/download.cpp common_download_file_single_online: LOG_DBG("%s: no previous model file found %s\n")
    (f"0.00.007.755 D common_download_file_single_online: no previous model file found {BLOB}",
     LineKind.FRESH, "", BLOB, "", None),
    # ... LOG_DBG("%s: downloading from %s to %s (etag:%s)...\n") (the URL masked: no port, no user)
    (f'0.00.008.034 D common_download_file_single_online: downloading from {MASKED} to {BLOB}{TEMP_SUFFIX} '
     '(etag:"e0b3ad0e4b420e4d28c8ce05cefe5ebc")...', LineKind.START, MASKED, BLOB + TEMP_SUFFIX,
     '"e0b3ad0e4b420e4d28c8ce05cefe5ebc"', None),
    # ... LOG_DBG("%s: using cached file: %s\n") and its reasons; LOG_TRC("%s: using cached file (HEAD failed): %s\n")
    (f"0.00.001.000 D common_download_file_single_online: using cached file: {BLOB}", LineKind.CACHED, "", BLOB, "", None),
    (f"0.00.001.000 I common_download_file_single_online: using cached file (HEAD failed): {BLOB}",
     LineKind.CACHED, "", BLOB, "HEAD failed", None),
    (f"0.00.001.000 D common_download_file_single_online: using cached file (same etag): {BLOB}",
     LineKind.CACHED, "", BLOB, "same etag", None),
    # common/download.cpp common_download_file_single: LOG_DBG("%s: using cached file (offline mode): %s\n")
    (f"0.00.001.000 D common_download_file_single: using cached file (offline mode): {BLOB}",
     LineKind.CACHED, "", BLOB, "offline mode", None),
    # ... LOG_TRC("%s: HEAD failed, status: %d\n") (seen at -lv 5 against a dropped connection)
    ("0.00.008.473 I common_download_file_single_online: HEAD failed, status: -1", LineKind.ERROR, "", "",
     "HEAD failed, status: -1", -1),
    # ... LOG_WRN("%s: retrying after %d seconds...\n") (seen at -lv 4)
    ("0.00.006.620 W common_download_file_single_online: retrying after 2 seconds...", LineKind.RETRY, "", "", "", 2),
    # common_pull_file: LOG_ERR("%s: download failed: %s (status: %d)\n") (seen at -lv 4)
    ("0.00.006.600 E common_pull_file: download failed: Failed to read connection (status: -1)", LineKind.ERROR,
     "", "", "download failed: Failed to read connection (status: -1)", -1),
    # common_pull_file: LOG_WRN("%s: download received non-successful status code: %d\n")
    ("0.00.002.000 W common_pull_file: download received non-successful status code: 503", LineKind.ERROR, "", "",
     "download received non-successful status code: 503", 503),
    # common_pull_file: LOG_WRN("%s: server did not respond with 206 Partial Content for a resume request. Status: %d\n")
    ("0.00.002.000 W common_pull_file: server did not respond with 206 Partial Content for a resume request. "
     "Status: 200", LineKind.ERROR, "", "",
     "server did not respond with 206 Partial Content for a resume request. Status: 200", 200),
    # common_pull_file: LOG_ERR("%s: error writing to file: %s\n")
    (f"0.00.002.000 E common_pull_file: error writing to file: {BLOB}{TEMP_SUFFIX}", LineKind.ERROR, "", "",
     f"error writing to file: {BLOB}{TEMP_SUFFIX}", None),
    # common_download_file_single_online: LOG_ERR("%s: download failed after %d attempts\n")
    ("0.00.009.000 E common_download_file_single_online: download failed after 3 attempts", LineKind.FAILED, "", "",
     "download failed after 3 attempts", None),
    # ... LOG_ERR("%s: unable to rename file: %s to %s\n")
    (f"0.00.009.000 E common_download_file_single_online: unable to rename file: {BLOB}{TEMP_SUFFIX} to {BLOB}",
     LineKind.FAILED, "", "", f"unable to rename file: {BLOB}{TEMP_SUFFIX} to {BLOB}", None),
    # tools/server/server.cpp llama_server: SRV_ERR("failed to download model: %s\n", e.what()), SRV_ERR's
    # "srv  %12.*s: " prefix; e.what() from download.cpp common_download_run_tasks (seen at -lv 4)
    (f"0.00.008.817 E srv  llama_server: failed to download model: Download '{URL}' failed with status code: 404",
     LineKind.FAILED, URL, "", f"Download '{URL}' failed with status code: 404", 404),
    # ... SRV_ERR("failed to fetch model metadata: %s\n", e.what())
    ("0.00.001.000 E srv  llama_server: failed to fetch model metadata: error: invalid HF repo format, expected "
     "<user>/<model>[:quant]", LineKind.FAILED, "", "",
     "failed to fetch model metadata: error: invalid HF repo format, expected <user>/<model>[:quant]", None),
    # common/hf-cache.cpp get_repo_commit: LOG_ERR("%s: error: %s\n", e.what()), api_get's "GET failed (%d): %s"
    # (seen at -lv 4 for a 404 and a gated 401 repo) and "HTTPLIB failed: %s" (nothing listening)
    ("0.00.003.274 E get_repo_commit: error: GET failed (404): Repository not found", LineKind.HUB, "", "",
     "GET failed (404): Repository not found", 404),
    ("0.00.003.176 E get_repo_commit: error: GET failed (401): Access to model is restricted. You must have access "
     "to it.", LineKind.HUB, "", "", "GET failed (401): Access to model is restricted. You must have access to it.", 401),
    ("0.00.005.774 E get_repo_commit: error: HTTPLIB failed: Could not establish connection", LineKind.HUB, "", "",
     "HTTPLIB failed: Could not establish connection", None),
    # get_repo_files: LOG_WRN("%s: failed to resolve commit for %s\n")
    ("0.00.003.295 W get_repo_files: failed to resolve commit for user/nope", LineKind.HUB, "user/nope", "",
     "failed to resolve commit", None),
    # api_get: LOG_WRN("%s: invalid token, authentication disabled\n")
    ("0.00.001.000 W api_get: invalid token, authentication disabled", LineKind.HUB, "", "",
     "invalid token, authentication disabled", None),
    # download.cpp common_download_get_hf_plan: LOG_ERR("%s: no GGUF files found in repository %s\n") (seen at -lv 4)
    ("0.00.010.298 E common_download_get_hf_plan: no GGUF files found in repository user/repo", LineKind.FAILED,
     "user/repo", "", "no GGUF files found in repository user/repo", None),
    # ... LOG_ERR("%s: file '%s' not found in repository\n")
    ("0.00.001.000 E common_download_get_hf_plan: file 'x-Q8_0.gguf' not found in repository", LineKind.FAILED,
     "", "x-Q8_0.gguf", "file 'x-Q8_0.gguf' not found in repository", None),
    # download.cpp common_download_file_single: LOG_ERR("%s: required file is not available in cache (offline mode): %s\n")
    (f"0.00.001.000 E common_download_file_single: required file is not available in cache (offline mode): {BLOB}",
     LineKind.FAILED, "", BLOB, "required file is not available in cache (offline mode)", None),
]


@pytest.mark.parametrize("text, kind, url, path, detail, number", LINES, ids=[f"{i}-{x[1].value}" for i, x in enumerate(LINES)])
def test_read_line_reads_llama_cpp_formats(text: str, kind: LineKind, url: str, path: str, detail: str,
                                           number: int | None) -> None:
    line = read_line(text)
    assert line is not None, text
    assert (line.kind, line.url, line.path, line.detail, line.number) == (kind, url, path, detail, number)


def test_read_line_takes_a_router_child_and_a_jsonl_line() -> None:
    """The router prefixes its children's lines `[port] `; `--log-jsonl` writes log.cpp's object."""
    child = read_line("[8081] 0.00.006.620 W common_download_file_single_online: retrying after 4 seconds...")
    assert child is not None and child.kind == LineKind.RETRY and child.number == 4
    obj = {"type": "log", "time": 1234, "level": "ERR",
           "msg": "common_download_file_single_online: download failed after 3 attempts\n"}
    got = read_line(json.dumps(obj))
    assert got is not None and got.kind == LineKind.FAILED


@pytest.mark.parametrize("text", [
    "0.00.004.560 W srv  llama_server: security: no API key is set and CORS allows all origins",
    "0.01.763.054 I srv    load_model: loading model '/tmp/dl3/hand/dest/x.gguf'",
    "0.00.006.097 I srv          init: using 8 threads for HTTP server",
    "{not json download",
    "",
])
def test_other_lines_are_not_download_news(text: str) -> None:
    assert read_line(text) is None


def test_file_name_is_the_progress_bars_rule() -> None:
    """download.cpp ProgressBar::on_start: after the last '/', before '?'."""
    assert file_name("http://h/a/b/m-Q4_K_M.gguf?download=true") == "m-Q4_K_M.gguf"
    assert file_name("/x/y.gguf.downloadInProgress") == "y.gguf.downloadInProgress"


# ---- progress over a real growing file ---------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_progress_follows_a_growing_file_and_its_rename(tmp_path: Path) -> None:
    final = tmp_path / "x.gguf"
    temp = tmp_path / ("x.gguf" + TEMP_SUFFIX)
    clock = Clock()
    p = DownloadProgress(temp, total=4_000_000, url="http://h/files/x.gguf", clock=clock)
    assert p.poll().phase == "pending" and p.name == "x.gguf"
    with open(temp, "wb") as f:
        for step in range(1, 5):
            f.write(b"\0" * 500_000)
            f.flush()
            clock.t += 1.0
            snap = p.poll()
            assert snap.phase == "downloading" and snap.bytes == 500_000 * step
    assert snap.rate == pytest.approx(500_000)
    assert snap.fraction == pytest.approx(0.5) and snap.eta_s == pytest.approx(4.0)
    temp.rename(final)  # what llama.cpp does once the last byte is in (std::rename)
    clock.t += 1.0
    done = p.poll()
    assert done.phase == "done" and done.bytes == 2_000_000 and done.fraction == 1.0 and done.eta_s is None


def test_progress_gone_stays_gone_and_keeps_the_partial_size(tmp_path: Path) -> None:
    temp = tmp_path / ("y.gguf" + TEMP_SUFFIX)
    temp.write_bytes(b"\0" * 1000)
    p = DownloadProgress(temp)
    assert p.poll().phase == "downloading" and p.total is None
    p.mark("gone")  # the launch ended: llama.cpp leaves the temporary file to resume next time
    temp.write_bytes(b"\0" * 3000)
    snap = p.poll()
    assert snap.phase == "gone" and snap.bytes == 1000
    temp.unlink()
    p2 = DownloadProgress(temp)
    temp.write_bytes(b"\0" * 10)
    p2.poll()
    temp.unlink()
    assert p2.poll().phase == "gone"  # removed without a final file: failed or cancelled


def test_a_rate_needs_time_between_polls(tmp_path: Path) -> None:
    temp = tmp_path / ("z.gguf" + TEMP_SUFFIX)
    temp.write_bytes(b"\0" * 10)
    clock = Clock()
    p = DownloadProgress(temp, clock=clock)
    p.poll()
    temp.write_bytes(b"\0" * 20)
    assert p.poll().rate is None  # two polls at the same moment (two threads) say nothing about speed


# ---- totals and words ----------------------------------------------------------------------------


def _snap(name: str, total: int | None = None, url: str = "", bytes_: int = 10, phase: str = "downloading") -> DownloadSnapshot:
    return DownloadSnapshot(name, f"/t/{name}{TEMP_SUFFIX}", bytes_, total, None, phase, url)


def test_with_totals_by_name_and_the_one_unnamed_blob() -> None:
    snaps = [_snap("a.gguf", url="http://h/a.gguf"), _snap("user/repo:Q4_K_M")]
    got = with_totals(snaps, {"a.gguf": 100, "m-Q4_K_M.gguf": 200})
    assert (got[0].name, got[0].total) == ("a.gguf", 100)
    assert (got[1].name, got[1].total) == ("m-Q4_K_M.gguf", 200)  # the only planned size left: named after it
    two = with_totals([_snap("r [e0b3ad0e]"), _snap("r [77aa11bb]")], {"p1.gguf": 1, "p2.gguf": 2})
    assert [s.total for s in two] == [None, None]  # which blob is which part is not known
    kept = with_totals([_snap("a.gguf", total=5)], {"a.gguf": 100})
    assert kept[0].total == 5


def test_describe_says_it_in_one_line() -> None:
    gib = 1024 ** 3
    s = DownloadSnapshot("m-Q4_K_M.gguf", "", int(1.9 * gib), int(4.6 * gib), 35 * 1024 ** 2, "downloading")
    assert describe(s) == "downloading m-Q4_K_M.gguf 41% (1.9 of 4.6 GiB, 35 MiB/s, ETA 1 min)"
    assert describe(DownloadSnapshot("x.gguf", "", 1_500_000, None, None, "downloading")) == \
        "downloading x.gguf (1.4 MiB)"
    assert describe(DownloadSnapshot("x.gguf", "", 1_777_536, 1_777_536, None, "done")) == "downloaded x.gguf (1.7 MiB)"
    assert describe(DownloadSnapshot("x.gguf", "", 512, None, None, "gone")) == "download of x.gguf stopped at 512 B"
    assert describe(DownloadSnapshot("x.gguf", "", 0, None, None, "pending")) == "downloading x.gguf: starting"


def test_human_units() -> None:
    assert human_bytes(512) == "512 B" and human_bytes(35 * 1024 ** 2) == "35 MiB" and human_bytes(1.5 * 1024 ** 4) == "1.5 TiB"
    assert human_duration(0.2) == "1 s" and human_duration(95) == "2 min" and human_duration(7500) == "2 h 5 min"
    assert human_duration(7200) == "2 h"
