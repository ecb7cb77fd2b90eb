"""Fixed, deterministic contents for the tuning screens (sweep, verdict, search): snapshot tests and
screenshots without a server. Built through the core and the adapter (a real SweepDefinition, journal
trials and AbVerdict), so the screens show what the real code paths produce.

Numbers are the 6 GB laptop experiment's shape: MTP gains TG and loses PP; ubatch 2048 with MTP is
predicted to run out of memory.
"""

from __future__ import annotations

from typing import Any

from tests.helpers import ui_samples
from tui.core.lab.journal import Journal
from tui.core.lab.trial import Samples, Trial
from tui.core.lab.ranking import PassSample, decide
from tui.ui.lab import experiments as tuning
from tui.ui.lab.sweep_screen import SweepScreen
from tui.ui.lab.verdict_screen import VerdictScreen
from tui.ui.lab.views import SweepSetup, SweepView, VerdictView
from tui.ui.shared_views import ProbePoint

SETUP = SweepSetup(axes=(("mtp", "on,off"), ("ub", "512,1024,2048")), suite="tasks", repeat=3)

#: (mtp, ub) -> (planned MiB, risk, TG passes, PP passes, acceptance)
ROWS: dict[tuple[str, int], tuple[float, str, tuple[float, ...], tuple[float, ...], float | None]] = {
    ("on", 512): (5342.0, "tight", (34.1, 33.2, 35.0), (143.0, 141.9, 145.0), 0.78),
    ("on", 1024): (5610.0, "tight", (34.6, 33.9, 35.2), (171.0, 168.3, 172.4), 0.79),
    ("on", 2048): (6150.0, "oom", (), (), None),
    ("off", 512): (4731.0, "ok", (26.1, 25.8, 26.3), (436.0, 431.2, 440.1), None),
    ("off", 1024): (4902.0, "ok", (26.0, 25.9, 26.2), (512.0, 508.8, 515.0), None),
    ("off", 2048): (5240.0, "tight", (25.9, 25.7, 26.2), (540.0, 536.1, 544.9), None),
}


def sweep_parts() -> tuple[Any, Journal, dict[str, Any]]:
    defn = tuning.definition(ui_samples.settings(), SETUP)
    state = Journal("sweep", defn.sweep_id, defn.to_json())
    plans: dict[str, Any] = {}
    for c in defn.grid():
        mtp, ub = dict(c.texts)["mtp"], int(dict(c.texts)["ub"])
        mib, risk, tg, pp, acc = ROWS[(mtp, ub)]
        plans[c.launch_key] = (mib, risk, f"CUDA0 needs {mib:.0f} MiB of 5652 MiB free (margin 512)")
        if risk == "oom":
            state.record(Trial(c.key, "predicted_oom", reason=f"the planner predicts an OOM: CUDA0 needs {mib:.0f} "
                               "MiB of 5652 MiB free (use --try-anyway to launch it anyway)"))
        else:
            state.record(Trial(c.key, "ok", acceptance=acc, samples=Samples(list(pp), list(tg), [acc] * len(tg))))
    return defn, state, plans


def sweep_done() -> SweepView:
    defn, state, plans = sweep_parts()
    return tuning.sweep_view(defn, state, plans, elapsed_s=1421.0, message="sweep done")


def sweep_running() -> SweepView:
    """Four rows finished, the fifth measuring (its requests so far on the live plot), one to go."""
    defn, state, plans = sweep_parts()
    keys = [c.key for c in defn.grid()]
    for key in keys[4:]:
        state.trials.pop(key)
    tg = (25.8, 26.1, 26.0, 25.9, 26.2, 26.1, 25.7)
    points = tuple(ProbePoint("#5", i, v, 505.0 + 3 * (i % 3), None) for i, v in enumerate(tg))
    return tuning.sweep_view(defn, state, plans, running=True, current=5, points=points, done=4, total=6,
                             elapsed_s=917.0, eta_s=402.0, message="#5 mtp=off ub=1024: 7/9 requests")


#: The laptop's second workload: a 13k-token summary with a short answer (where MTP loses).
WORKLOAD = (13000, 200)


def verdict() -> Any:
    """MTP on vs off, three interleaved passes each: MTP gains TG, loses PP (judged for WORKLOAD)."""
    off = ((436.0, 26.1), (431.2, 25.8), (440.1, 26.3))
    on = ((143.0, 34.1), (141.9, 33.2), (145.0, 35.0))
    samples = []
    for i in range(3):
        samples.append(PassSample("off", i, 2 * i, off[i][0], off[i][1], None, 10 + 2 * i))
        samples.append(PassSample("on", i, 2 * i + 1, on[i][0], on[i][1], (0.78, 0.74, 0.81)[i], 11 + 2 * i))
    return decide(samples, WORKLOAD, settings=None, run_ids=[10, 11, 12, 13, 14, 15])


def verdict_view() -> VerdictView:
    return tuning.verdict_view(verdict(), done=6, total=6, message="MTP on vs off: complete")


def push_sweep(which: str = "done") -> Any:
    """A `run_before` for snap_compare: the sweep screen with fixed rows on the fixed main screen."""
    view = sweep_done() if which == "done" else sweep_running()

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await app.push_screen(SweepScreen(app.lab, app.main.plan.settings, SETUP, ("tasks", "long-prompt"), fixed=view))
        await pilot.pause()

    return run_before


def push_verdict() -> Any:
    async def run_before(pilot: Any) -> None:
        await pilot.app.push_screen(VerdictScreen(pilot.app.lab, fixed=verdict_view(), fixed_verdict=verdict()))
        await pilot.pause()

    return run_before
