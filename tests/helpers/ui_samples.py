"""Fixed, deterministic screen contents for snapshot tests and for screenshots when no demo runs.

Numbers are realistic for a 6 GB laptop GPU with a desktop session (see users.md): nothing here is
random or time-dependent, so snapshots only change when the UI does.
"""

from __future__ import annotations

import dataclasses

from tui.core.gpu.types import (
    NA, GpuDevice, GpuProcess, GpuSnapshot, HostMemory, ProcessKind, ProcessMemory, Source, Status,
)
from tui.core.options.settings import Settings
from tui.core.probes.draft_advice import advise, measured_cost
from tui.core.probes.positions import DraftPositions
from tui.ui.options import AppOptions, FixedScreen
from tui.ui.cockpit.views import (
    EXACT_LABEL, DevicePlan, PlanView, ProbeState, ProbeSummary, ReconcileRow, ServerStatus,
)
from tui.ui.runs.views import CompareRow, RunRow
from tui.ui.shared_views import ProbePoint

GPU_NAME = "NVIDIA GeForce RTX 3060 Laptop GPU"


def settings() -> Settings:
    return Settings(
        model="/models/Qwen3.5-9B-Q4_K_M.gguf", ctx_size=16384, ubatch_size=512, parallel=1,
        spec_type=["draft-mtp"], spec_draft_n_max=2, cache_type_k="q8_0", cache_type_v="q8_0",
        cache_type_k_draft="q8_0", cache_type_v_draft="q8_0", flash_attn="on", fit_target=[512],
    )


def snapshot(used_extra_mib: int = 0, foreign: bool = True) -> GpuSnapshot:
    processes = [GpuProcess(NA, "desktop/driver baseline (simulated)", 310, ProcessKind.SIMULATED)]
    if foreign:
        processes.append(GpuProcess(4242, "firefox", 182, ProcessKind.GRAPHICS))
    if used_extra_mib:
        processes.append(GpuProcess(31337, "llama-server", used_extra_mib, ProcessKind.COMPUTE, is_ours=True))
    used = sum(int(p.used_memory_mib) for p in processes)  # type: ignore[arg-type]
    dev = GpuDevice(
        index=0, name=GPU_NAME + " (simulated)", uuid="SIM-rtx3060-laptop-6g-0", pci_bus_id="SIM",
        memory_total_mib=6144, memory_used_mib=used, memory_free_mib=6144 - used,
        processes=tuple(processes), processes_status="simulated", simulated=True,
    )
    return GpuSnapshot(
        seq=1, taken_at=0.0, monotonic_s=0.0, sample_ms=0.2, source=Source.SIMULATED, status=Status.SIMULATED,
        message="Simulated hardware: profile rtx3060-laptop-6g (Laptop RTX 3060 6 GB with a desktop session)",
        devices=(dev,), host=HostMemory(31_828, 20_112),
        server=ProcessMemory(31337, "llama-server", 812.0) if used_extra_mib else None,
    )




def plan(ctx: int = 16384, risk: str | None = None) -> PlanView:
    """A plan whose KV grows with `ctx`, so tests can see the bars re-colour."""
    kv = 32.0 * ctx / 1024
    draft_kv = 4.0 * ctx / 1024
    weights, recurrent, compute, draft_compute, output = 4180.0, 50.25, 496.0, 120.0, 2.0
    needed = weights + kv + draft_kv + recurrent + compute + draft_compute + output
    total, in_use, margin = 6144.0, 492.0, 512.0
    free = total - in_use
    headroom = free - needed
    verdict = risk or ("oom" if headroom < 0 else "tight" if headroom < margin else "ok")
    dev = DevicePlan(
        name=GPU_NAME, total_mib=total, free_mib=free, weights_mib=weights, kv_mib=kv, draft_kv_mib=draft_kv,
        recurrent_mib=recurrent, compute_mib=compute, draft_compute_mib=draft_compute, output_mib=output,
        margin_mib=margin, needed_mib=needed, headroom_mib=headroom, risk=verdict,
    )
    host = DevicePlan(name="host", total_mib=31_828, free_mib=20_112, weights_mib=486.0, needed_mib=486.0 + 12.0)
    return PlanView(devices=(dev,), host=host, seq=1)


