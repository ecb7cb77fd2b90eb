"""A model llama-server downloads itself (`-hf REPO[:QUANT]`, `-m PATH -mu URL`): what its log says about
the download, and how far the download got.

llama.cpp b11434 (common/download.cpp) writes each file to `PATH.downloadInProgress` and renames it to
PATH when it is complete; its progress bar is drawn only when stdout is a terminal, so under the
supervisor (pipes) the progress is the size of that temporary file, polled (`DownloadProgress`). The
HEAD's Content-Length is not logged: the total comes from mtp-tune's own plan of the remote model
(`with_totals`), or stays unknown (bytes only).

What the log says depends on the verbosity. LOG_DBG needs `-lv 5`; the supervisor runs `-lv 4`
(LOG_TRC), where only "HEAD failed" (TRC), retries (WRN) and failures (ERR) are printed, so there the
temporary file is found where llama.cpp puts it (`download_watch`). Every pattern below is the
verbatim format of b11434: common/download.cpp, common/hf-cache.cpp (the Hub's API: a 404, a gated
401 or no network are logged there, at ERR, and the launch then fails to load an empty model path),
common/arg.cpp ("download task") and tools/server/server.cpp ("failed to download model", "failed to
fetch model metadata").
"""

from __future__ import annotations

import collections
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path, PurePosixPath

from tui.core.server.failures import strip_prefix

TEMP_SUFFIX = ".downloadInProgress"
MIN_RATE_SPAN_S = 0.3  # a rate over less than this (two polls at once, from two threads) is noise
_F = "common_download_file_single_online"


class LineKind(str, Enum):
    """What a download line says."""

    TASK = "task"  # "download task: URL -> PATH" (arg.cpp, DBG): a file about to be fetched or checked
    FRESH = "fresh"  # "no previous model file found PATH" (DBG)
    START = "start"  # "downloading from URL to PATH.downloadInProgress (etag:E)..." (DBG), once per attempt
    CACHED = "cached"  # "using cached file[ (why)]: PATH" (DBG; "(HEAD failed)" is TRC): nothing to fetch
    RETRY = "retry"  # "retrying after N seconds..." (WRN)
    ERROR = "error"  # one attempt went wrong (HEAD failed, a bad status, a broken transfer, a local file error)
    HUB = "hub"  # the Hub's API refused or was unreachable (hf-cache.cpp, ERR/WRN): llama.cpp falls back to its cache
    FAILED = "failed"  # the download is given up (the server exits next, or loads an empty path and fails)


@dataclass(frozen=True)
class DownloadLine:
    """One recognised line. `path`: START's temporary file; TASK/FRESH/CACHED's final file; `url`: the
    URL, or the repo a HUB/FAILED line names."""

    kind: LineKind
    url: str = ""
    path: str = ""
    detail: str = ""  # the message of ERROR/FAILED, the reason of CACHED, the ETag of START
    number: int | None = None  # RETRY: seconds to wait; ERROR/FAILED: the HTTP status, when told


