"""A model named by `-mu URL` or `-hf REPO[:QUANT]` made plannable: its header, read by ranges and cached.

`fetch_model` returns a local header-only sparse copy (every part of a split model, under the
remote names), which the planner and exact mode read exactly as a file on disk. Nothing past the
headers is ever requested. For `-hf`, the sidecars llama-server downloads beside the model (its
projector, a draft head: `hub.sidecars`) are named with their listed sizes, no request. A second plan
of the same model makes no request: the Hub listing and the headers are cached (`cache`); a `-mu`
header older than `max_age_s` is revalidated by ETag with one 1-byte request per part; `refresh` asks
again now. With no network, a cached entry of any age is used, and said so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tui.core.remote import cache
from tui.core.remote.errors import RemoteError, quoted
from tui.core.remote.header import RemoteHeader, file_name, read_remote_header
from tui.core.options.settings import Settings
from tui.core.remote.hub import MAX_SPLIT_PARTS, HubFile, Sidecar, SidecarOptions, Variant, endpoint, resolve_files, \
    resolve_url, sidecar_options, sidecars, split_info, split_repo_tag, variants
from tui.core.remote.hub_client import hub_headers, repo_commit_and_files
from tui.core.remote.ranged import RangedFile, Traffic, new_client
from tui.core.remote.source import ModelSource


@dataclass
class Fetched:
    """The plannable copy of a remote model and what getting it cost."""

    path: Path  # give this to read_gguf / exact_plan (a split model: its first part)
    source: ModelSource
    urls: list[str]
    size: int  # the remote file(s)' total size
    header_bytes: int
    traffic: Traffic = field(default_factory=Traffic)
    cached: bool = False
    notes: list[str] = field(default_factory=list)
    repo_file: str = ""  # for -hf: the file chosen (the first part of a split set)
    sidecars: list[Sidecar] = field(default_factory=list)  # for -hf: also downloaded, for the flags fetched with
    listing: list[HubFile] = field(default_factory=list)  # for -hf: the repo's files (to redo `sidecars`)
    tag: str = ""  # for -hf: the quant asked for

    @property
    def name(self) -> str:
        return self.repo_file or file_name(self.urls[0])

    def sidecars_for(self, settings: Settings) -> list[Sidecar]:
        """The sidecars a launch with `settings` downloads (the flags may differ from the fetch's)."""
        if not self.listing or not self.repo_file:
            return []
        return sidecars(self.listing, self.repo_file, self.tag, sidecar_options(settings))

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source.label, "file": self.name, "urls": self.urls, "size": self.size,
                "header_bytes": self.header_bytes, "requests": self.traffic.requests,
                "bytes_fetched": self.traffic.bytes, "cached": self.cached, "notes": self.notes,
                "sidecars": [s.to_dict() for s in self.sidecars]}


Progress = Callable[[str], None]


def _too_many_parts(name: str, count: int) -> RemoteError:
    return RemoteError(f"{quoted(name)} names a split set of {count} parts, more than the {MAX_SPLIT_PARTS} mtp-tune "
                       "reads: the name or the file is wrong; check the URL or the file name.")


def url_parts(url: str) -> list[str]:
    """llama.cpp's `common_download_get_all_parts`: a `-00001-of-0000N.gguf` URL names all N parts. As
    there, the URL itself must end in `.gguf`: one with a `?query` is a single file to llama-server.
    A count above MAX_SPLIT_PARTS is refused before any request."""
    info = split_info(url)
    if info is None or info.count <= 1:
        return [url]
    if info.count > MAX_SPLIT_PARTS:
        raise _too_many_parts(file_name(url), info.count)
    return [f"{info.prefix}-{i:05d}-of-{info.count:05d}.gguf" for i in range(1, info.count + 1)]


