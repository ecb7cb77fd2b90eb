"""Hostile answers for the loopback server (`range_server.LoopbackHub.routes`) and GGUF headers that lie.

The remote readers' bounds are only worth what they stop, so each is tested against what a broken
or malicious host can send: a header whose lengths and counts lie (a 2^60-byte key name, 2^40
tensors), a Content-Range claiming an 8 TiB file, a body that trickles or never comes, a redirect
loop, a listing whose next page is on another host or never ends. Every route records its request
in the server's log (path, Range, status, body bytes sent, Authorization), so a test asserts what a
case cost in requests and bytes, never in time. Every wait here is bounded: a trickle stops when
the client goes away or `stop` is set, a silent answer waits on `stop` at most 30 s.
"""

from __future__ import annotations

import json
import re
import struct
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.helpers.range_server import Hit

Route = Callable[[Any, bool], None]
_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


def _record(h: Any, code: int, sent: int) -> None:
    h.server.hub.record(Hit(h.command, h.path, h.headers.get("Range", ""), code, sent, h.headers.get("Authorization", "")))


def _range(h: Any, size: int) -> tuple[int, int]:
    m = _RANGE.match(h.headers.get("Range", "").strip())
    start = int(m.group(1)) if m else 0
    end = int(m.group(2)) if m and m.group(2) else size - 1
    return start, min(end, size - 1)


# ---- GGUF headers that lie ----

def gguf(n_tensors: int, n_kv: int, body: bytes = b"") -> bytes:
    """A GGUF v3 header claiming `n_tensors` tensors and `n_kv` keys, followed by `body`."""
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + body


def gguf_string(text: bytes, claimed: int | None = None) -> bytes:
    """A GGUF string: its length (`claimed`, default the true one), then `text`."""
    return struct.pack("<Q", len(text) if claimed is None else claimed) + text


def kv_string(key: str, value: bytes, claimed: int | None = None) -> bytes:
    """A string key/value whose value claims `claimed` bytes (default its true length)."""
    return gguf_string(key.encode()) + struct.pack("<I", 8) + gguf_string(value, claimed)


def kv_string_array(key: str, count: int) -> bytes:
    """An array of `count` empty strings (8 zero bytes each): a header of 8 * count bytes that is all
    true, for a header larger than a cap."""
    return gguf_string(key.encode()) + struct.pack("<IIQ", 9, 8, count) + bytes(8 * count)


# ---- hostile routes ----

def lying_file(data: bytes, claimed: int) -> Route:
    """`data` (zeros past its end) served by ranges, with a Content-Range that says the file is
    `claimed` bytes long."""
    def route(h: Any, head: bool) -> None:
        start, end = _range(h, claimed)
        body = data[start:end + 1]
        body += bytes(end + 1 - start - len(body))
        h._send(206, body, head, {"Content-Range": f"bytes {start}-{end}/{claimed}", "ETag": '"lie"'})
    return route


def trickle(stop: threading.Event, step_s: float = 0.02, size: int = 1 << 30) -> Route:
    """A 206 that promises the range asked for, then sends one zero byte every `step_s` (the link's
    speed, not a wait for anything) until the client goes away, `stop` is set, or 1000 were sent."""
    def route(h: Any, head: bool) -> None:
        start, end = _range(h, size)
        h.send_response(206)
        h.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        h.send_header("Content-Length", str(end - start + 1))
        h.end_headers()
        sent = 0
        try:
            while sent < min(1000, end - start + 1) and not stop.wait(step_s):
                h.wfile.write(b"\0")
                sent += 1
        except (BrokenPipeError, ConnectionResetError):
            pass
        h.close_connection = True
        _record(h, 206, sent)
    return route


def silent(stop: threading.Event) -> Route:
    """Read the request, then answer nothing until `stop` is set (at most 30 s)."""
    def route(h: Any, head: bool) -> None:
        stop.wait(30)
        h.close_connection = True
        _record(h, 0, 0)
    return route


def redirect(to: str) -> Route:
    """302 to `to` (itself: a redirect loop)."""
    def route(h: Any, head: bool) -> None:
        h._send(302, b"", head, {"Location": to})
    return route


def file_entry(path: str, size: int) -> dict[str, Any]:
    """One file of a tree listing, as the Hub writes an LFS file."""
    return {"type": "file", "oid": "0" * 40, "size": size, "path": path,
            "lfs": {"oid": "1" * 64, "size": size, "pointerSize": 134}}


def paged_tree(pages: list[list[dict[str, Any]]], next_url: Callable[[int], str | None]) -> Route:
    """A tree listing: page `?cursor=i` is `pages[i]` (the last one past the end), with a
    `Link: <next_url(i)>; rel="next"` header unless `next_url(i)` is None."""
    def route(h: Any, head: bool) -> None:
        i = int(parse_qs(urlsplit(h.path).query).get("cursor", ["0"])[0])
        nxt = next_url(i)
        headers = {"Content-Type": "application/json", **({"Link": f'<{nxt}>; rel="next"'} if nxt else {})}
        h._send(200, json.dumps(pages[min(i, len(pages) - 1)]).encode(), head, headers)
    return route
