"""A loopback TCP proxy that counts the connections made through it (how often a server is asked).

Put in front of a real ggml-rpc-server, it tells a test how many times mtp-tune asked that server
for its memory, without touching the client: each ask is one connection.
"""

from __future__ import annotations

import socket
import threading


class CountingProxy:
    """Listens on 127.0.0.1:`port`, forwards each connection to `upstream` (host, port); `accepted`
    counts them. A context manager; every thread it starts is joined (bounded) on exit."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self.accepted = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def count(self) -> int:
        with self._lock:
            return self.accepted

    def __enter__(self) -> "CountingProxy":
        self._start(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in list(self._threads):
            t.join(10.0)
        for s in self._sockets:
            s.close()
        self._listener.close()

    def _start(self, target: object, *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            upstream = socket.create_connection(self.upstream, timeout=5.0)
            self._sockets += [client, upstream]
            self._start(self._pump, client, upstream)
            self._start(self._pump, upstream, client)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Copy src -> dst until src ends, then end dst's write side (an orderly hang-up both ways)."""
        src.settimeout(0.2)
        try:
            while not self._stop.is_set():
                try:
                    data = src.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
