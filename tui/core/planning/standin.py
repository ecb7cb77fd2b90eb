"""Stand-in devices for hardware this machine does not have: loopback `ggml-rpc-server`s.

An exact plan for simulated GPUs needs llama.cpp to see one offload device per GPU. Each stand-in
is a ggml-rpc-server on 127.0.0.1 serving this machine's CPU backend, which reports the host's
physical memory as both total and free (ggml-cpu.cpp `ggml_backend_cpu_device_get_memory`; b11434's
rpc-server has no option to report less). So `--fit` is told the simulated free memory through the
per-device `--fit-target`: target_i = host_total - simulated_free_i + the user's margin_i, which
makes fit's budget on device i exactly simulated_free_i - margin_i.

Limits said plainly (`caveats`): a stand-in cannot be larger than this machine's RAM (the margin
would be negative); compute buffers are sized by the CPU backend, not CUDA's (other kernels,
no pool scratch, no pinned host staging); and llama.cpp allocates the recurrent state for real even
in its no_alloc pass, so a hybrid model's RS buffer is really allocated on the stand-in for a moment.
The servers are spawned by the product's process module (own group, parent-death signal) and die
with mtp-tune.

A stand-in can also be *capped* (`caps_mib`): its address space limited (RLIMIT_AS, set with prlimit
once it listens) to what it had plus the simulated device's free memory, so an allocation past that
fails for real and llama-server reports the device out of memory, as the small GPU would. That is
what lets a tune search the smallest --fit-target of a simulated GPU by real launches.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tui.core.options.settings import Settings
from tui.core.planning.devices import DeviceSpec
from tui.core.planning.resolve import DEFAULT_FIT_TARGET_MIB
from tui.core.server.process import Child, free_port

LISTEN_TIMEOUT_S = 20.0


class StandInError(ValueError):
    """The simulated devices cannot be stood in for on this machine; one sentence why."""


def host_total_mib() -> int:
    """What a CPU device (and so each stand-in) reports as total and free memory, in MiB."""
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024))


def fit_targets(simulated: Sequence[DeviceSpec], margins_mib: Sequence[int], host_mib: int | None = None) -> list[int]:
    """The `--fit-target` per stand-in that makes fit see each simulated device's free memory."""
    host_mib = host_total_mib() if host_mib is None else host_mib
    out = []
    for i, d in enumerate(simulated):
        margin = int(margins_mib[i] if i < len(margins_mib) else (margins_mib[-1] if margins_mib else 1024))
        target = host_mib - int(d.free_mib) + margin
        if target < 0:
            raise StandInError(
                f"{d.key} ({d.name}) has {d.free_mib:.0f} MiB free, more than this machine's {host_mib} MiB of RAM "
                f"(plus the {margin} MiB margin), so no stand-in here can play it; exact mode is unavailable for it.")
        out.append(target)
    return out


def caveats(simulated: Sequence[DeviceSpec]) -> list[str]:
    names = ", ".join(f"{d.key}" for d in simulated)
    return [
        f"{names} measured on loopback ggml-rpc-server stand-ins: weights, KV and recurrent state are what llama.cpp "
        "allocates on any backend, but compute buffers are the CPU backend's sizes; a CUDA build's differ (other "
        "kernels, pool scratch, pinned host staging).",
    ]


class RpcServers:
    """Loopback `ggml-rpc-server` processes, one per device, on free ports; a context manager.

    `endpoints` is the `--rpc` value and `keys` the devices' buffer names (`RPC0[127.0.0.1:port]`,
    every rpc-server numbers its own device 0). The one way mtp-tune runs local RPC servers (stand-ins
    here; the multi-device tests and benchmarks too).
    """

    def __init__(self, rpc_bin: str | Path, count: int = 2, threads: int = 1, timeout_s: float = LISTEN_TIMEOUT_S,
                 caps_mib: Sequence[int] | None = None) -> None:
        self.rpc_bin = str(rpc_bin)
        self.count = count
        self.threads = threads
        self.timeout_s = timeout_s
        self.caps_mib = list(caps_mib) if caps_mib is not None else None
        self.children: list[Child] = []
        self.ports: list[int] = []

    @property
    def endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @property
    def keys(self) -> list[str]:
        return [f"RPC0[127.0.0.1:{p}]" for p in self.ports]

    def __enter__(self) -> "RpcServers":
        # One malloc arena when capped: the cap then bounds the buffers, not the arenas' reservations.
        env = {**os.environ, "MALLOC_ARENA_MAX": "1"} if self.caps_mib is not None else None
        try:
            for _ in range(self.count):
                port = free_port()
                self.children.append(Child([self.rpc_bin, "-H", "127.0.0.1", "-p", str(port), "-t", str(self.threads)],
                                           env=env))
                self.ports.append(port)
            for i, (port, child) in enumerate(zip(self.ports, self.children)):
                child.wait_listening("127.0.0.1", port, self.timeout_s)
                if self.caps_mib is not None:
                    cap_address_space(child.pid, self.caps_mib[i])
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.children:
            child.stop(grace=2.0)
        self.children.clear()


def cap_address_space(pid: int, extra_mib: int) -> int:
    """Limit `pid`'s address space to what it maps now plus `extra_mib`; the limit in bytes.

    Raises StandInError when the kernel refuses (no /proc, or another user's process)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        vm_kib = next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmSize:"))
        limit = vm_kib * 1024 + int(extra_mib) * 1024 * 1024
        resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))
    except (OSError, StopIteration, ValueError) as e:
        raise StandInError(f"could not cap the stand-in (pid {pid}) at {extra_mib} MiB: {e}") from None
    return limit


def on_stand_ins(settings: Settings, stand_ins: StandIns) -> Settings:
    """`settings` as launched on `stand_ins`: their endpoints first in --rpc (the user's own RPC
    servers after them) and the fit-target per stand-in from the user's margins (fit-target_i = host
    RAM - simulated free_i + margin_i), so fit and every allocation see the simulated device."""
    margins = [int(v) for v in settings.fit_target] or [DEFAULT_FIT_TARGET_MIB]
    eps = [e for e in stand_ins.endpoints.split(",") if e]
    others = [e for e in settings.rpc if e not in eps]
    targets = fit_targets(stand_ins.simulated, margins) + [margins[-1]] * len(others)
    return replace(settings, rpc=[*eps, *others], fit_target=targets)


class StandIns(RpcServers):
    """One loopback ggml-rpc-server per simulated device, with `targets`, the `--fit-target` list
    that makes fit see each simulated device's free memory (StandInError when one cannot be played).
    `capped`: each stand-in can allocate the simulated device's free memory and no more."""

    def __init__(self, rpc_bin: str | Path, simulated: Sequence[DeviceSpec], margins_mib: Sequence[int] = (1024,),
                 threads: int = 1, capped: bool = False) -> None:
        caps = [int(d.free_mib) for d in simulated] if capped else None
        super().__init__(rpc_bin, len(simulated), threads, caps_mib=caps)
        self.simulated = list(simulated)
        self.targets = fit_targets(self.simulated, list(margins_mib))
