"""List every GPU and every process on it (NVML), host RAM, and warnings; or a simulated profile.

This is also the smoke test on a real NVIDIA machine. Without a driver it prints why NVML is not
available and exits 0; `--simulate PROFILE` shows a hardware profile instead, labelled simulated.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
from collections.abc import Callable

from tui.cli._common import fail, print_json
from tui.core.gpu import (
    NA,
    GpuSampler,
    GpuSnapshot,
    Nvml,
    ServerView,
    SimulatedGpus,
    Source,
    Status,
    TelemetrySource,
    device_index,
)
from tui.core.gpu.sampler import DEFAULT_INTERVAL_S
from tui.core.gpu.profiles import PROFILES

COMMAND = "gpus"
HELP = "list GPUs, their processes and host RAM (NVML, or --simulate PROFILE)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON (with --watch: one object per line)")
    p.add_argument(
        "--simulate",
        metavar="PROFILE",
        help=f"show simulated hardware instead of NVML: {', '.join(PROFILES)}, or a size list like 2x16GiB",
    )
    p.add_argument(
        "--alloc",
        metavar="DEV=MIB",
        action="append",
        default=[],
        help="with --simulate: MiB the server allocates on a device (0=4096 or CUDA0=4096); repeatable",
    )
    p.add_argument("--watch", action="store_true", help="keep sampling until Ctrl-C")
    p.add_argument(
        "--interval",
        metavar="S",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help=f"seconds between samples with --watch (default {DEFAULT_INTERVAL_S})",
    )
    p.add_argument("--count", metavar="N", type=int, default=0, help="with --watch: stop after N samples")
    p.add_argument(
        "--server-pid",
        metavar="PID",
        type=int,
        action="append",
        default=[],
        help="mark this pid's processes as ours (the llama-server mtp-tune launched); repeatable",
    )


def _parse_alloc(items: list[str]) -> dict[int | str, float]:
    out: dict[int | str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            mib = float(value)
        except ValueError:
            mib = -1.0
        if not sep or device_index(key) is None or mib < 0:
            raise ValueError(
                f"--alloc {item!r}: expected DEV=MIB with DEV a device index or name such as 0 or CUDA0 "
                "and MIB a non-negative number, e.g. --alloc 0=4096"
            )
        out[key] = out.get(key, 0.0) + mib
    return out


def _fmt(value: object, unit: str = "") -> str:
    if value is NA or value is None:
        return "N/A"
    return f"{value}{unit}"


def format_snapshot(snap: GpuSnapshot) -> str:
    """The human-readable listing: status, every device with every process, host RAM, warnings."""
    lines: list[str] = []
    if snap.source is Source.SIMULATED:
        lines.append(f"SIMULATED: {snap.message}")
    elif snap.source is Source.NONE or not snap.status.available:
        lines.append(snap.message)
    else:
        versions = [
            f"driver {_fmt(snap.driver_version)}",
            f"CUDA {_fmt(snap.cuda_driver_version)}",
            f"NVML {_fmt(snap.nvml_version)}",
            f"nvidia-ml-py {_fmt(snap.bindings_version)}",
        ]
        head = "NVML: " + ("ok" if snap.status is Status.OK else snap.message)
        lines.append(f"{head}  ({', '.join(versions)})")
        if snap.status is Status.NO_DEVICES:
            lines.append(snap.message)
    for dev in snap.devices:
        lines.append("")
        lines.append(f"GPU {dev.index}  {_fmt(dev.name)}  bus {_fmt(dev.pci_bus_id)}  {_fmt(dev.uuid)}")
        if dev.error:
            lines.append(f"  ERROR: {dev.error}")
            continue
        lines.append(
            f"  memory  {_fmt(dev.memory_used_mib, ' MiB')} used / {_fmt(dev.memory_total_mib, ' MiB')} total, "
            f"{_fmt(dev.memory_free_mib, ' MiB')} free"
        )
        if not dev.simulated:
            lines.append(
                f"  util {_fmt(dev.utilization_gpu_percent, ' %')} (memory {_fmt(dev.utilization_memory_percent, ' %')})"
                f"  temp {_fmt(dev.temperature_c, ' C')}"
                f"  power {_fmt(dev.power_draw_w, ' W')} / {_fmt(dev.power_limit_w, ' W')}"
            )
        if dev.processes_status not in ("ok", "simulated"):
            lines.append(f"  processes: {dev.processes_status}")
        if not dev.processes:
            lines.append("  processes: none")
        else:
            lines.append(f"  processes ({len(dev.processes)}):")
            for p in dev.processes:
                ours = "  <- ours" if p.is_ours else ""
                lines.append(
                    f"    pid {_fmt(p.pid):>8}  {_fmt(p.name):<36} {_fmt(p.used_memory_mib, ' MiB'):>10}  "
                    f"{p.kind.value}{ours}"
                )
    lines.append("")
    h = snap.host
    lines.append(f"Host RAM: {_fmt(h.ram_available_mib, ' MiB')} available of {_fmt(h.ram_total_mib, ' MiB')}")
    if snap.server is not None:
        s = snap.server
        state = f"RSS {_fmt(s.rss_mib, ' MiB')}" if s.alive else "not running"
        lines.append(f"Server pid {s.pid} ({_fmt(s.name)}): {state}")
    for w in snap.warnings:
        lines.append(f"warning: {w}")
    if not snap.devices and snap.source is not Source.SIMULATED:
        lines += ["", *simulated_choices()]
    return "\n".join(lines)


def simulated_choices() -> list[str]:
    """What `--simulate` takes, for a machine with no GPU to list: every profile of the one table
    (`gpu.profiles.PROFILES`) with its description, and the size lists."""
    width = max(len(k) for k in PROFILES)
    return ["Simulated hardware instead: --simulate PROFILE here and for sweep and probe, --gpus PROFILE for plan, "
            "variants, tune and the TUI; PROFILE is one of:",
            *(f"  {k:<{width}}  {p.description}" for k, p in PROFILES.items()),
            "  or sizes, e.g. 2x16GiB or 6GiB,24GiB"]


def _source(args: argparse.Namespace) -> TelemetrySource:
    if args.simulate:
        return SimulatedGpus(args.simulate, _parse_alloc(args.alloc) or None)
    return Nvml()


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except BrokenPipeError:
        # `mtp-tune gpus | head`: the reader left; not an error. Silence the final flush too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _run(args: argparse.Namespace) -> int:
    if args.alloc and not args.simulate:
        return fail("--alloc only applies with --simulate PROFILE (real devices report what they use)")
    if args.interval <= 0:
        return fail(f"--interval must be a positive number of seconds, got {args.interval}")
    if args.count < 0:
        return fail(f"--count must be 0 (no limit) or more, got {args.count}")
    try:
        source = _source(args)
    except ValueError as exc:
        return fail(str(exc).replace("--gpus:", "--simulate:"))
    server = ServerView(pid=args.server_pid[0], extra_pids=frozenset(args.server_pid[1:])) if args.server_pid else None
    sampler = GpuSampler(source, interval_s=args.interval, server=server)
    if not args.watch:
        _emit(sampler.sample_now(), args.json, clear=False)
        return 0
    return _watch(sampler, args)


def _emit(snap: GpuSnapshot, as_json: bool, *, clear: bool, watch: bool = False) -> None:
    if as_json:
        if watch:
            sys.stdout.write(json.dumps(snap.to_dict(), default=str) + "\n")
        else:
            print_json(snap.to_dict())
    else:
        if clear:
            sys.stdout.write("\x1b[H\x1b[J")
        elif watch and snap.seq > 1:
            sys.stdout.write("\n" + "-" * 72 + "\n")
        sys.stdout.write(format_snapshot(snap) + "\n")
    sys.stdout.flush()


def _watch(sampler: GpuSampler, args: argparse.Namespace) -> int:
    frames: queue.Queue[GpuSnapshot] = queue.Queue()
    unsubscribe: Callable[[], None] = sampler.subscribe(frames.put)
    clear = not args.json and sys.stdout.isatty()
    shown = 0
    sampler.start()
    try:
        while args.count == 0 or shown < args.count:
            try:
                snap = frames.get(timeout=args.interval + 30.0)
            except queue.Empty:
                return fail("the sampler produced no sample for 30 s (NVML is hanging?); stopping", 1)
            _emit(snap, args.json, clear=clear, watch=True)
            shown += 1
    except KeyboardInterrupt:
        pass
    finally:
        unsubscribe()
        sampler.stop()
    return 0
