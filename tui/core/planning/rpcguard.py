"""Loopback guards in front of a dry run's RPC servers: fit's commands pass, tensor data never does.

llama.cpp's `--fit` pass (no_alloc) sends an RPC device questions (HELLO, device count, alignment,
max size, free memory, a tensor's alloc size) and manages a few small buffers (the recurrent
state's: ALLOC_BUFFER, BUFFER_GET_BASE, BUFFER_CLEAR, FREE_BUFFER, INIT_TENSOR); its weights sit
in zero-sized dummy buffers that never reach the server. The real load that follows fit's decision
is the first to send data (SET_TENSOR, SET_TENSOR_HASH, ...). A dry run stopped late must not get
that far on a user's own `--rpc` server, so every endpoint the dry run uses is reached through an
`RpcGuard`: a proxy that forwards the commands above and, at the first other one, forwards nothing
more, keeps llama-server waiting for an answer that never comes, and ends the server-side
connection between two commands (a clean disconnect: ggml-rpc-server frees that client's buffers).
A late real load can so still allocate its weight buffer there, never fill it.
The protocol (ggml/src/ggml-rpc/ggml-rpc.cpp, v7): request = cmd (1 byte) | size (u64 LE) | data;
the answers are forwarded as they are. HELLO's transport capabilities are zeroed so the
connection stays plain TCP through the proxy (no RDMA upgrade around it).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Sequence

#: the commands fit's no_alloc pass sends: ALLOC_BUFFER, GET_ALIGNMENT, GET_MAX_SIZE,
#: BUFFER_GET_BASE, FREE_BUFFER, BUFFER_CLEAR, GET_DEVICE_MEMORY, INIT_TENSOR, GET_ALLOC_SIZE,
#: HELLO, DEVICE_COUNT (all but data: SET_TENSOR(_HASH), GET/COPY/MEMSET_TENSOR, GRAPH_(RE)COMPUTE)
PASS = frozenset({0, 1, 2, 3, 4, 5, 11, 12, 13, 14, 15})
HELLO = 14
NAMES = {6: "SET_TENSOR", 7: "SET_TENSOR_HASH", 8: "GET_TENSOR", 9: "COPY_TENSOR", 10: "GRAPH_COMPUTE",
         16: "GRAPH_RECOMPUTE", 17: "MEMSET_TENSOR"}
_CONNECT_TIMEOUT_S = 10.0


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


class RpcGuard:
    """One guarded loopback endpoint per upstream `host:port`; a context manager.

    `endpoints` replaces the `--rpc` list; `held` is set (with `reason`) once a data command was
    held back; `names` maps each guard's device name to the upstream one; `unreachable`
    names an upstream endpoint that refused a connection."""

    def __init__(self, upstream: Sequence[str]) -> None:
        self.upstream = list(upstream)
        self.held = threading.Event()
        self.reason = ""
        self._listeners: list[socket.socket] = []
        self._socks: list[socket.socket] = []
        self._ups: list[socket.socket] = []  # the connections to the RPC servers
        self._lock = threading.Lock()
        self._closed = False
        self.endpoints: list[str] = []
        self.unreachable = ""  # the first upstream endpoint a connection to failed

    @property
    def names(self) -> dict[str, str]:
        return {f"RPC0[{g}]": f"RPC0[{u}]" for g, u in zip(self.endpoints, self.upstream)}

    def __enter__(self) -> "RpcGuard":
        try:
            for up in self.upstream:
                ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                ls.bind(("127.0.0.1", 0))
                ls.listen(8)
                self._listeners.append(ls)
                self.endpoints.append(f"127.0.0.1:{ls.getsockname()[1]}")
                threading.Thread(target=self._accept, args=(ls, up), name="rpc-guard", daemon=True).start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the listeners and llama-server's side; to each RPC server only end-of-input: it
        finishes what it was answering (its answer drained here; closing under a server that is
        writing can kill it with SIGPIPE) and closes, and the drain thread closes our end then."""
        with self._lock:
            self._closed = True
            socks, self._socks = self._socks + self._listeners, []
            ups, self._ups = self._ups, []
            self._listeners = []
        for s in socks:
            try:  # shutdown first: it wakes the threads blocked in recv() on it
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
        for s in ups:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def _track(self, s: socket.socket, upstream: bool = False) -> bool:
        with self._lock:
            if self._closed:
                s.close()
                return False
            (self._ups if upstream else self._socks).append(s)
            return True

    def _accept(self, ls: socket.socket, up: str) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return  # closed
            if not self._track(client):
                return
            host, _, port = up.rpartition(":")
            try:
                server = socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT_S)
                server.settimeout(None)
            except (OSError, ValueError):
                self.unreachable = self.unreachable or up
                client.close()  # llama-server fails its handshake; the caller names `unreachable`
                continue
            if not self._track(server, upstream=True):
                return
            threading.Thread(target=self._down, args=(server, client), name="rpc-guard-down", daemon=True).start()
            threading.Thread(target=self._up, args=(client, server, up), name="rpc-guard-up", daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, up: str) -> None:
        """llama-server -> RPC server, one command at a time; stop before the first data command."""
        while True:
            head = _recv_exact(client, 9)
            if head is None:
                break
            cmd, size = head[0], struct.unpack("<Q", head[1:])[0]
            if cmd not in PASS:
                with self._lock:
                    if not self.reason:
                        self.reason = f"{NAMES.get(cmd, f'command {cmd}')} for {up}"
                self.held.set()
                break  # not forwarded; llama-server waits for an answer until it is stopped
            data = _recv_exact(client, size) if size else b""
            if data is None:
                break
            if cmd == HELLO:
                data = bytes(len(data))  # no transport capabilities: the connection stays TCP through us
            try:
                server.sendall(head + data)
            except OSError:
                break
        try:
            server.shutdown(socket.SHUT_WR)  # between two commands: the RPC server sees a clean end
        except OSError:
            pass

    def _down(self, server: socket.socket, client: socket.socket) -> None:
        """RPC server -> llama-server; once llama-server is gone or held, drain until the server ends."""
        forward = True
        while True:
            try:
                chunk = server.recv(1 << 16)
            except OSError:
                break
            if not chunk:
                break
            if forward and not self.held.is_set():
                try:
                    client.sendall(chunk)
                except OSError:
                    forward = False
        try:
            server.close()
        except OSError:
            pass
