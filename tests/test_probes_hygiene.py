"""Hygiene guards: each condition that makes a measurement lie becomes a warning with a fix."""

from __future__ import annotations

from typing import Any

from tui.core.gpu import GpuDevice, GpuProcess, GpuSnapshot, HostMemory, ProcessKind, Source, Status
from tui.core.server.memreport import MemoryReport
from tui.core.probes import hygiene
from tui.core.probes.hygiene import ProbeWarning, check_comparison, check_gpu_snapshot, check_memory_report, check_requests
from tui.core.probes.records import RequestRecord
from tui.core.probes.stats import summarize, verdict


def rec(seq: int, prompt: str = "p", *, kind: str = "tg", repeat: int = 0, predicted_n: int = 512,
        prompt_n: int = 100, cache_n: int = 0, error: str | None = None) -> RequestRecord:
    timings: dict[str, Any] | None = None if error else {
        "cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": 10.0, "predicted_n": predicted_n, "predicted_ms": 100.0,
        "prompt_per_second": 1000.0 * prompt_n / 10.0, "predicted_per_second": 1000.0 * (predicted_n - 1) / 100.0,
    }
    return RequestRecord(seq, prompt, kind, repeat, 512, timings=timings, error=error)


def codes(ws: list[ProbeWarning]) -> list[str]:
    return [w.code for w in ws]


def test_clean_run_has_no_warnings() -> None:
    reqs = [rec(i, f"p{i % 3}", repeat=i // 3) for i in range(9)]
    assert check_requests(reqs, repeat=3, total_slots=1) == []


def test_parallel_other_than_one() -> None:
    (w,) = check_requests([rec(0)], repeat=3, total_slots=4)
    assert w.code == hygiene.PARALLEL and "-np 4" in w.message and "-np 1" in w.message
    # The server's own /props wins over the configured value; unknown is only informational.
    assert codes(hygiene.check_parallel(None, 1)) == []
    assert hygiene.check_parallel(None, None)[0].severity == "info"


def test_short_generations() -> None:
    reqs = [rec(0, "a", predicted_n=512), rec(1, "b", predicted_n=87), rec(2, "c", kind="pp", predicted_n=32)]
    (w,) = check_requests(reqs, repeat=3, total_slots=1)
    assert w.code == hygiene.SHORT_GENERATION
    assert "1 of 2 generations" in w.message and "shortest 87" in w.message and "b" in w.message
    # The PP probe's short generation is by design and does not count.
    assert check_requests([rec(0, kind="pp", predicted_n=32)], repeat=3, total_slots=1) == []


def test_pp_probe_that_hit_the_cache() -> None:
    reqs = [rec(0, "doc", kind="pp", prompt_n=12000), rec(1, "doc", kind="pp", repeat=1, prompt_n=4, cache_n=11996)]
    ws = check_requests(reqs, repeat=3, total_slots=1)
    assert codes(ws) == [hygiene.PP_CACHE_HIT, hygiene.PP_CACHE_HIT]
    assert "PP probe request(s) reused cached prompt tokens (cache_n up to 11996)" in ws[0].message
    assert "changed between repeats of doc" in ws[1].message


def test_few_repeats() -> None:
    (w,) = check_requests([rec(0)], repeat=1, total_slots=1)
    assert w.code == hygiene.FEW_REPEATS and "--repeat 3" in w.message


def test_failed_requests_and_missing_metrics() -> None:
    reqs = [rec(0), rec(1, "q", error="HTTP 400: the request exceeds the available context size")]
    ws = check_requests(reqs, repeat=3, total_slots=1, metrics_error="HTTP 501: metrics not supported")
    assert codes(ws) == [hygiene.FAILED_REQUESTS, hygiene.METRICS_UNAVAILABLE]
    assert "exceeds the available context" in ws[0].message and "--metrics" in ws[1].message


def _snapshot(processes: tuple[GpuProcess, ...], source: Source = Source.NVML) -> GpuSnapshot:
    dev = GpuDevice(0, "NVIDIA GeForce RTX 3090", "GPU-1", "0000:01:00.0", 24576, 20000, 4576, processes=processes)
    return GpuSnapshot(0, 0.0, 0.0, 0.1, source, Status.OK, "ok", (dev,), HostMemory(64000, 32000))


def test_other_processes_on_the_gpu() -> None:
    ours = GpuProcess(4242, "llama-server", 18000, ProcessKind.COMPUTE, is_ours=True)
    other = GpuProcess(777, "python3", 2000, ProcessKind.COMPUTE)
    assert check_gpu_snapshot(_snapshot((ours,))) == []
    (w,) = check_gpu_snapshot(_snapshot((ours, other)))
    assert w.code == hygiene.GPU_OTHER_PROCESSES and "pid 777 python3 2000 MiB" in w.message
    assert check_gpu_snapshot(None) == []


def test_weights_spilled_to_host_memory_from_the_launch_log() -> None:
    rep = MemoryReport()
    rep.weights = {"CPU_Mapped": 9000.0, "CUDA0": 12000.0}
    rep.offloaded = (28, 41)
    (w,) = check_memory_report(rep)
    assert w.code == hygiene.HOST_SPILL and "only 28 of 41 layers" in w.message
    # All layers offloaded, only the embedding table on the host: no spill.
    rep.offloaded = (41, 41)
    rep.weights = {"CPU_Mapped": 300.0, "CUDA0": 17000.0}
    assert check_memory_report(rep) == []
    # CPU-only runs never warn; the dict form works too.
    assert check_memory_report({"weights_buffers": {"CPU_Mapped": 500.0}}) == []
    assert check_memory_report(None) == []


def test_spread_larger_than_the_difference() -> None:
    noisy = verdict(summarize([30.0, 36.0, 33.0]), summarize([34.0, 31.0, 37.0]))
    (w,) = check_comparison("TG", noisy)
    assert w.code == hygiene.SPREAD_EXCEEDS_DIFFERENCE and "TG" in w.message
    clear = verdict(summarize([30.0, 30.2, 30.1]), summarize([40.0, 40.1, 40.3]))
    assert check_comparison("TG", clear) == []


def test_warnings_round_trip_and_dedupe() -> None:
    w = ProbeWarning("x", "m", "info")
    assert ProbeWarning.from_json(w.to_json()) == w
    assert hygiene.dedupe([w, w, ProbeWarning("x", "n")]) == [w, ProbeWarning("x", "n")]


def test_busy_host() -> None:
    (w,) = hygiene.check_host_load(7.1, 2)
    assert w.code == hygiene.HOST_BUSY and "load average 7.1 on 2 CPUs" in w.message
    assert hygiene.check_host_load(1.5, 2) == [] and hygiene.check_host_load(None, 2) == []