def _read_parts(client: httpx.Client, urls: list[str], names: list[str], token: str | None, traffic: Traffic,
                progress: Progress | None, sizes: list[int] | None = None, ep: str | None = None) -> list[RemoteHeader]:
    """Every part's header, the first part first: its `split.count` must say as many parts as the
    names do before any other part is asked for (a name `-00001-of-00200` whose first part is
    whole costs one read, not 200). `sizes`: the Hub listing's, which each part must match."""
    if len(urls) > MAX_SPLIT_PARTS:
        raise _too_many_parts(names[0], len(urls))
    parts: list[RemoteHeader] = []
    for i, (url, name) in enumerate(zip(urls, names)):
        if progress:
            progress(f"reading the header of {name}" + (f" (part {i + 1} of {len(urls)})" if len(urls) > 1 else ""))
        parts.append(read_remote_header(client, url, hub_headers(url, token, ep), traffic, name=name.rsplit("/", 1)[-1],
                                        what=name, listed_size=sizes[i] if sizes else None))
        if i == 0 and parts[0].split_count != len(urls):
            raise RemoteError(f"{quoted(names[0])} says it is part 1 of {parts[0].split_count}, but {len(urls)} part(s) "
                              "were found; llama-server needs every part.")
    return parts


def _fetched(hit: cache.CachedModel, source: ModelSource, traffic: Traffic, cached: bool, notes: list[str],
             repo_file: str = "") -> Fetched:
    return Fetched(hit.path, source, list(hit.urls), hit.total_size, hit.header_bytes, traffic, cached, notes, repo_file)


def _unchanged(client: httpx.Client, hit: cache.CachedModel, token: str | None, traffic: Traffic) -> bool:
    """Whether every part still has the ETag and size it was read with (one 1-byte request each)."""
    for url, etag, size in zip(hit.urls, hit.etags, hit.sizes):
        probe = RangedFile(client, url, hub_headers(url, token), traffic, what=file_name(url), first=1)
        if probe.etag != etag or probe.size != size:
            return False
    return True


def fetch_url(source: ModelSource, *, refresh: bool = False, max_age_s: float = cache.MAX_AGE_S,
              client: httpx.Client | None = None, progress: Progress | None = None) -> Fetched:
    """`-mu URL`: the cached header when fresh (or when its ETag still matches), else read now. One
    reader per entry at a time (`cache.key_lock`): the TUI's estimate and its exact run ask at once,
    and the second then finds the first one's copy."""
    key = f"url|{source.spec}"
    with cache.key_lock(key):
        return _fetch_url(key, source, refresh, max_age_s, client, progress)


def _fetch_url(key: str, source: ModelSource, refresh: bool, max_age_s: float, client: httpx.Client | None,
               progress: Progress | None) -> Fetched:
    hit = cache.lookup(key)
    traffic = Traffic()
    if hit is not None and not refresh and hit.age_s() < max_age_s:
        return _fetched(hit, source, traffic, True, [])
    own = client is None
    client = client or new_client()
    try:
        if hit is not None and all(hit.etags):
            try:
                same = _unchanged(client, hit, source.token, traffic)
            except RemoteError as exc:
                if "cannot reach" in str(exc):
                    return _fetched(hit, source, traffic, True, [f"offline: using the header read {hit.age_s() / 3600:.1f} h ago ({exc})"])
                raise
            if same:
                cache.touch(hit)
                return _fetched(hit, source, traffic, True, ["revalidated by ETag"])
        urls = url_parts(source.spec)
        parts = _read_parts(client, urls, [file_name(u) for u in urls], source.token, traffic, progress)
        stored = cache.store(key, parts)
        return _fetched(stored, source, traffic, False, [])
    finally:
        if own:
            client.close()


def repo_listing(repo: str, token: str | None, *, refresh: bool = False, max_age_s: float = cache.MAX_AGE_S,
                 ep: str | None = None, progress: Progress | None = None, notes: list[str] | None = None,
                 client: httpx.Client | None = None) -> tuple[str, list[HubFile], bool]:
    """(commit, files, from_cache) of a Hub repo; cached `max_age_s` (a stale one serves when offline,
    said in `notes`). `client`: the Hub's client, when the caller reads the headers with it too."""
    ep = ep or endpoint()
    key = f"{ep}|{repo}"
    with cache.key_lock(key):  # one listing per repo at a time: the others then read it from the cache
        return _repo_listing(key, ep, repo, token, refresh, max_age_s, progress, notes, client)


