"""What can go wrong reading a model that is not on this disk, each said in one sentence."""

from __future__ import annotations

from urllib.parse import urlsplit


class RemoteError(ValueError):
    """A remote model could not be planned; the message says why and what to do, in one sentence."""


def host_of(url: str) -> str:
    return urlsplit(url).netloc or url


def no_network(url: str, why: str) -> RemoteError:
    return RemoteError(f"cannot reach {host_of(url)} ({why}): planning a remote model reads its header over the "
                       "network; check the connection, HF_ENDPOINT or the URL, or plan a downloaded file with -m.")


def http_status(url: str, status: int, what: str = "") -> RemoteError:
    """The one-sentence message for an HTTP error answer to `url` (`what`: the file or repo asked for)."""
    what = what or url
    if status in (401, 403):
        return RemoteError(
            f"{host_of(url)} refused {what} ({status} {'unauthorized' if status == 401 else 'forbidden'}): the repo is "
            "gated or private; accept its terms on its Hub page, then pass a token with -hft TOKEN or set HF_TOKEN.")
    if status == 404:
        return RemoteError(f"{what} was not found on {host_of(url)} (404): check the repo name, the quant tag, the "
                           "file name or the URL.")
    if status == 416:
        return RemoteError(f"{host_of(url)} could not serve a byte range of {what} (416): the file is shorter than its "
                           "own header says, or empty.")
    return RemoteError(f"{host_of(url)} answered {status} for {what}: try again later, or plan a downloaded file "
                       "with -m.")


def ignores_range(url: str, size: int | None) -> RemoteError:
    big = f" ({size / 2**30:.1f} GiB)" if size else ""
    return RemoteError(f"{host_of(url)} ignores HTTP Range requests (it answered 200 with the whole file{big}), so "
                       "its header cannot be read alone; mtp-tune will not download the file to plan it: download "
                       "it, then plan it with -m FILE.")
