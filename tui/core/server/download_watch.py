"""Where a launch's downloads land, and the one record of them per launch (`Downloads`).

At the supervisor's `-lv 4` llama-server b11434 does not log the start of a download (that line is
LOG_DBG, `-lv 5`), so the temporary files are looked for where llama.cpp writes them:
`-hf REPO` (and `--spec-draft-hf REPO`, and the repo's mmproj/MTP sidecars) into the Hub cache,
`models--USER--REPO/blobs/OID.downloadInProgress` (common/hf-cache.cpp `get_cache_directory`:
$LLAMA_CACHE, $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
~/.cache/huggingface/hub, the first set); `-mu URL` to `-m PATH` (a split set: next to it, under the
parts' names; common/arg.cpp `build_url_tasks`). `-mu` without `-m` downloads nothing in llama-server:
server.cpp decides on router mode (an empty model path) before the URL's default path is filled in.
When the log does name a download (`-lv 5`), that is used too.

A temporary file that was already there when the launch started (a download an earlier launch left
half done) counts once it grows: llama.cpp resumes it with a Range request when the host allows.
"""

from __future__ import annotations

import collections
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from tui.core.options import reader
from tui.core.options.settings import Settings
from tui.core.server.download import TEMP_SUFFIX, DownloadLine, DownloadProgress, DownloadSnapshot, LineKind, \
    describe, file_name, read_line, with_totals

_SPLIT = re.compile(r"^(.+)-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)  # llama.cpp's get_gguf_split_info
NOTES_KEPT = 5
ACTIVE = ("pending", "downloading")


@dataclass(frozen=True)
class Spot:
    """A folder llama.cpp writes this launch's temporary files in, the names to look for (a glob),
    and what a file found there is called when the log does not say (`label`: the -hf spec, a file name)."""

    folder: Path
    pattern: str
    label: str


def _env_path(env: Mapping[str, str], name: str) -> Path | None:
    v = env.get(name)
    return Path(v) if v else None


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or os.path.expanduser("~"))


def hub_cache(env: Mapping[str, str]) -> Path:
    """llama.cpp's Hugging Face cache folder (hf-cache.cpp `get_cache_directory`)."""
    for name, sub in (("LLAMA_CACHE", ""), ("HF_HUB_CACHE", ""), ("HUGGINGFACE_HUB_CACHE", ""), ("HF_HOME", "hub"),
                      ("XDG_CACHE_HOME", "huggingface/hub")):
        base = _env_path(env, name)
        if base is not None:
            return base / sub if sub else base
    return _home(env) / ".cache" / "huggingface" / "hub"


def llama_cache(env: Mapping[str, str]) -> Path:
    """llama.cpp's own cache folder (common.cpp `fs_get_cache_directory`, Linux)."""
    base = _env_path(env, "LLAMA_CACHE")
    if base is not None:
        return base
    xdg = _env_path(env, "XDG_CACHE_HOME")
    return (xdg if xdg is not None else _home(env) / ".cache") / "llama.cpp"


def url_files(url: str) -> list[str]:
    """The file names a `-mu URL` downloads: one, or every part of a `-00001-of-0000N.gguf` split."""
    name = file_name(url)
    m = _SPLIT.match(name)
    if not m or int(m.group(3)) <= 1:
        return [name]
    return [f"{m.group(1)}-{i:05d}-of-{m.group(3)}.gguf" for i in range(1, int(m.group(3)) + 1)]


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def watch_spots(settings: Settings, env: Mapping[str, str] | None = None) -> list[Spot]:
    """Where the temporary files of a launch of `settings` appear (none for a model on disk or `--offline`)."""
    env = os.environ if env is None else env
    extra = list(settings.extra_args)
    if reader.occurrences(extra, "--offline"):
        return []
    spots = []
    for spec in (settings.hf_repo, reader.value(extra, "--spec-draft-hf")):
        if spec and "/" in spec:
            repo = spec.split(":", 1)[0]
            folder = hub_cache(env) / ("models--" + repo.replace("/", "--")) / "blobs"
            spots.append(Spot(folder, "*" + TEMP_SUFFIX, spec))
    url = reader.value(extra, "--model-url")
    if url and (settings.model or settings.hf_repo):  # without either llama-server starts its router
        names = url_files(url)
        folder = llama_cache(env)
        if settings.model:
            folder = Path(settings.model).parent
            names = [Path(settings.model).name] if len(names) == 1 else names
        spots += [Spot(folder, glob_escape(n) + TEMP_SUFFIX, n) for n in names]
    return spots


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