_PATTERNS: tuple[tuple[LineKind, re.Pattern[str]], ...] = (
    (LineKind.START, re.compile(rf"{_F}: downloading from (?P<url>\S+) to (?P<path>.+?{re.escape(TEMP_SUFFIX)})"
                                r" \(etag:(?P<detail>.*)\)\.\.\.$")),
    (LineKind.TASK, re.compile(r"(?:^|\s)download task: (?P<url>\S+) -> (?P<path>.+)$")),
    (LineKind.FRESH, re.compile(rf"{_F}: no previous model file found (?P<path>.+)$")),
    (LineKind.CACHED, re.compile(r"common_download_file_single(?:_online)?: using cached file"
                                 r"(?: \((?P<detail>[^)]*)\))?: (?P<path>.+)$")),
    (LineKind.RETRY, re.compile(rf"{_F}: retrying after (?P<number>\d+) seconds\.\.\.$")),
    (LineKind.ERROR, re.compile(rf"{_F}: (?P<detail>HEAD failed, status: (?P<number>-?\d+))$")),
    (LineKind.ERROR, re.compile(r"common_pull_file: (?P<detail>(?:download received non-successful status code: "
                                r"|server did not respond with 206 Partial Content for a resume request\. Status: )"
                                r"(?P<number>-?\d+))$")),
    (LineKind.ERROR, re.compile(r"common_pull_file: (?P<detail>download failed: .* \(status: (?P<number>-?\d+)\))$")),
    (LineKind.ERROR, re.compile(r"common_pull_file: (?P<detail>error (?:opening local file for writing|writing to file|"
                                r"closing file): .+)$")),
    (LineKind.FAILED, re.compile(rf"{_F}: (?P<detail>download failed after \d+ attempts)$")),
    (LineKind.FAILED, re.compile(rf"{_F}: (?P<detail>unable to (?:rename|delete) (?:temporary )?file: .+)$")),
    (LineKind.FAILED, re.compile(r"llama_server: failed to download model: (?P<detail>Download '(?P<url>.+)' failed "
                                 r"with status code: (?P<number>-?\d+))$")),
    (LineKind.FAILED, re.compile(r"llama_server: (?P<detail>failed to (?:download model|fetch model metadata): .+)$")),
    # hf-cache.cpp get_repo_commit / get_repo_files (api_get's exceptions) and api_get itself
    (LineKind.HUB, re.compile(r"get_repo_(?:commit|files): error: (?P<detail>GET failed \((?P<number>-?\d+)\): .*)$")),
    (LineKind.HUB, re.compile(r"get_repo_(?:commit|files): (?:error|JSON error): (?P<detail>.+)$")),
    (LineKind.HUB, re.compile(r"get_repo_files: (?P<detail>failed to resolve commit) for (?P<url>\S+)$")),
    (LineKind.HUB, re.compile(r"api_get: (?P<detail>invalid token, authentication disabled)$")),
    # download.cpp common_download_get_hf_plan and the offline branch of common_download_file_single
    (LineKind.FAILED, re.compile(r"common_download_get_hf_plan: (?P<detail>no GGUF files found in repository "
                                 r"(?P<url>\S+))$")),
    (LineKind.FAILED, re.compile(r"common_download_get_hf_plan: (?P<detail>file '(?P<path>[^']+)' not found in "
                                 r"repository)$")),
    (LineKind.FAILED, re.compile(r"common_download_file_single: (?P<detail>required file is not available in cache "
                                 r"\(offline mode\)): (?P<path>.+)$")),
)
#: Cheap words every download line has, so the common line costs one substring test per word.
_KEYS = ("download", "cached file", "retrying after", "HEAD failed", "common_pull_file", "model metadata",
         "get_repo_", "api_get", "hf_plan", "offline mode")


def read_line(text: str) -> DownloadLine | None:
    """The download news in one log line (plain or `--log-jsonl`), or None."""
    if not any(k in text for k in _KEYS):
        return None
    msg = text.strip()
    if msg.startswith("{"):
        try:
            obj = json.loads(msg)
        except ValueError:
            return None
        msg = str(obj.get("msg", "")) if isinstance(obj, dict) else ""
    msg = strip_prefix(msg).strip()
    for kind, pattern in _PATTERNS:
        m = pattern.search(msg)
        if m:
            g = m.groupdict()
            num = g.get("number")
            return DownloadLine(kind, g.get("url") or "", g.get("path") or "", g.get("detail") or "",
                                int(num) if num is not None else None)
    return None


def file_name(url_or_path: str) -> str:
    """The file a URL or path names (llama.cpp's progress bar's rule: after the last '/', before '?')."""
    base = url_or_path.split("#", 1)[0].split("?", 1)[0]
    return PurePosixPath(base).name or base


# ---- progress -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DownloadSnapshot:
    """How far one file got. `phase`: "pending" (no file yet), "downloading", "done" (renamed into
    place), "gone" (the temporary file went away without the file appearing: failed or cancelled)."""

    name: str
    temp_path: str
    bytes: int
    total: int | None
    rate: float | None  # bytes per second over the last few seconds (None until two polls)
    phase: str
    url: str = ""

    @property
    def done(self) -> bool:
        return self.phase == "done"

    @property
    def fraction(self) -> float | None:
        if self.done:
            return 1.0
        if not self.total:
            return None
        return max(0.0, min(1.0, self.bytes / self.total))

    @property
    def eta_s(self) -> float | None:
        if self.total is None or not self.rate or self.rate <= 0 or self.done:
            return None
        return max(0.0, (self.total - self.bytes) / self.rate)


