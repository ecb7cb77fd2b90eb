"""The Hub's answers through `huggingface_hub`: a repo's commit and file listing, errors in one sentence.

`huggingface_hub` is the Hub's own client: it builds the API URLs, the auth and user-agent headers,
pages the tree and turns the Hub's error codes into exceptions (gated, not found). The endpoint is
passed explicitly (llama.cpp's `MODEL_ENDPOINT`/`HF_ENDPOINT`, read at call time), and so is the
token: `False` when none is given, so a token stored by `hf auth login`, which llama-server would
not use, never makes a plan succeed where the download would fail.
"""

from __future__ import annotations

from typing import Any

from tui.core.remote.errors import RemoteError, http_status, no_network
from tui.core.remote.hub import HubFile, listing_from_tree


def _api(ep: str) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=ep.rstrip("/"), library_name="mtp-tune")


def repo_commit_and_files(ep: str, repo: str, token: str | None) -> tuple[str, list[HubFile]]:
    """(commit, files) as llama.cpp's `get_repo_files` sees them; RemoteError on any failure."""
    api = _api(ep)
    tok: str | bool = token or False
    url = f"{ep}{repo}"
    try:
        refs = api.list_repo_refs(repo, token=tok)
        commit = _pick_commit(refs.branches)
        if not commit:
            raise RemoteError(f"{repo} has no branch with a valid commit on {ep}: nothing to download.")
        items = list(api.list_repo_tree(repo, revision=commit, recursive=True, token=tok))
    except RemoteError:
        raise
    except Exception as exc:  # huggingface_hub's HTTP errors and its HTTP library's transport errors
        raise _explain(exc, url, repo) from None
    return commit, listing_from_tree(items)


def _pick_commit(branches: list[Any]) -> str:
    """llama.cpp's `get_repo_commit`: `main`, else the first branch with a valid commit."""
    def valid(c: str) -> bool:
        return len(c) == 40 and all(ch in "0123456789abcdef" for ch in c.lower())

    ok = [b for b in branches if valid(getattr(b, "target_commit", "") or "")]
    main = next((b for b in ok if b.name == "main"), None)
    return (main or (ok[0] if ok else None)).target_commit if ok else ""


def _explain(exc: Exception, url: str, repo: str) -> RemoteError:
    from huggingface_hub import errors as hf

    if isinstance(exc, hf.GatedRepoError):
        return http_status(url, 401 if _status(exc) != 403 else 403, repo)
    if isinstance(exc, hf.RepositoryNotFoundError):
        return RemoteError(f"{repo} was not found on {url.split('/')[2] if '://' in url else url} "
                           f"({_status(exc) or 404}): check the repo name; a private repo needs a token "
                           "(-hft TOKEN or HF_TOKEN).")
    if isinstance(exc, hf.RevisionNotFoundError):
        return RemoteError(f"{repo}: its main branch was not found (404).")
    if isinstance(exc, hf.HfHubHTTPError):
        return http_status(url, _status(exc) or 0, repo)
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    if module.startswith(("httpx", "httpcore")) or isinstance(exc, OSError):
        text = str(exc).lower()
        why = ("connection refused" if "refused" in text else "the host name does not resolve"
               if "resolve" in text or "name or service" in text else "timed out" if "timeout" in name.lower()
               else f"{name}: {exc}")
        return no_network(url, why)
    return RemoteError(f"{url}: the Hub's answer could not be read ({name}: {exc}).")


def _status(exc: Exception) -> int | None:
    resp = getattr(exc, "response", None)
    return getattr(resp, "status_code", None)
