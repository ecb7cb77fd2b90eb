"""Fixed, deterministic contents for the tune screen (`T`): pilot tests and snapshots without a server.

Built through the core and the adapter (real Trials, `build_result`, a decided AbVerdict and a
TuneOutcome), so the screen shows what the real code paths produce. Numbers are the 6 GB laptop
experiment's shape: MTP on/off x ubatch x draft KV with their fit-targets; MTP gains TG and loses PP,
ubatch 2048 with MTP does not fit, draft KV q4_0 is as good as q8_0 (so the cheaper one wins).
"""

from __future__ import annotations

from typing import Any

from tui.core.options.settings import Settings
from tui.core.lab.ranking import PassSample, RUNGS, decide
from tui.core.tune.space import build_space
from tui.core.lab.trial import Samples, Trial
from tui.core.tune.result import build_result
from tui.core.tune.run import TuneOutcome
from tui.core.tune.workload import shape
from tui.ui.lab import tune_ops as adapter
from tui.ui.lab.tune_screen import TuneScreen
from tui.ui.lab.tune_views import TuneSetup, TuneView

WORKLOAD = shape(1000, 800)
SETUP = TuneSetup(workload="1000:800", axes=(("mtp", "on,off"), ("ubatch", "512,1024,2048"), ("draft-kv", "q8_0,q4_0")))
EXACT = "exact (llama.cpp): CUDA0 needs {} MiB of 5652 MiB free (margin 512)"

#: number, mtp, ubatch, draft KV, stage, status, PP passes, TG passes, acceptance, fit-target, MiB, why
TRIALS: tuple[tuple[Any, ...], ...] = (
    (1, False, 512, None, "start", "ok", (436.0, 431.2, 440.1, 433.0), (26.1, 25.8, 26.3, 26.0), None, 256, 4731.0, ""),
    # one fast pass: its range overlaps #3's, so the cheaper ubatch ties the leader and wins
    (2, True, 512, "q8_0", "start", "ok", (143.0, 141.9, 165.0, 142.5), (34.1, 33.2, 35.4, 34.4), 0.78, 512, 5342.0, ""),
    (3, True, 1024, "q8_0", "walk ubatch", "ok", (171.0, 168.3, 172.4, 170.1), (34.6, 33.9, 35.2, 34.8), 0.79, 576,
     5610.0, ""),
    (4, True, 2048, "q8_0", "walk ubatch", "predicted_oom", (), (), None, None, 6150.0,
     "the planner predicts an OOM: " + EXACT.format(6150)),
    (5, True, 1024, "q4_0", "walk draft-kv", "ok", (170.4, 169.0, 171.8, 170.0), (34.5, 34.0, 35.1, 34.6), 0.79, 512,
     5488.0, ""),
    (6, False, 1024, None, "seeded from the other side's leader", "ok", (512.0, 508.8, 515.0, 510.2),
     (26.0, 25.9, 26.2, 26.1), None, 256, 4902.0, ""),
    (7, False, 2048, None, "walk ubatch", "eliminated", (540.0, 536.1), (25.1, 24.8), None, 320, 5240.0,
     "slower than #6: 1.9% slower (noise 1.2%)"),
    (8, True, 2048, "q4_0", "walk ubatch", "failed", (), (), None, 640, 5890.0,
     "out of memory at the first decode of the workload's longest prompt (cudaMalloc failed: out of memory)"),
)


def record(t: tuple[Any, ...]) -> Trial:
    n, mtp, ub, dkv, stage, status, pp, tg, acc, fit, mib, why = t
    values: dict[str, Any] = {"mtp": mtp, "ubatch": ub} | ({"draft-kv": dkv} if mtp else {})
    samples = None
    if pp:
        samples = Samples(list(pp), list(tg), [acc] * len(pp))
        samples.fill_e2e(WORKLOAD)
    risk = "oom" if status == "predicted_oom" else "tight" if mib > 5140 else "ok"
    return Trial(f"k{n}", status, number=n, memory_key=f"m{n}", values=values,
                 settings={"ubatch_size": ub, "spec_draft_n_max": 3 if mtp else None}, mtp=mtp, stage=stage,
                 reason=why or None, failure="oom_decode" if status == "failed" else None,
                 plan={"risk": risk, "message": EXACT.format(int(mib))}, vram_mib=mib, fit_target=fit, samples=samples,
                 launches=0 if status == "predicted_oom" else 1, seconds=41.0 if pp else 0.0)


def records(n: int | None = None) -> list[Trial]:
    return [record(t) for t in TRIALS[:n]]


def verdict() -> Any:
    """The final A/B of #2 (MTP on) against #1 (MTP off), three interleaved passes each."""
    off = ((435.0, 26.0), (432.2, 25.9), (438.1, 26.2))
    on = ((143.2, 34.4), (142.5, 34.1), (144.0, 34.9))
    samples = []
    for i in range(3):
        samples.append(PassSample("off", i, 2 * i, off[i][0], off[i][1], None, 20 + 2 * i))
        samples.append(PassSample("on", i, 2 * i + 1, on[i][0], on[i][1], (0.78, 0.77, 0.79)[i], 21 + 2 * i))
    return decide(samples, (1000, 800), settings=None, run_ids=list(range(20, 26)))


def outcome() -> TuneOutcome:
    recs = records()
    ab = verdict()
    res = build_result(recs, RUNGS, 9, 10, "converged", 1421.0, WORKLOAD, ab)  # as tune_run: the A/B decides on/off
    space = build_space(Settings(model="/models/Qwen3.5-9B-Q4_K_M.gguf", batch_size=2048), WORKLOAD, has_mtp=True,
                        values={"ubatch": (512, 1024, 2048), "draft-kv": ("q8_0", "q4_0")})
    return TuneOutcome("tune-1a2b3c4d5e6f", res, space, WORKLOAD, ab,
                       f"#{res.best_mtp_on.number} (MTP on) against #{res.best_mtp_off.number} (MTP off), 3 passes each",
                       15, 15, 1603.0, "rtx3060-laptop-6g", True, None, [])


def done_view() -> TuneView:
    return adapter.final_view(outcome(), budget_s=1800.0)


def running_view() -> TuneView:
    """Five trials done, the sixth launching, with the best so far and an ETA within a 30 m budget."""
    return adapter.tune_view(records(5), running=True, launches=6, grid_size=10, elapsed_s=917.0, eta_s=402.0,
                             budget_s=1800.0, message="launch 7: no MTP -ub 1024 -fitt 256",
                             workload="1000:800: 1000 prompt tokens and 800 generated per request on average, "
                                      "the longest 1800")


def push_tune(which: str = "done") -> Any:
    """A `run_before` for snap_compare: the tune screen with fixed trials on the fixed main screen."""
    view = done_view() if which == "done" else running_view()

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await app.push_screen(TuneScreen(app.lab, app.main.plan.settings, SETUP, fixed=view))
        await pilot.pause()

    return run_before