class DownloadProgress:
    """One file being downloaded: polls the size of its temporary file (`poll`). Thread-safe.

    `total` is the whole file's size when known (None: bytes only); the rate is measured over the
    last `window_s` seconds of polls. The final file is the temporary one's name less the suffix."""

    def __init__(self, temp_path: str | Path, total: int | None = None, *, url: str = "", name: str = "",
                 window_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.temp_path = Path(temp_path)
        tp = str(self.temp_path)
        self.final_path = Path(tp[: -len(TEMP_SUFFIX)] if tp.endswith(TEMP_SUFFIX) else tp)
        self.total = total
        self.url = url
        self.name = name or file_name(url or str(self.final_path))
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self._seen = False
        self._frozen = False  # the log or the launch's end said how it ended: polls no longer change it
        self._phase = "pending"
        self._bytes = 0
        self.last_growth: float | None = None  # clock() when the file last grew (or appeared)

    def poll(self, now: float | None = None) -> DownloadSnapshot:
        """Look at the file now."""
        now = self._clock() if now is None else now
        with self._lock:
            if self._phase != "done" and not self._frozen:
                self._look(now)
            rate = None
            if len(self._samples) >= 2 and self._samples[-1][0] - self._samples[0][0] >= MIN_RATE_SPAN_S:
                (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
                rate = max(0.0, (b1 - b0) / (t1 - t0))
            total = self.total if self.total is not None or self._phase != "done" else self._bytes
            return DownloadSnapshot(self.name, str(self.temp_path), self._bytes, total, rate, self._phase, self.url)

    def _look(self, now: float) -> None:
        try:
            size = self.temp_path.stat().st_size
        except OSError:
            size = None
        if size is not None:
            if not self._seen or size > self._bytes:
                self.last_growth = now
            if size < self._bytes:  # started over (a server that does not resume)
                self._samples.clear()
            self._seen, self._phase, self._bytes = True, "downloading", size
            self._samples.append((now, size))
            while len(self._samples) > 2 and now - self._samples[0][0] > self.window_s:
                self._samples.popleft()
            return
        try:
            final = self.final_path.stat().st_size
        except OSError:
            final = None
        if final is not None:  # renamed into place (atomic: there is no moment with neither file)
            self._phase, self._bytes = "done", final
            self.last_growth = now
        elif self._seen:
            self._phase = "gone"

    def mark(self, phase: str) -> None:
        """How it ended, as the log or the launch's end says ("done": a cached file; "gone": failed or
        stopped, the partial file left as llama.cpp leaves it); later polls keep it."""
        with self._lock:
            if phase == "done":
                try:
                    self._bytes = self.final_path.stat().st_size
                except OSError:
                    pass
            elif phase == "gone":
                try:
                    self._bytes = max(self._bytes, self.temp_path.stat().st_size)
                except OSError:
                    pass
            self._phase, self._frozen = phase, True


def with_totals(snaps: Iterable[DownloadSnapshot], sizes: Mapping[str, int]) -> tuple[DownloadSnapshot, ...]:
    """`snaps` with the total filled in from `sizes` ({file name: bytes}, mtp-tune's plan of the model).

    Matched by file name; a file known only by its temporary name (a Hub blob, found on disk at
    `-lv 4`) takes the one planned size no other file took, with its name."""
    out = list(snaps)
    left = {k: v for k, v in sizes.items() if not any(s.name == k for s in out)}
    unnamed = [i for i, s in enumerate(out) if s.name not in sizes and not s.url]
    for i, s in enumerate(out):
        if s.total is None and s.name in sizes:
            out[i] = replace(s, total=sizes[s.name])
    if len(unnamed) == 1 and len(left) == 1:
        name, size = next(iter(left.items()))
        s = out[unnamed[0]]
        out[unnamed[0]] = replace(s, name=name, total=s.total if s.done else size)  # done: its real size
    return tuple(out)


# ---- words ----------------------------------------------------------------------------------------

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _unit(n: float) -> int:
    i = 0
    while n >= 1024 and i < len(_UNITS) - 1:
        n /= 1024
        i += 1
    return i


def _in(n: float, i: int) -> str:
    v = n / 1024 ** i
    return f"{v:.0f}" if i == 0 or v >= 10 else f"{v:.1f}"  # 512 B, 1.9 GiB, 35 MiB


def human_bytes(n: float) -> str:
    """`1.9 GiB`, `35 MiB`, `512 B`."""
    i = _unit(n)
    return f"{_in(n, i)} {_UNITS[i]}"


def human_duration(s: float) -> str:
    """`40 s`, `3 min`, `2 h 5 min` (an ETA needs no more precision)."""
    if s < 60:
        return f"{max(1, round(s))} s"
    if s < 3600:
        return f"{round(s / 60)} min"
    h, m = divmod(round(s / 60), 60)
    return f"{h} h {m} min" if m else f"{h} h"


def describe(s: DownloadSnapshot) -> str:
    """One line: `downloading FILE 42% (1.9 of 4.6 GiB, 35 MiB/s, ETA 1 min)`; bytes only without a total."""
    if s.phase == "done":
        return f"downloaded {s.name} ({human_bytes(s.bytes)})"
    if s.phase == "gone":
        return f"download of {s.name} stopped at {human_bytes(s.bytes)}"
    if s.phase == "pending":
        return f"downloading {s.name}: starting"
    parts = []
    if s.total:
        i = _unit(s.total)
        parts.append(f"{_in(s.bytes, i)} of {_in(s.total, i)} {_UNITS[i]}")
    else:
        parts.append(human_bytes(s.bytes))
    if s.rate is not None:
        parts.append(f"{human_bytes(s.rate)}/s")
    eta = s.eta_s
    if eta is not None:
        parts.append(f"ETA {human_duration(eta)}")
    pct = f" {s.fraction * 100:.0f}%" if s.fraction is not None else ""
    return f"downloading {s.name}{pct} ({', '.join(parts)})"