def exact_plan() -> PlanView:
    """The same plan after llama.cpp's dry run measured it (each device marked exact)."""
    p = plan()
    return dataclasses.replace(p, exact="exact", devices=tuple(dataclasses.replace(d, source=EXACT_LABEL) for d in p.devices),
                               host=dataclasses.replace(p.host, source=EXACT_LABEL) if p.host else None)


def server_idle() -> ServerStatus:
    return ServerStatus(state="stopped")


def server_ready() -> ServerStatus:
    return ServerStatus(
        state="ready", url="http://127.0.0.1:41877", pid=31337,
        log_tail=(
            "llama_context: n_ctx = 16384, n_ubatch = 512, flash_attn = enabled",
            "common_speculative_init: creating MTP draft context",
            "[spec] estimated memory usage of MTP context is 581.77 MiB",
            "main: model loaded",
            "main: server is listening on http://127.0.0.1:41877",
        ),
        reconcile=(
            ReconcileRow("CUDA0", "weights", 4180.0, 4178.9, 4178.9),
            ReconcileRow("CUDA0", "KV", 512.0, 512.0, 512.0),
            ReconcileRow("CUDA0", "compute", 616.0, 590.3, 590.25),
        ),
    )


def server_failed() -> ServerStatus:
    return ServerStatus(
        state="failed",
        failure=(
            "llama-server ran out of GPU memory on CUDA0 while allocating the MTP draft context's compute "
            "buffer (1296.00 MiB) at the first decode. Lower --ctx-size or --ubatch-size, use q8_0 for "
            "-ctkd/-ctvd, or raise --fit-target so --fit leaves room for the draft. "
            "Full server log: ~/.local/share/mtp-tune/logs/launch-0007.log"
        ),
        log_tail=(
            "common_speculative_init: creating MTP draft context",
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1296.00 MiB on device 0: cudaMalloc failed: out of memory",
            "graph_reserve: failed to allocate compute buffers",
            "common_init_from_params: failed to create MTP draft context",
            "main: exiting due to model loading error",
        ),
    )


def _points() -> tuple[ProbePoint, ...]:
    tg_on = (34.1, 35.8, 33.2, 31.9, 36.4, 30.8, 29.7, 35.1, 33.8, 34.4, 35.2, 33.0)
    acc = (0.81, 0.84, 0.77, 0.72, 0.86, 0.70, 0.66, 0.83, 0.79, 0.80, 0.83, 0.76)
    tg_off = (26.1, 26.3, 25.9, 26.0, 26.2, 26.1, 25.8, 26.0, 26.2, 26.1, 26.3, 25.9)
    pts = [ProbePoint("MTP n-max 2", i, tg, 143.0 + i % 3, a) for i, (tg, a) in enumerate(zip(tg_on, acc, strict=True))]
    pts += [ProbePoint("no MTP", i, tg, 436.0 + i % 4, None) for i, tg in enumerate(tg_off)]
    return tuple(pts)


def _positions() -> dict[str, object]:
    """The MTP row's acceptance by draft position and its advice, as the core makes them (cost measured
    against the MTP-off row beside it)."""
    pos = DraftPositions(1200, 2400, (1056, 816))
    adv = advise(pos, measured_cost(pos, 26.1, 34.0))
    assert adv is not None
    return {"positions": pos.shares, "advised_n_max": adv.best, "advice_headline": adv.headline, "advice": adv.text}


def probes_running() -> ProbeState:
    return ProbeState(
        running=True, done=20, total=27, message="tasks suite: stepwise_math, repeat 2 of 3 (MTP n-max 2)",
        points=_points(),
        summaries=(
            ProbeSummary("no MTP", 12, 26.1, 25.8, 26.3, 436.0, 431.2, 440.1, None),
            ProbeSummary("MTP n-max 2", 12, 34.0, 29.7, 36.4, 143.0, 141.9, 145.0, 0.78, **_positions()),
        ),
        verdict="TG +30 % with MTP (above the measured noise of 4 %); PP −67 %.",
        warnings=("generations shorter than 400 tokens understate MTP's gain (n_predict 192)",),
    )


