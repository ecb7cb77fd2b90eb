"""Ask a `ggml-rpc-server` how much memory its devices have (free/total), with a bounded timeout.

The wire format is ggml-rpc.cpp's (protocol 7.x, llama.cpp b11434), all little-endian and packed:
a request is `| cmd (1 byte) | size (u64) | payload |`, a response `| size (u64) | payload |`.
A connection starts with HELLO (cmd 14, payload 24 zero bytes of transport caps: plain TCP), answered
by `major, minor, patch, pad, caps[24]`; then DEVICE_COUNT (cmd 15, no payload -> u32) and
GET_DEVICE_MEMORY (cmd 11, u32 device -> u64 free, u64 total).

An rpc-server serves one client at a time (accept, serve until it disconnects, accept again), so
while a llama-server is connected to it our HELLO waits in its accept queue and the read times out
("busy"). The server does not ignore SIGPIPE: closing a connection whose HELLO it has not answered
yet would make it write to a closed socket later and die. So a timed-out connection is not closed
but handed to a daemon thread that waits for that answer and then hangs up cleanly (the server
then sees an orderly end of the connection).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass

PROTO_MAJOR = 7
CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CAPS_SIZE = 24
DEFAULT_TIMEOUT_S = 1.0
#: How long a timed-out connection may wait for its HELLO answer before it is dropped anyway.
DRAIN_S = 3600.0
MIB = 1024 * 1024
#: Endpoints with a HELLO still waiting in the server's queue: not asked again until it is answered
#: (so a server held by a llama-server for hours costs one waiting connection, not one per ask).
_DRAINING: set[str] = set()
_DRAINING_LOCK = threading.Lock()


class RpcError(OSError):
    """The server could not be asked: one sentence why (unreachable, busy, not an rpc-server)."""


@dataclass(frozen=True)
class RpcMemory:
    """What one rpc-server reports for each of its devices, in MiB (device 0 first)."""

    endpoint: str
    free_mib: tuple[float, ...]
    total_mib: tuple[float, ...]
    version: str

    @property
    def free(self) -> float:
        return sum(self.free_mib)

    @property
    def total(self) -> float:
        return sum(self.total_mib)


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """`host:port` as llama.cpp's `--rpc` takes it; ValueError naming the endpoint otherwise."""
    host, sep, port = endpoint.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--rpc {endpoint!r}: give host:port (e.g. 192.168.1.20:50052)")
    return host.strip("[]"), int(port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise RpcError("the server closed the connection (not a ggml-rpc-server, or a protocol mismatch)")
        buf.extend(chunk)
    return bytes(buf)


def _command(sock: socket.socket, cmd: int, payload: bytes, expect: int) -> bytes:
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    (size,) = struct.unpack("<Q", _recv_exact(sock, 8))
    if size != expect:
        raise RpcError(f"unexpected answer to command {cmd} ({size} bytes, expected {expect}): not a ggml-rpc-server "
                       f"of protocol {PROTO_MAJOR}.x")
    return _recv_exact(sock, size)


def _drain_then_close(sock: socket.socket, endpoint: str) -> None:
    """Wait for the pending HELLO answer, then hang up (see the module doc)."""
    try:
        sock.settimeout(DRAIN_S)
        (size,) = struct.unpack("<Q", _recv_exact(sock, 8))
        _recv_exact(sock, min(size, 4 + CAPS_SIZE))
    except (OSError, struct.error):
        pass
    finally:
        sock.close()
        with _DRAINING_LOCK:
            _DRAINING.discard(endpoint)


def read_memory(endpoint: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> RpcMemory:
    """Free/total memory of every device of the rpc-server at `endpoint`. Raises RpcError or ValueError."""
    host, port = parse_endpoint(endpoint)
    endpoint = endpoint.strip()
    with _DRAINING_LOCK:
        if endpoint in _DRAINING:
            raise RpcError(f"{endpoint}: busy (our last question still waits in its queue: a llama-server is "
                           "probably connected)")
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise RpcError(f"{endpoint}: not reachable ({exc.strerror or exc})") from exc
    pending = False  # a HELLO the server has not answered yet
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            hello = _command(sock, CMD_HELLO, bytes(CAPS_SIZE), 4 + CAPS_SIZE)
        except socket.timeout as exc:
            pending = True
            raise RpcError(f"{endpoint}: busy (an rpc-server serves one client at a time; a llama-server is "
                           "probably connected) or not answering") from exc
        major, minor, patch = hello[0], hello[1], hello[2]
        version = f"{major}.{minor}.{patch}"
        if major != PROTO_MAJOR:
            raise RpcError(f"{endpoint}: rpc protocol {version}, mtp-tune speaks {PROTO_MAJOR}.x")
        (count,) = struct.unpack("<I", _command(sock, CMD_DEVICE_COUNT, b"", 4))
        free, total = [], []
        for dev in range(count):
            free_b, total_b = struct.unpack("<QQ", _command(sock, CMD_GET_DEVICE_MEMORY, struct.pack("<I", dev), 16))
            free.append(free_b / MIB)
            total.append(total_b / MIB)
        return RpcMemory(endpoint, tuple(free), tuple(total), version)
    except socket.timeout as exc:
        raise RpcError(f"{endpoint}: no answer within {timeout_s:g} s") from exc
    except OSError as exc:
        if isinstance(exc, RpcError):
            raise
        raise RpcError(f"{endpoint}: {exc.strerror or exc}") from exc
    finally:
        if not pending:
            sock.close()  # between commands: the server sees an orderly end
        else:
            with _DRAINING_LOCK:
                _DRAINING.add(endpoint)
            threading.Thread(target=_drain_then_close, args=(sock, endpoint), name="rpc-drain", daemon=True).start()


@dataclass(frozen=True)
class RpcReading:
    """The newest answer of one server: `memory` (None until one came) and, when the last ask
    failed, `error` (one sentence); `at` is the monotonic time of `memory`."""

    endpoint: str
    memory: RpcMemory | None = None
    error: str = ""
    at: float = 0.0

    def note(self, now: float | None = None) -> str:
        """A few words for the bars: where the figures come from and how old they are."""
        if self.memory is None:
            return f"memory unknown ({self.error or 'not asked yet'})"
        age = (time.monotonic() if now is None else now) - self.at
        when = "just now" if age < 5 else f"{age:.0f} s ago"
        return f"read from the server {when}" + (" (busy now)" if self.error else "")


class RpcReadings:
    """Readings per endpoint, asked again at most every `refresh_s`; a busy or unreachable server
    keeps its last good reading (a llama-server connected to it holds it for as long as it runs).
    Thread-safe; `read` blocks up to `timeout_s` per endpoint that is due."""

    def __init__(self, refresh_s: float = 10.0, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._readings: dict[str, RpcReading] = {}
        self._asked: dict[str, float] = {}

    def read(self, endpoints: list[str] | tuple[str, ...]) -> dict[str, RpcReading]:
        out: dict[str, RpcReading] = {}
        for ep in (e.strip() for e in endpoints if e.strip()):
            now = time.monotonic()
            with self._lock:
                due = now - self._asked.get(ep, -1e9) >= self.refresh_s
                if due:
                    self._asked[ep] = now
                old = self._readings.get(ep, RpcReading(ep))
            if due:
                try:
                    new = RpcReading(ep, read_memory(ep, self.timeout_s), "", time.monotonic())
                except (RpcError, ValueError) as exc:
                    new = RpcReading(ep, old.memory, str(exc), old.at)
                with self._lock:
                    self._readings[ep] = new
                    if len(self._readings) > 64:  # endpoints typed and dropped: keep the newest
                        for stale in list(self._readings)[:-64]:
                            self._readings.pop(stale, None)
                            self._asked.pop(stale, None)
                old = new
            out[ep] = old
        return out
