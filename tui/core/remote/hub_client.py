"""The Hub's answers over HTTP: a repo's commit and file listing, every call bounded, errors in one sentence.

The two routes llama.cpp's `-hf` calls (hf-cache.cpp `get_repo_commit`, `get_repo_files`) are read
with mtp-tune's own httpx client, the one the header reads use, not through `huggingface_hub`'s
`HfApi`: its calls have no timeout (a silent Hub hung `plan -hf` for ever), and its paginator
follows `Link: rel="next"` to any host, with the token, without end. Here every call has the
ranged reads' timeouts, one deadline for the whole listing and the progress rule (`ranged.Limits`),
a page's body is capped, and the pages stay on the endpoint's origin and stop at MAX_PAGES.
llama.cpp itself reads only the first page; the pages after it are followed as huggingface_hub
did, so a repo of more than one page is listed whole.

The request headers are still the Hub's own (`huggingface_hub.utils.build_hf_headers`: its user
agent, the token). The token is `False` when none is given, so a token stored by `hf auth login`,
which llama-server would not use, never makes a plan succeed where the download would fail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urljoin

import httpx

from tui.core.config.endpoint import same_origin
from tui.core.remote.errors import RemoteError, host_of, http_status
from tui.core.remote.hub import HubFile, endpoint, listing_from_tree
from tui.core.remote.ranged import DEFAULT_LIMITS, Deadline, Limits, http_failure, new_client, read_body

#: The most pages of one tree listing. The Hub pages a recursive listing by about 1,000 entries, so
#: 100 pages is a 100k-file repo: ten times a 10k-file one, while a GGUF repo holds tens to hundreds.
MAX_PAGES = 100
#: The most bytes of one page: a page of 1,000 entries is about 300 KB of JSON.
MAX_PAGE_BYTES = 16 << 20


@dataclass(frozen=True)
class Branch:
    """One branch of `/api/models/REPO/refs`."""

    name: str
    target_commit: str


def hub_headers(url: str, token: str | None, ep: str | None = None) -> dict[str, str]:
    """The request headers for `url`: the Hub's (its user agent), with the token only when `url` lies
    on the Hub endpoint's origin (`ep`, default `hub.endpoint()`). llama-server sends the token to
    any `-mu` host; mtp-tune, which only reads a header, never hands a gated-model token to a host
    that is not the Hub (and httpx drops it on a redirect that leaves the origin, as to the Hub's
    storage)."""
    from huggingface_hub.utils import build_hf_headers  # imported when a request is due: a plan of a local file never needs it

    ok = same_origin(url, ep or endpoint())
    return build_hf_headers(token=(token or False) if ok else False, library_name="mtp-tune")


def repo_commit_and_files(ep: str, repo: str, token: str | None, *, client: httpx.Client | None = None,
                          limits: Limits = DEFAULT_LIMITS) -> tuple[str, list[HubFile]]:
    """(commit, files) as llama.cpp's `get_repo_files` sees them; RemoteError on any failure."""
    base = f"{ep}api/models/{quote(repo, safe='/')}"
    headers = {**hub_headers(base, token, ep), "Accept": "application/json"}
    own = client is None
    client = client or new_client(limits)
    deadline = Deadline(limits, f"the listing of {repo}")
    try:
        refs, _ = _get_json(client, f"{base}/refs", headers, repo, deadline)
        commit = _pick_commit(_branches(refs))
        if not commit:
            raise RemoteError(f"{repo} has no branch with a valid commit on {host_of(ep)}: nothing to download.")
        return commit, listing_from_tree(_tree(client, f"{base}/tree/{commit}?recursive=true", headers, repo, deadline, ep))
    finally:
        if own:
            client.close()


def _tree(client: httpx.Client, url: str, headers: dict[str, str], repo: str, deadline: Deadline,
          ep: str) -> list[Any]:
    """Every page of the tree listing at `url`, following `Link: rel="next"` on the endpoint's origin only."""
    items: list[Any] = []
    for _ in range(MAX_PAGES):
        page, nxt = _get_json(client, url, headers, repo, deadline)
        if not isinstance(page, list):
            raise RemoteError(f"{host_of(url)}: the listing of {repo} is not a list of files; check HF_ENDPOINT, or try "
                              "again later.")
        items += page
        if nxt is None:
            return items
        if not same_origin(nxt, ep):
            raise RemoteError(f"the listing of {repo} on {host_of(ep)} continues on another host ({host_of(nxt)}); "
                              "mtp-tune follows a listing on the Hub endpoint only, and sends the token nowhere else: "
                              "check HF_ENDPOINT.")
        url = nxt
    raise RemoteError(f"the listing of {repo} on {host_of(ep)} goes on past {MAX_PAGES} pages, more than any model repo "
                      "has; check HF_ENDPOINT, or name the file with -hff.")


def _get_json(client: httpx.Client, url: str, headers: dict[str, str], repo: str,
              deadline: Deadline) -> tuple[Any, str | None]:
    """One API answer: (its JSON, the absolute URL of its `rel="next"` page or None)."""
    left = deadline.left(url)
    try:
        with client.stream("GET", url, headers=headers, timeout=deadline.limits.timeout(left)) as r:
            if r.status_code != 200:
                raise _refused(r, url, repo)
            body = read_body(r, MAX_PAGE_BYTES, deadline, f"the listing of {repo}")
            nxt = r.links.get("next", {}).get("url")
            final = str(r.url)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise http_failure(exc, url, repo, deadline) from None
    try:
        data = json.loads(body)
        return data, urljoin(final, nxt) if nxt else None
    except (ValueError, RecursionError):  # not JSON (or nested past Python's depth), or a next link that is no URL
        raise RemoteError(f"{host_of(url)}: the Hub's answer for {repo} is not valid JSON with a valid next page; "
                          "check HF_ENDPOINT, or try again later.") from None


def _refused(r: httpx.Response, url: str, repo: str) -> RemoteError:
    """A non-200 API answer in one sentence, read as the Hub writes it (`X-Error-Code`)."""
    code = r.headers.get("x-error-code", "")
    status = r.status_code
    if code == "RepoNotFound" or (status == 404 and code not in ("RevisionNotFound", "EntryNotFound")):
        return RemoteError(f"{repo} was not found on {host_of(url)} ({status}): check the repo name; a private repo "
                           "needs a token (-hft TOKEN or HF_TOKEN).")
    if code == "RevisionNotFound":
        return RemoteError(f"{repo}: its main branch was not found ({status}).")
    return http_status(url, status, repo)


def _branches(refs: Any) -> list[Branch]:
    """The branches of a refs answer; entries of the wrong shape are skipped, as llama.cpp does."""
    items = refs.get("branches") if isinstance(refs, dict) else None
    return [Branch(b["name"], b["targetCommit"]) for b in items or []
            if isinstance(b, dict) and isinstance(b.get("name"), str) and isinstance(b.get("targetCommit"), str)] \
        if isinstance(items, list) else []


def _pick_commit(branches: list[Any]) -> str:
    """llama.cpp's `get_repo_commit`: `main`, else the first branch with a valid commit."""
    def valid(c: str) -> bool:
        return len(c) == 40 and all(ch in "0123456789abcdef" for ch in c.lower())

    ok = [b for b in branches if valid(getattr(b, "target_commit", "") or "")]
    main = next((b for b in ok if b.name == "main"), None)
    return (main or (ok[0] if ok else None)).target_commit if ok else ""