class Downloads:
    """The files one launch downloads: from its log lines (`feed`, the reader thread) and from where
    llama.cpp writes them (`check`, the supervisor's download thread); `snapshots`, `summary` and
    `describe` from any thread. `expect` gives the sizes mtp-tune's plan read (the totals). Thread-safe."""

    def __init__(self, spots: list[Spot] | None = None, sizes: Mapping[str, int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.spots = list(spots or [])
        self._clock = clock
        self._lock = threading.Lock()
        self._items: dict[str, DownloadProgress] = {}  # by temporary path
        self._labels: dict[str, str] = {}  # temporary path -> its spot's label (files the log did not name)
        self._urls: dict[str, str] = {}  # final path -> URL ("download task" lines)
        self._sizes: dict[str, int] = dict(sizes or {})
        self._total: int | None = None  # the whole model's size when only that is known (a split set)
        self._before = {p: s for p in self._found() if (s := _size(Path(p))) is not None}  # an earlier launch's
        self.notes: collections.deque[str] = collections.deque(maxlen=NOTES_KEPT)  # retries and errors, newest last
        self.failed: str | None = None  # why the download was given up, as the log says
        self.last_activity: float | None = None  # clock() of the last growth, start or retry

    def expect(self, sizes: Mapping[str, int], total: int | None = None) -> None:
        """Sizes by file name, from mtp-tune's plan of the remote model (the totals shown); `total`:
        all files together, when the plan knows only that."""
        with self._lock:
            self._sizes.update(sizes)
            self._total = total if total is not None else self._total

    # ---- the reader's side -------------------------------------------------------------------

    def feed(self, text: str) -> DownloadLine | None:
        """Note one log line; returns it read when it was about a download."""
        line = read_line(text)
        if line is None:
            return None
        now = self._clock()
        with self._lock:
            if line.kind == LineKind.TASK:
                self._urls[line.path] = line.url
            elif line.kind == LineKind.START:
                self._add(line.path, line.url, "")
                self.last_activity = now
            elif line.kind == LineKind.CACHED:
                item = self._items.get(line.path + TEMP_SUFFIX)
                if item is not None:
                    item.mark("done")
            elif line.kind in (LineKind.RETRY, LineKind.ERROR, LineKind.HUB):
                self.notes.append(f"retrying after {line.number} s" if line.kind == LineKind.RETRY else line.detail)
                self.last_activity = now
            elif line.kind == LineKind.FAILED:
                self.failed = self.failed or line.detail
                self.notes.append(line.detail)
                for item in self._items.values():
                    if not item.poll(now).done:
                        item.mark("gone")
        return line

    def _add(self, temp: str, url: str, label: str) -> DownloadProgress:
        item = self._items.get(temp)
        final = temp[: -len(TEMP_SUFFIX)] if temp.endswith(TEMP_SUFFIX) else temp
        url = self._urls.get(final) or url  # the task's URL: the START line's hides the port and any user
        if item is None:
            item = DownloadProgress(temp, url=url, name=file_name(url) if url else label, clock=self._clock)
            self._items[temp] = item
            if not url and label:
                self._labels[temp] = label
        elif url and not item.url:
            item.url, item.name = url, file_name(url)
            self._labels.pop(temp, None)
        return item

    # ---- the watcher's side ------------------------------------------------------------------

    def _found(self) -> dict[str, str]:
        """The temporary files in the spots now, with their spot's label."""
        found: dict[str, str] = {}
        for spot in self.spots:
            try:
                found.update({str(p): spot.label for p in spot.folder.glob(spot.pattern)})
            except OSError:
                continue
        return found

    def check(self) -> bool:
        """Look for new temporary files and poll all; True while one is still downloading."""
        now = self._clock()
        found = self._found()
        with self._lock:
            for temp, label in found.items():
                if temp in self._items:
                    continue
                was = self._before.get(temp)
                if was is not None and _size(Path(temp)) == was:
                    continue  # an earlier launch's leftover, not (yet) resumed by this one
                self._add(temp, "", label)
            items = list(self._items.values())
        active = False
        for item in items:
            snap = item.poll(now)
            active = active or snap.phase in ACTIVE
            if item.last_growth is not None:
                with self._lock:
                    self.last_activity = max(self.last_activity or 0.0, item.last_growth)
        return active and self.failed is None

    def finish(self) -> None:
        """The launch ended: what did not complete stopped where it is (llama.cpp keeps the partial
        `.downloadInProgress` file and resumes it next time)."""
        with self._lock:
            items = list(self._items.values())
        for item in items:
            if item.poll().phase in ACTIVE:
                item.mark("gone")

    # ---- views ------------------------------------------------------------------------------

    def snapshots(self) -> tuple[DownloadSnapshot, ...]:
        """Every download of the launch, polled now, with the planned totals."""
        with self._lock:
            items = [(t, i, self._labels.get(t)) for t, i in self._items.items()]
            sizes = dict(self._sizes)
        per_label = collections.Counter(label for _, _, label in items if label)
        snaps = []
        for temp, item, label in items:
            snap = item.poll()
            if label and per_label[label] > 1:  # Hub blobs are named by their hash: tell them apart
                snap = replace(snap, name=f"{label} [{file_name(item.final_path.name)[:8]}]")
            snaps.append(snap)
        return with_totals(snaps, sizes)

    @property
    def active(self) -> bool:
        return any(s.phase in ACTIVE for s in self.snapshots())

    def signature(self) -> tuple[tuple[str, int, str], ...]:
        """What the downloads look like now, to tell whether anything changed."""
        return tuple((s.name, s.bytes, s.phase) for s in self.snapshots())

    def summary(self) -> DownloadSnapshot | None:
        """All the launch's downloads as one (llama.cpp fetches a split set's parts at once); None
        before any was found."""
        snaps = self.snapshots()
        if not snaps:
            return None
        with self._lock:
            planned, whole = dict(self._sizes), self._total
        if len(snaps) == 1:
            one = snaps[0]
            return replace(one, total=whole) if one.total is None and whole is not None else one
        totals = [s.total for s in snaps]
        total = sum(t for t in totals if t is not None) if None not in totals else None
        if total is None and len(planned) == len(snaps):  # unnamed blobs of a planned set
            total = sum(planned.values())
        total = total if total is not None else whole
        phases = {s.phase for s in snaps}
        phase = next((p for p in ("downloading", "pending", "gone") if p in phases), "done")
        rates = [s.rate for s in snaps if s.rate is not None and s.phase in ACTIVE]
        return DownloadSnapshot(f"{len(snaps)} files", "", sum(s.bytes for s in snaps), total,
                                sum(rates) if rates else None, phase)

    def describe(self) -> str:
        """One line for a status bar ("" before any download was found)."""
        s = self.summary()
        return describe(s) if s is not None else ""
