"""The RPC memory client against a real loopback ggml-rpc-server (the product's RpcServers launcher)."""

from __future__ import annotations

import socket
import struct
import threading
from pathlib import Path

import pytest

from tui.core.gpu.rpc import CAPS_SIZE, CMD_HELLO, RpcError, parse_endpoint, read_memory
from tui.core.planning.devices import device_set
from tui.core.planning.standin import RpcServers, host_total_mib
from tui.core.server.process import free_port


def test_reads_free_and_total_memory_of_a_real_rpc_server(rpc_server_bin: Path) -> None:
    with RpcServers(rpc_server_bin, count=1) as rpc:
        mem = read_memory(rpc.endpoints, timeout_s=5.0)
        again = read_memory(rpc.endpoints, timeout_s=5.0)  # the server takes the next client after us
    assert mem.version.startswith("7.")
    assert len(mem.total_mib) == 1
    # A CPU device reports the host's physical memory as its total (ggml-cpu.cpp).
    assert abs(mem.total - host_total_mib()) <= 1.0
    assert 0 < mem.free <= mem.total
    assert again.total == mem.total


def test_a_busy_server_times_out_and_survives(rpc_server_bin: Path) -> None:
    """While another client holds it, our HELLO waits: the read gives up, and the server lives on."""
    with RpcServers(rpc_server_bin, count=1) as rpc:
        host, port = parse_endpoint(rpc.endpoints)
        holder = socket.create_connection((host, port), timeout=5.0)
        holder.sendall(struct.pack("<BQ", CMD_HELLO, CAPS_SIZE) + bytes(CAPS_SIZE))
        (size,) = struct.unpack("<Q", holder.recv(8, socket.MSG_WAITALL))
        holder.recv(size, socket.MSG_WAITALL)  # the server now serves `holder`
        with pytest.raises(RpcError, match="busy"):
            read_memory(rpc.endpoints, timeout_s=0.3)
        waiting = [t for t in threading.enumerate() if t.name == "rpc-drain"]
        for _ in range(5):  # asked again while held: answered at once, no second waiting connection
            with pytest.raises(RpcError, match="still waits in its queue"):
                read_memory(rpc.endpoints, timeout_s=0.3)
        assert [t for t in threading.enumerate() if t.name == "rpc-drain"] == waiting and len(waiting) == 1
        holder.close()  # the server moves on to our queued HELLO, answers it, and we hang up cleanly
        waiting[0].join(10.0)  # our queued HELLO is answered and the connection closed cleanly
        assert not waiting[0].is_alive()
        mem = read_memory(rpc.endpoints, timeout_s=5.0)
        assert mem.total > 0
        assert rpc.children[0].proc.poll() is None


def test_unreachable_and_bad_endpoints() -> None:
    port = free_port()
    with pytest.raises(RpcError, match="not reachable"):
        read_memory(f"127.0.0.1:{port}", timeout_s=0.5)
    with pytest.raises(ValueError, match="host:port"):
        read_memory("localhost", timeout_s=0.5)


def test_a_server_that_is_not_rpc_is_named() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        import threading

        def answer() -> None:
            conn, _ = listener.accept()
            conn.recv(64)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

        t = threading.Thread(target=answer, daemon=True)
        t.start()
        with pytest.raises(RpcError, match="not a ggml-rpc-server"):
            read_memory(f"127.0.0.1:{port}", timeout_s=2.0)
        t.join(5.0)
    finally:
        listener.close()


def test_the_plan_device_list_takes_each_servers_memory(rpc_server_bin: Path) -> None:
    with RpcServers(rpc_server_bin, count=2) as rpc:
        eps = rpc.endpoints.split(",")
        ds = device_set(None, eps)  # asks each server itself
        mem = {ep: read_memory(ep, timeout_s=5.0) for ep in eps}
    devices = ds.devices
    assert [d.key for d in devices] == [f"RPC0[{ep}]" for ep in eps] and ds.unreachable == ()
    assert [d.total_mib for d in devices] == [mem[ep].total for ep in eps]
    assert all(abs(d.free_mib - mem[ep].free) < 0.05 * mem[ep].total for d, ep in zip(devices, eps))  # free moves a little
    assert all(d.remote for d in devices) and [r.endpoint for r in ds.readings] == eps
