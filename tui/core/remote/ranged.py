"""A remote file read from its start by HTTP Range requests, keeping every byte it fetched.

The GGUF header parser reads sequentially from byte 0, so one growing buffer serves it: `read(n)`
answers from the buffer and fetches only what is missing, as one `Range: bytes=a-b` request. The
first request learns the total size (`Content-Range`) and the ETag, and proves the host honours
Range: a host that answers 200 is refused at once, its body left unread (the connection is closed
after the headers), because reading a header must never turn into downloading 20 GB.

Every read is bounded (`Limits`), because the host may be broken or hostile: the bytes one file may
buffer, the size it may claim, one deadline for the whole file, a progress rule for a body that
trickles, timeouts on every request and a cap on redirects. Each bound that trips is one sentence.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tui.core.planning.gguf_reader import MAX_HEADER_BYTES
from tui.core.remote.errors import RemoteError, host_of, http_status, ignores_range, no_network, quoted, too_slow

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


@dataclass(frozen=True)
class Limits:
    """The bounds on one remote read; tests shrink them (a short progress window, a small cap) so a
    trickling or silent host trips them at once instead of after a wait.

    - `max_bytes`: what one file's header may take (the parser's MAX_HEADER_BYTES: 4x the largest real
      header), so a lying length field costs at most that much memory and traffic;
    - `max_file_bytes`: the largest file size a server may claim (4 TiB: above every model released in
      BF16 as one file, 2 TB for 1T parameters); the sparse copy is never larger;
    - `deadline_s`: the whole read of one file, every request together (a 16 MiB header at the
      minimum rate takes under 10 minutes);
    - `min_rate_bps` over `window_s`: a body slower than 32 KiB/s over 30 s is stalled (a per-read
      timeout never fires on one byte every 5 s);
    - `connect_s`, `read_s`: each request's timeouts; `max_redirects`: a redirect loop stops there
      (the Hub's resolve URL redirects once, to its storage).
    """

    max_bytes: int = MAX_HEADER_BYTES
    max_file_bytes: int = 4 << 40
    deadline_s: float = 600.0
    min_rate_bps: float = 32 << 10
    window_s: float = 30.0
    connect_s: float = 10.0
    read_s: float = 30.0
    max_redirects: int = 10

    def timeout(self, left: float | None = None) -> httpx.Timeout:
        """Each request's timeouts, never past what is `left` of the deadline."""
        left = self.deadline_s if left is None else max(left, 0.001)
        return httpx.Timeout(min(self.read_s, left), connect=min(self.connect_s, left))


DEFAULT_LIMITS = Limits()


def new_client(limits: Limits = DEFAULT_LIMITS) -> httpx.Client:
    """The client for ranged reads and the Hub's API: redirects followed (the Hub's resolve URLs
    redirect to storage; httpx drops Authorization when a redirect leaves the origin), at most
    `max_redirects` of them, bounded timeouts."""
    return httpx.Client(follow_redirects=True, timeout=limits.timeout(), max_redirects=limits.max_redirects)


@dataclass
class Traffic:
    """What reading cost: requests made and body bytes received, over every file of one plan."""

    requests: int = 0
    bytes: int = 0
    urls: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "bytes": self.bytes}