def _repo_listing(key: str, ep: str, repo: str, token: str | None, refresh: bool, max_age_s: float,
                  progress: Progress | None, notes: list[str] | None,
                  client: httpx.Client | None) -> tuple[str, list[HubFile], bool]:
    rec = cache.load_listing(key)
    age = time.time() - float(rec.get("fetched_at", 0)) if rec is not None else 0.0
    if rec is not None and not refresh and age < max_age_s:
        return rec["commit"], [HubFile(f["path"], int(f["size"])) for f in rec["files"]], True
    if progress:
        progress(f"listing {repo}")
    try:
        commit, files = repo_commit_and_files(ep, repo, token, client=client)
    except RemoteError as exc:
        if rec is not None and "cannot reach" in str(exc):
            if notes is not None:
                notes.append(f"offline: using the listing of {repo} read {age / 3600:.1f} h ago")
            return rec["commit"], [HubFile(f["path"], int(f["size"])) for f in rec["files"]], True
        raise
    cache.save_listing(key, {"commit": commit, "files": [{"path": f.path, "size": f.size} for f in files]})
    return commit, files, False


def fetch_files(repo: str, commit: str, files: list[HubFile], source: ModelSource, *, ep: str | None = None,
                client: httpx.Client | None = None, progress: Progress | None = None) -> Fetched:
    """The headers of one resolved Hub model (a file or a split set) at `commit`; a commit's files never
    change, so a cached entry is always good."""
    ep = ep or endpoint()
    key = f"hf|{ep}{repo}@{commit}/{files[0].path}"
    with cache.key_lock(key):  # one reader per entry at a time, as for -mu
        return _fetch_files(key, repo, commit, files, source, ep, client, progress)


def _fetch_files(key: str, repo: str, commit: str, files: list[HubFile], source: ModelSource, ep: str,
                 client: httpx.Client | None, progress: Progress | None) -> Fetched:
    hit = cache.lookup(key)
    if hit is not None:
        return _fetched(hit, source, Traffic(), True, [], files[0].path)
    own = client is None
    client = client or new_client()
    try:
        traffic = Traffic()
        urls = [resolve_url(repo, commit, f.path, ep) for f in files]
        parts = _read_parts(client, urls, [f.path for f in files], source.token, traffic, progress, [f.size for f in files], ep)
        return _fetched(cache.store(key, parts), source, traffic, False, [], files[0].path)
    finally:
        if own:
            client.close()


def fetch_hf(source: ModelSource, *, refresh: bool = False, client: httpx.Client | None = None,
             progress: Progress | None = None, sidecar_opts: SidecarOptions | None = None) -> Fetched:
    """`-hf REPO[:QUANT] [-hff FILE]`: the file(s) llama-server would download, their headers only, and
    the sidecars it downloads too for `sidecar_opts` (default: llama-server's, the projector only)."""
    try:
        repo, tag = split_repo_tag(source.spec)
    except ValueError as exc:
        raise RemoteError(str(exc)) from None
    notes: list[str] = []
    own = client is None
    client = client or new_client()  # one client for the Hub: its listing and the headers
    try:
        commit, files, listed_from_cache = repo_listing(repo, source.token, refresh=refresh, progress=progress,
                                                        notes=notes, client=client)
        try:
            chosen = resolve_files(files, repo, tag, source.hf_file)
        except ValueError as exc:
            raise RemoteError(str(exc)) from None
        got = fetch_files(repo, commit, chosen, source, client=client, progress=progress)
    finally:
        if own:
            client.close()
    if got.cached and not listed_from_cache:
        notes.append(f"listed {repo} again: still at commit {commit[:12]}, whose header is cached")
    got.cached = got.cached and listed_from_cache
    got.notes = notes + got.notes
    got.listing, got.tag = list(files), tag
    got.sidecars = sidecars(files, chosen[0].path, tag, sidecar_opts or SidecarOptions())
    return got


def fetch_model(source: ModelSource, *, refresh: bool = False, client: httpx.Client | None = None,
                progress: Progress | None = None, sidecar_opts: SidecarOptions | None = None) -> Fetched:
    """The plannable local copy of `source`; RemoteError (one sentence) on any failure. `sidecar_opts`:
    which `-hf` sidecars the flags ask for (`hub.sidecar_options(settings)`)."""
    if source.kind == "hf":
        return fetch_hf(source, refresh=refresh, client=client, progress=progress, sidecar_opts=sidecar_opts)
    return fetch_url(source, refresh=refresh, client=client, progress=progress)


def repo_variants(repo: str, token: str | None, *, refresh: bool = False) -> tuple[str, list[Variant]]:
    """(commit, every model variant of the repo, split sets as one)."""
    commit, files, _ = repo_listing(repo, token, refresh=refresh)
    return commit, variants(files)
