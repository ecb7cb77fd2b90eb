"""Hygiene guards: the conditions that make a measurement lie, each turned into a warning stored with the run.

The community rules these encode (see the project notes): `--parallel 1`; generations of at least 400
tokens (MTP's gain grows with length); medians of at least 3 repeats; no other process on the GPU; no
weights spilled to host memory while /health stays green; PP probes that really re-process the prompt;
and, when comparing, a spread smaller than the difference being judged.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tui.core.probes.records import RequestRecord

MIN_GENERATION = 400
MIN_REPEATS = 3

# Warning codes (stable: the UI and the tests key on them).
PARALLEL = "parallel"
SHORT_GENERATION = "short_generation"
GPU_OTHER_PROCESSES = "gpu_other_processes"
HOST_SPILL = "host_spill"
PP_CACHE_HIT = "pp_cache_hit"
FEW_REPEATS = "few_repeats"
SPREAD_EXCEEDS_DIFFERENCE = "spread_exceeds_difference"
METRICS_UNAVAILABLE = "metrics_unavailable"
FAILED_REQUESTS = "failed_requests"
HOST_BUSY = "host_busy"
GPU_THROTTLED = "gpu_throttled"


@dataclass(frozen=True)
class ProbeWarning:
    """One hygiene problem. `severity`: "warn" (numbers are suspect) or "info" (context)."""

    code: str
    message: str
    severity: str = "warn"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ProbeWarning:
        return cls(str(d["code"]), str(d["message"]), str(d.get("severity", "warn")))


def dedupe(warnings: Iterable[ProbeWarning]) -> list[ProbeWarning]:
    """Keep the first of identical (code, message) pairs, in order."""
    seen: dict[tuple[str, str], ProbeWarning] = {}
    for w in warnings:
        seen.setdefault((w.code, w.message), w)
    return list(seen.values())


def check_parallel(total_slots: int | None, configured: int | None = None, concurrency: int = 1) -> list[ProbeWarning]:
    """-np must be the concurrency probed (1 by default): speculative decoding is measured single-stream
    unless a concurrency is asked for, and auto -np means 4 slots."""
    n = total_slots if total_slots is not None else configured
    if n is None:
        return [ProbeWarning(PARALLEL, f"the number of server slots is unknown (no /props); run llama-server with -np {concurrency}", "info")]
    if n > concurrency:
        probed = "single-stream" if concurrency == 1 else f"at concurrency {concurrency}"
        return [
            ProbeWarning(
                PARALLEL,
                f"the server has {n} slots (-np {n}); speculative decoding is measured {probed}, and "
                f"extra slots multiply the recurrent state and KV. Restart it with -np {concurrency}.",
            )
        ]
    return []


def check_generation_length(requests: Sequence[RequestRecord], min_tokens: int = MIN_GENERATION) -> list[ProbeWarning]:
    """TG prompts that generated fewer than `min_tokens` tokens hide (or invert) MTP's gain."""
    short = [r for r in requests if r.ok and r.kind == "tg" and (r.predicted_n or 0) < min_tokens]
    tg = [r for r in requests if r.ok and r.kind == "tg"]
    if not short:
        return []
    names = sorted({r.prompt for r in short})
    shortest = min(r.predicted_n or 0 for r in short)
    return [
        ProbeWarning(
            SHORT_GENERATION,
            f"{len(short)} of {len(tg)} generations were shorter than {min_tokens} tokens (shortest {shortest}; "
            f"prompts: {', '.join(names[:5])}{'...' if len(names) > 5 else ''}). MTP's gain grows with "
            f"length; use --n-predict >= {min_tokens} (and prompts that ask for long answers).",
        )
    ]


def check_cache(requests: Sequence[RequestRecord]) -> list[ProbeWarning]:
    """Every probe is sent with cache_prompt false: any reuse (cache_n > 0, or a repeat that processed
    fewer prompt tokens than the first) means the PP number is not a PP measurement."""
    out: list[ProbeWarning] = []
    hits = [r for r in requests if r.ok and (r.cache_n or 0) > 0]
    if hits:
        pp_hits = [r for r in hits if r.kind == "pp"]
        which = "PP probe" if pp_hits else "probe"
        out.append(
            ProbeWarning(
                PP_CACHE_HIT,
                f"{len(hits)} {which} request(s) reused cached prompt tokens (cache_n up to "
                f"{max(r.cache_n or 0 for r in hits)}) although cache_prompt was false; their prompt speed is "
                "not a real PP measurement. Restart the server with --cache-ram 0 --no-cache-prompt.",
            )
        )
    by_prompt: dict[str, list[int]] = defaultdict(list)
    for r in requests:
        if r.ok and r.prompt_n is not None:
            by_prompt[r.prompt].append(r.prompt_n)
    shrunk = [name for name, ns in by_prompt.items() if len(set(ns)) > 1 and min(ns) < max(ns)]
    if shrunk:
        out.append(
            ProbeWarning(
                PP_CACHE_HIT,
                f"the number of processed prompt tokens changed between repeats of {', '.join(shrunk[:5])}: part of "
                "the prompt was reused, so those PP numbers are not comparable.",
            )
        )
    return out


