"""Benchmark the GPU telemetry: one sampling pass on the fake pynvml, and the sampler's CPU use at 1 Hz.

Targets (issue 6): a pass costs < 5 ms on the fake; the sampler adds < 1 % of one core at 1 Hz.
Appends its results, with the date and the command, to bench/RESULTS.md under "## GPU telemetry".

    .venv/bin/python bench/bench_gpu_sampler.py [--passes 2000] [--seconds 20] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import resource
import shlex
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _results import append_under  # noqa: E402

from tests.fakes.fake_gpus import FakeProcess, gpu  # noqa: E402
from tests.fakes.fake_pynvml import FakeNvml  # noqa: E402
from tui.core.gpu import GpuSampler, GpuSnapshot, Nvml, ServerView, collect_snapshot  # noqa: E402

HEADING = "## GPU telemetry"
RESULTS = ROOT / "bench" / "RESULTS.md"


def machine(devices: int, procs_per_device: int) -> FakeNvml:
    gpus = []
    for i in range(devices):
        procs = [FakeProcess(10_000 + i * 100 + j, 500 + j, "llama-server" if j == 0 else None) for j in range(procs_per_device)]
        gpus.append(gpu(i, compute=procs[: max(1, procs_per_device - 1)], graphics=procs[max(1, procs_per_device - 1):]))
    return FakeNvml(gpus)


def pass_cost(devices: int, procs: int, passes: int) -> dict[str, float]:
    """Milliseconds per full pass (NVML read + /proc host RAM + server RSS + warnings)."""
    fake = machine(devices, procs)
    nvml = Nvml(fake.module, register_atexit=False)
    server = ServerView(pid=10_000, model_buffers_mib={"CPU_Mapped": 515.0, "CUDA0": 17904.0})
    for _ in range(20):  # warm-up: init, caches
        collect_snapshot(nvml, server=server)
    wall: list[float] = []
    cpu: list[float] = []  # thread CPU time: not inflated when a busy machine preempts us
    for _ in range(passes):
        c0, t0 = time.thread_time(), time.perf_counter()
        collect_snapshot(nvml, server=server)
        wall.append((time.perf_counter() - t0) * 1000.0)
        cpu.append((time.thread_time() - c0) * 1000.0)
    wall.sort()
    cpu.sort()

    def p(xs: list[float], q: float) -> float:
        return xs[min(len(xs) - 1, int(len(xs) * q))]

    return {
        "mean": statistics.fmean(wall),
        "p50": p(wall, 0.50),
        "p95": p(wall, 0.95),
        "max": wall[-1],
        "cpu_mean": statistics.fmean(cpu),
        "cpu_p95": p(cpu, 0.95),
    }


def sampler_cpu(seconds: float) -> dict[str, float]:
    """CPU used by the sampler thread (thread_time) and the whole process while it polls at 1 Hz."""
    fake = machine(2, 3)
    sampler = GpuSampler(Nvml(fake.module, register_atexit=False), interval_s=1.0, server=ServerView(pid=10_000))
    thread_cpu: list[float] = []

    def on_snapshot(_: GpuSnapshot) -> None:
        thread_cpu.append(time.thread_time())  # cumulative CPU of the sampler thread itself

    sampler.subscribe(on_snapshot)
    rusage0 = resource.getrusage(resource.RUSAGE_SELF)
    proc0, wall0 = time.process_time(), time.monotonic()
    sampler.start()
    threading.Event().wait(seconds)  # the main thread idles, like a UI waiting for input
    sampler.stop()
    wall = time.monotonic() - wall0
    proc = time.process_time() - proc0
    rusage1 = resource.getrusage(resource.RUSAGE_SELF)
    ru = (rusage1.ru_utime - rusage0.ru_utime) + (rusage1.ru_stime - rusage0.ru_stime)
    thread = thread_cpu[-1] if thread_cpu else 0.0
    return {
        "wall_s": wall,
        "passes": float(len(thread_cpu)),
        "thread_cpu_s": thread,
        "thread_pct": 100.0 * thread / wall,
        "process_cpu_s": proc,
        "process_pct": 100.0 * proc / wall,
        "rusage_pct": 100.0 * ru / wall,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=2000, help="timed passes per scenario (default 2000)")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long to run the sampler at 1 Hz (default 20)")
    ap.add_argument("--no-write", action="store_true", help=f"print only, do not append to {RESULTS.name}")
    args = ap.parse_args()
    load_at_start = os.getloadavg()[0]

    rows = []
    for devices, procs in ((1, 2), (2, 3), (8, 4)):
        c = pass_cost(devices, procs, args.passes)
        rows.append(
            f"| {devices} | {procs} | {c['mean']:.3f} | {c['p50']:.3f} | {c['p95']:.3f} | {c['max']:.3f} "
            f"| {c['cpu_mean']:.3f} | {c['cpu_p95']:.3f} |"
        )
        print(
            f"pass cost, {devices} device(s) x {procs} processes: wall mean {c['mean']:.3f} ms, p95 {c['p95']:.3f} ms; "
            f"CPU mean {c['cpu_mean']:.3f} ms, p95 {c['cpu_p95']:.3f} ms"
        )
    cpu = sampler_cpu(args.seconds)
    print(
        f"sampler at 1 Hz for {cpu['wall_s']:.1f} s ({cpu['passes']:.0f} passes): thread {cpu['thread_pct']:.4f} %, "
        f"process {cpu['process_pct']:.4f} % of one core"
    )
    command = "python " + " ".join(shlex.quote(a) for a in [str(Path(sys.argv[0]).relative_to(ROOT) if Path(sys.argv[0]).is_absolute() else sys.argv[0]), *sys.argv[1:]])
    text = (
        f"### {dt.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}\n\n"
        f"Command: `{command}`  \n"
        f"Machine: {platform.machine()}, Python {platform.python_version()}, {platform.system()} {platform.release()}; "
        "fake pynvml (tests/fakes/fake_pynvml.py), so this is mtp-tune's own cost, not the driver's.\n\n"
        f"Load average at start: {load_at_start:.2f} on {os.cpu_count()} CPUs (wall times include preemption by "
        "other work; CPU = the pass's own thread time).\n\n"
        f"One sampling pass (NVML read + host RAM + server RSS + warnings), {args.passes} passes each, ms:\n\n"
        "| devices | processes/device | wall mean | wall p50 | wall p95 | wall max | CPU mean | CPU p95 |\n"
        "|---|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n\n"
        f"Sampler at 1 Hz for {cpu['wall_s']:.1f} s ({cpu['passes']:.0f} passes, 2 devices x 3 processes): "
        f"sampler thread {cpu['thread_cpu_s'] * 1000:.1f} ms CPU = **{cpu['thread_pct']:.4f} % of one core**; "
        f"whole process {cpu['process_pct']:.4f} % (time.process_time), {cpu['rusage_pct']:.4f} % (getrusage). "
        "Targets: pass < 5 ms, sampler < 1 % of one core.\n"
    )
    if not args.no_write:
        append_under(HEADING, text)
        print(f"appended to {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
