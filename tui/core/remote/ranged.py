"""A remote file read from its start by HTTP Range requests, keeping every byte it fetched.

The GGUF header parser reads sequentially from byte 0, so one growing buffer serves it: `read(n)`
answers from the buffer and fetches only what is missing, as one `Range: bytes=a-b` request. The
first request learns the total size (`Content-Range`) and the ETag, and proves the host honours
Range: a host that answers 200 is refused at once, its body left unread (the connection is closed
after the headers), because reading a header must never turn into downloading 20 GB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from tui.core.remote.errors import RemoteError, http_status, ignores_range, no_network

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
#: connect and read timeouts: a header read is a few small requests
TIMEOUT = httpx.Timeout(30.0, connect=10.0)


def new_client() -> httpx.Client:
    """The client for ranged reads: redirects followed (the Hub's resolve URLs redirect to storage;
    httpx drops Authorization when a redirect leaves the origin), bounded timeouts."""
    return httpx.Client(follow_redirects=True, timeout=TIMEOUT)


@dataclass
class Traffic:
    """What reading cost: requests made and body bytes received, over every file of one plan."""

    requests: int = 0
    bytes: int = 0
    urls: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "bytes": self.bytes}


class RangedFile:
    """A file-like view of `url` from byte 0: `read(n)`, `size`, `etag`, `data` (all fetched bytes)."""

    def __init__(self, client: httpx.Client, url: str, headers: dict[str, str] | None = None,
                 traffic: Traffic | None = None, what: str = "", first: int = 256 << 10) -> None:
        self.client = client
        self.url = url
        self.headers = dict(headers or {})
        self.traffic = traffic if traffic is not None else Traffic()
        self.what = what or url
        self.data = bytearray()
        self.pos = 0
        self.size = 0
        self.etag = ""
        self._fetch(0, first)

    def _fetch(self, start: int, n: int) -> None:
        """Append bytes [start, start + n) (clipped to the file) to `data`; `start == len(data)`."""
        if self.size and start >= self.size:
            return
        end = start + n - 1 if not self.size else min(start + n, self.size) - 1
        headers = {**self.headers, "Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
        self.traffic.requests += 1
        try:
            with self.client.stream("GET", self.url, headers=headers) as r:
                if r.status_code == 200:
                    length = r.headers.get("content-length")
                    raise ignores_range(self.url, int(length) if length and length.isdigit() else None)
                if r.status_code != 206:
                    raise http_status(self.url, r.status_code, self.what)
                m = _CONTENT_RANGE.match(r.headers.get("content-range", ""))
                if m is None or int(m.group(1)) != start:
                    raise RemoteError(f"{self.url}: the server answered a byte range without a valid Content-Range "
                                      f"({r.headers.get('content-range')!r}); it cannot be read by ranges.")
                if m.group(3) != "*":
                    self.size = int(m.group(3))
                self.etag = self.etag or r.headers.get("etag", "")
                body = bytearray()
                for chunk in r.iter_bytes():
                    body += chunk
                    if len(body) > end - start + 1:
                        raise RemoteError(f"{self.url}: the server sent more than the {end - start + 1} bytes asked "
                                          "for; refusing to read on.")
        except httpx.TransportError as exc:
            raise no_network(self.url, _why(exc)) from None
        self.traffic.bytes += len(body)
        if not self.size:
            raise RemoteError(f"{self.url}: the server does not say the file's size (Content-Range */*).")
        self.data += body

    def ensure(self, n: int) -> None:
        """Have at least the first `n` bytes (or the whole file when it is shorter)."""
        if n > len(self.data):
            self._fetch(len(self.data), n - len(self.data))

    def read(self, n: int = -1) -> bytes:
        want = self.size - self.pos if n < 0 else n
        self.ensure(self.pos + want)
        out = bytes(self.data[self.pos:self.pos + want])
        self.pos += len(out)
        return out


def _why(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.ConnectError):
        text = str(exc).lower()
        if "name or service" in text or "nodename" in text or "resolve" in text or "getaddrinfo" in text:
            return "the host name does not resolve"
        return "connection refused" if "refused" in text else f"cannot connect: {exc}"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"


def remote_readahead(want: int, have: int) -> int:
    """The header parser's read size for a remote file: small steps that grow by an eighth, so the
    bytes fetched stay within about 1.15x the header (a local file doubles instead)."""
    return max(want, 128 << 10, have // 8)