def check_repeats(repeat: int) -> list[ProbeWarning]:
    if repeat < MIN_REPEATS:
        return [
            ProbeWarning(
                FEW_REPEATS,
                f"only {repeat} repeat(s): the spread cannot be measured well, and comparisons with this run "
                f"will be called inconclusive. Use --repeat {MIN_REPEATS} or more.",
            )
        ]
    return []


def check_failures(requests: Sequence[RequestRecord]) -> list[ProbeWarning]:
    bad = [r for r in requests if not r.ok]
    if not bad:
        return []
    first = bad[0]
    return [
        ProbeWarning(
            FAILED_REQUESTS,
            f"{len(bad)} of {len(requests)} requests failed (first: {first.prompt}, pass {first.repeat + 1}: "
            f"{first.error}); the summary uses the successful ones only.",
        )
    ]


def check_metrics(requests: Sequence[RequestRecord], metrics_error: str | None) -> list[ProbeWarning]:
    if metrics_error is None:
        return []
    return [
        ProbeWarning(
            METRICS_UNAVAILABLE,
            f"/metrics is unavailable ({metrics_error}), so verification steps, the mean acceptance length "
            "and the acceptance by draft position are unknown; start llama-server with --metrics.",
            "info",
        )
    ]


def check_requests(
    requests: Sequence[RequestRecord],
    *,
    repeat: int,
    total_slots: int | None,
    configured_parallel: int | None = None,
    concurrency: int = 1,
    metrics_error: str | None = None,
    min_generation: int = MIN_GENERATION,
) -> list[ProbeWarning]:
    """All checks that need only the run's own data."""
    return dedupe(
        check_parallel(total_slots, configured_parallel, concurrency)
        + check_repeats(repeat)
        + check_generation_length(requests, min_generation)
        + check_cache(requests)
        + check_failures(requests)
        + check_metrics(requests, metrics_error)
    )


# ---- environment: GPUs and memory ------------------------------------------------------------


def check_gpu_snapshot(snapshot: Any) -> list[ProbeWarning]:
    """Other processes on the GPUs, throttled clocks and weights in host memory, from a
    `tui.core.gpu.GpuSnapshot`."""
    if snapshot is None:
        return []
    from tui.core.gpu.collect import clock_warnings, other_process_warnings

    out = []
    if not getattr(snapshot, "simulated", False):
        devices = tuple(getattr(snapshot, "devices", ()))
        out += [ProbeWarning(GPU_OTHER_PROCESSES, msg) for msg in other_process_warnings(devices)]
        out += [ProbeWarning(GPU_THROTTLED, msg) for msg in clock_warnings(devices)]
    spill = getattr(snapshot, "spill", None)
    if spill is not None:
        out.append(ProbeWarning(HOST_SPILL, spill.message))
    return out


def check_memory_report(report: Any, expected_host_mib: float | None = None) -> list[ProbeWarning]:
    """Weights spilled to host memory, from the launch log's memory report (a MemoryReport or its dict)."""
    if report is None:
        return []
    from tui.core.gpu.host import spill_warning

    if isinstance(report, Mapping):
        buffers = report.get("weights_buffers") or {}
        offloaded = report.get("offloaded")
    else:
        buffers = getattr(report, "weights", {}) or {}
        offloaded = getattr(report, "offloaded", None)
    if not buffers:
        return []
    spill = spill_warning(
        dict(buffers), layers_offloaded=tuple(offloaded) if offloaded else None, expected_host_mib=expected_host_mib
    )
    return [ProbeWarning(HOST_SPILL, spill.message)] if spill else []


def check_host_load(load1: float | None, n_cpus: int | None) -> list[ProbeWarning]:
    """A host busier than its CPU count: other work competes with the server's threads (and, on a
    GPU, with the thread that feeds it), so speeds come out low and noisy."""
    if load1 is None or not n_cpus or load1 <= n_cpus:
        return []
    return [
        ProbeWarning(
            HOST_BUSY,
            f"the host was busy during the run (load average {load1:.1f} on {n_cpus} CPUs): other processes "
            "compete with llama-server for the CPU, so these speeds are lower and noisier than on an idle "
            "machine. Repeat the probe when the machine is quiet.",
        )
    ]


# ---- comparisons ------------------------------------------------------------------------------


def check_comparison(metric: str, verdict: Any) -> list[ProbeWarning]:
    """A comparison whose measured spread is larger than the difference it judges."""
    rel = getattr(verdict, "rel_change", None)
    noise = getattr(verdict, "noise", None)
    if rel is None or noise is None or noise == 0:
        return []
    if noise > abs(rel):
        return [
            ProbeWarning(
                SPREAD_EXCEEDS_DIFFERENCE,
                f"{metric}: the spread ({noise:.1%}) is larger than the difference being judged ({rel:+.1%}); "
                "this pair cannot tell the two apart. More repeats or longer generations may help.",
            )
        ]
    return []
