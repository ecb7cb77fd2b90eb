"""What can go wrong reading a model that is not on this disk, each said in one sentence."""

from __future__ import annotations

from urllib.parse import urlsplit

from tui.core.config.text import safe_text

#: how much of any text a server wrote (an error body, a file name, a header value) a message quotes
QUOTE_CHARS = 160


class RemoteError(ValueError):
    """A remote model could not be planned; the message says why and what to do, in one sentence."""


def quoted(text: object, limit: int = QUOTE_CHARS) -> str:
    """Server-written text as a message may quote it: control characters shown escaped (a name with
    `\\x1b]0;...` must not retitle the terminal) and at most `limit` characters (a 1 MB file name or
    error body must not become a 1 MB message)."""
    s = safe_text(text)
    return s if len(s) <= limit else s[:limit] + f"... ({len(s)} characters)"


def host_of(url: str) -> str:
    """The host (and port) of `url`, for messages; the URL itself, bounded, when it has none."""
    return quoted(urlsplit(url).netloc or url, 80)


def too_slow(url: str, got: int, seconds: float, min_rate: float, what: str) -> RemoteError:
    """A body slower than the progress rule allows (`min_rate` bytes/s over a `seconds` window)."""
    return RemoteError(f"{host_of(url)} sent {what} at {_rate(got / max(seconds, 1e-9))} over {seconds:.1f} s, below "
                       f"the {_rate(min_rate)} minimum: the host is stalled or too slow; try again later, or plan a "
                       "downloaded file with -m.")


def _rate(bps: float) -> str:
    return f"{bps / 1024:.1f} KiB/s" if bps >= 1024 else f"{bps:.0f} B/s"


def no_network(url: str, why: str) -> RemoteError:
    return RemoteError(f"cannot reach {host_of(url)} ({why}): planning a remote model reads its header over the "
                       "network; check the connection, HF_ENDPOINT or the URL, or plan a downloaded file with -m.")


def http_status(url: str, status: int, what: str = "") -> RemoteError:
    """The one-sentence message for an HTTP error answer to `url` (`what`: the file or repo asked for)."""
    what = quoted(what or url)
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