class Deadline:
    """One read's overall deadline (`Limits.deadline_s` from its start), checked before every
    request and after every chunk of a body."""

    def __init__(self, limits: Limits, what: str) -> None:
        self.limits = limits
        self.what = what
        self.at = time.monotonic() + limits.deadline_s

    def left(self, url: str) -> float:
        """Seconds left; RemoteError naming the host once none are."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise self.error(url)
        return left

    def error(self, url: str) -> RemoteError:
        return RemoteError(f"reading {self.what} from {host_of(url)} took longer than {self.limits.deadline_s:g} s: "
                           "the host is too slow; try again later, or plan a downloaded file with -m.")


def read_body(r: httpx.Response, want: int, deadline: Deadline, what: str) -> bytearray:
    """The body of `r`, which must not exceed `want` bytes, under the deadline and the progress rule:
    a window of `window_s` in which less than `min_rate_bps` arrived (the body not yet complete)
    stops the read, naming the host and the rate."""
    lim = deadline.limits
    body = bytearray()
    url = str(r.url)
    window_start, window_got = time.monotonic(), 0
    for chunk in r.iter_bytes():
        body += chunk
        if len(body) > want:
            raise RemoteError(f"{host_of(url)} sent more than the {want} bytes asked for {what}; refusing to read on.")
        window_got += len(chunk)
        deadline.left(url)
        now = time.monotonic()
        if now - window_start >= lim.window_s:
            if len(body) < want and window_got < lim.min_rate_bps * (now - window_start):
                raise too_slow(url, window_got, now - window_start, lim.min_rate_bps, what)
            window_start, window_got = now, 0
    return body


def http_failure(exc: httpx.HTTPError | httpx.InvalidURL, url: str, what: str, deadline: Deadline) -> RemoteError:
    """An httpx failure as one sentence: the deadline (a request's timeouts never outlive it), a
    redirect loop, no network, a URL that is none (given, or in a redirect), or an unreadable answer."""
    limits = deadline.limits
    if isinstance(exc, httpx.TimeoutException) and deadline.at <= time.monotonic():
        return deadline.error(url)
    if isinstance(exc, httpx.InvalidURL):
        return RemoteError(f"{quoted(url, 200)} (or a redirect from it) is not a valid URL ({quoted(exc)}): check the URL.")
    if isinstance(exc, httpx.TooManyRedirects):
        return RemoteError(f"{host_of(url)} redirected the request for {quoted(what)} more than {limits.max_redirects} "
                           "times (a redirect loop): check the URL, or try again later.")
    if isinstance(exc, httpx.TransportError):
        return no_network(url, _why(exc))
    return RemoteError(f"{host_of(url)}: the answer for {quoted(what)} could not be read ({type(exc).__name__}: "
                       f"{quoted(exc)}).")


class RangedFile:
    """A file-like view of `url` from byte 0: `read(n)`, `size`, `etag`, `data` (all fetched bytes)."""

    def __init__(self, client: httpx.Client, url: str, headers: dict[str, str] | None = None,
                 traffic: Traffic | None = None, what: str = "", first: int = 256 << 10,
                 limits: Limits = DEFAULT_LIMITS) -> None:
        self.client = client
        self.url = url
        self.headers = dict(headers or {})
        self.traffic = traffic if traffic is not None else Traffic()
        self.what = quoted(what or url)
        self.limits = limits
        self.deadline = Deadline(limits, f"the header of {self.what}")
        self.data = bytearray()
        self.pos = 0
        self.size = 0
        self.etag = ""
        self._fetch(0, min(first, limits.max_bytes))

    def _fetch(self, start: int, n: int) -> None:
        """Append bytes [start, start + n) (clipped to the file) to `data`; `start == len(data)`."""
        if self.size and start >= self.size:
            return
        end = start + n - 1 if not self.size else min(start + n, self.size) - 1
        headers = {**self.headers, "Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
        left = self.deadline.left(self.url)
        self.traffic.requests += 1
        try:
            with self.client.stream("GET", self.url, headers=headers, timeout=self.limits.timeout(left)) as r:
                got_end = self._check_answer(r, start, end)
                body = read_body(r, end - start + 1, self.deadline, f"the header of {self.what}")
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise http_failure(exc, self.url, self.what, self.deadline) from None
        self.traffic.bytes += len(body)
        if not self.size:
            raise RemoteError(f"{host_of(self.url)}: the server does not say the size of {self.what} (Content-Range */*).")
        if len(body) != got_end - start + 1:
            raise RemoteError(f"{host_of(self.url)} sent {len(body)} of the {got_end - start + 1} bytes its "
                              f"Content-Range promised for {self.what}: the transfer broke off; try again.")
        self.data += body

    def _check_answer(self, r: httpx.Response, start: int, end: int) -> int:
        """The status and Content-Range of one ranged answer, the size it claims checked; the range's end."""
        if r.status_code == 200:
            length = r.headers.get("content-length")
            raise ignores_range(self.url, int(length) if length and length.isdigit() else None)
        if r.status_code != 206:
            raise http_status(self.url, r.status_code, self.what)
        cr = r.headers.get("content-range", "")
        m = _CONTENT_RANGE.match(cr)
        if m is None or int(m.group(1)) != start or not start <= int(m.group(2)) <= end:
            raise RemoteError(f"{host_of(self.url)} answered a byte range of {self.what} without a valid Content-Range "
                              f"('{quoted(cr, 80)}' for bytes {start}-{end}); it cannot be read by ranges.")
        if m.group(3) != "*":
            size = int(m.group(3))
            if size > self.limits.max_file_bytes:
                raise RemoteError(f"{host_of(self.url)} says {self.what} is {size} bytes (Content-Range), more than the "
                                  f"{self.limits.max_file_bytes >> 40} TiB mtp-tune plans a file of: the server's size "
                                  "is wrong; plan a downloaded file with -m.")
            if self.size and size != self.size:
                raise RemoteError(f"{host_of(self.url)} gave two sizes for {self.what} ({self.size}, then {size} bytes): "
                                  "the file changed while it was read; try again.")
            self.size = size
        self.etag = self.etag or r.headers.get("etag", "")
        return int(m.group(2))

    def ensure(self, n: int) -> None:
        """Have at least the first `n` bytes (or the whole file when it is shorter); never more than
        `limits.max_bytes` (RemoteError: the header is larger than any real one)."""
        n = min(n, self.size) if self.size else n
        if n > self.limits.max_bytes:
            raise RemoteError(f"the header of {self.what} on {host_of(self.url)} goes on past "
                              f"{self.limits.max_bytes >> 20} MiB, more than any real GGUF header: the file is damaged "
                              "or not what it claims; mtp-tune stops reading it.")
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
        return "connection refused" if "refused" in text else f"cannot connect: {quoted(exc)}"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return f"{type(exc).__name__}: {quoted(exc)}"


def remote_readahead(want: int, have: int, cap: int = MAX_HEADER_BYTES) -> int:
    """The header parser's read size for a remote file: small steps that grow by an eighth, so the
    bytes fetched stay within about 1.15x the header (a local file doubles instead), and never past
    `cap` unless the parser itself needs that much (then the RangedFile refuses)."""
    return max(want, min(max(128 << 10, have // 8), cap - have))