def probes_at_once() -> ProbeState:
    """Both configurations probed 4 requests at once (`×4`): what the four got together and what each
    saw, the verdict led by the aggregate, and the bars from each pass's /metrics bracket."""
    pts = tuple(dataclasses.replace(p, config=f"{p.config} ×4", tg_tps=(p.tg_tps or 0.0) * 0.8) for p in _points())
    return ProbeState(
        done=48, total=48, message="ok: 48 request(s), run 9", points=pts,
        summaries=(
            ProbeSummary("no MTP ×4", 12, 20.9, 20.6, 21.0, 436.0, 431.2, 440.1, None, concurrency=4,
                         aggregate_tg=(80.2, 78.9, 81.0), request_tg=(20.9, 20.6, 21.0)),
            ProbeSummary("MTP n-max 2 ×4", 12, 27.2, 23.8, 29.1, 143.0, 141.9, 145.0, 0.78, **_positions(),
                         concurrency=4, aggregate_tg=(97.5, 90.3, 101.8), request_tg=(27.2, 23.8, 29.1)),
        ),
        verdict="MTP n-max 2 ×4 vs no MTP ×4: aggregate TG +21.6% better · TG +30.1% better · PP -67.2% worse",
    )


def runs() -> tuple[RunRow, ...]:
    return (
        RunRow(7, "2025-11-30 21:14", "MTP n-max 2 · ub 512 · ctkd q8_0", 34.0, 143.0, 0.78, 27),
        RunRow(6, "2025-11-30 21:02", "no MTP · ub 2048", 26.1, 436.0, None, 27),
        RunRow(5, "2025-11-30 20:41", "MTP n-max 3 · ub 512 · ctkd f16", 32.2, 141.0, 0.71, 27, warnings=1),
        RunRow(4, "2025-11-30 20:30", "MTP n-max 3 · ub 1024", None, None, None, 9, failed=True),
    )


def comparison() -> tuple[CompareRow, ...]:
    return (
        CompareRow("TG t/s (median)", "26.1 (25.8–26.3)", "34.0 (29.7–36.4)", "+30.3 %", "better"),
        CompareRow("PP t/s (median)", "436.0 (431.2–440.1)", "143.0 (141.9–145.0)", "−67.2 %", "worse"),
        CompareRow("acceptance", "—", "78 %", "", "n/a"),
        CompareRow("12k in / 800 out (s)", "58.2", "107.4", "+84.5 %", "worse"),
    )


def fixed(which: str) -> FixedScreen:
    """The fixed main states: idle with a plan, probes running, a failure explained, runs compared, a
    ready server with no probe run, probes run 4 requests at once."""
    if which == "idle":
        return FixedScreen(snapshot=snapshot(), plan=plan(), server=server_idle())
    if which == "probes":
        return FixedScreen(snapshot=snapshot(5400), plan=exact_plan(), server=server_ready(), probes=probes_running())
    if which == "probes-load":
        return FixedScreen(snapshot=snapshot(5400), plan=exact_plan(), server=server_ready(), probes=probes_at_once())
    if which == "ready":
        return FixedScreen(snapshot=snapshot(5400), plan=exact_plan(), server=server_ready())
    if which == "failure":
        return FixedScreen(snapshot=snapshot(), plan=plan(65536), server=server_failed())
    if which == "runs":
        return FixedScreen(snapshot=snapshot(), plan=plan(), server=server_idle(), runs=runs(),
                           comparison=comparison(), compared=(6, 7))
    raise KeyError(f"no fixed screen {which!r}; known: {', '.join(FIXED)}")


FIXED = ("idle", "probes", "failure", "runs", "ready", "probes-load")


def fixed_options(which: str, theme: str | None = None) -> AppOptions:
    """AppOptions for a fixed screen: simulated hardware, no blinking, nothing live."""
    return AppOptions(settings=settings(), simulate=True, fixed=fixed(which), theme=theme, cursor_blink=False,
                      title="mtp-tune · Qwen3.5-9B-Q4_K_M.gguf on rtx3060-laptop-6g (simulated)")
