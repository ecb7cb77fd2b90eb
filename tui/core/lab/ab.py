"""MTP on vs off, measured the way drift cannot decide it: passes interleaved A B A B.

Both sides are the same settings and suite; only `--spec-type` differs (draft-mtp added, or
removed). Each pass is a visit of the lab's trial loop (`lab.runner.Lab`, launching anew every
visit): the server launches with its side's settings (ready, then a first decode; never recorded in
the launch history, so quitting mid-A/B restores nothing), the suite is probed once, the run recorded
in the results store (a failed launch by the loop's one store write), and the server stops, so slow
drift (clocks, thermals, other load) hits both sides alike instead of favouring whichever ran first.
The verdict is `ranking.decide` over the passes; a UI recomputes it for another workload with
`MtpVerdict.for_workload`.

`run_ab` blocks. Cancel by setting `cancel` from any thread: the probe abandons its in-flight
request within its 50 ms poll, the launch wait within 0.2 s, and the server is stopped.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tui.core.lab.launcher import DEFAULT_READY_TIMEOUT, Launcher, SupervisorLauncher, aim_first_decode, equipped
from tui.core.lab.candidate import Candidate
from tui.core.lab.runner import Attempt, Lab, Launched, Prober, Step, default_prober, samples_of
from tui.core.probes.run_types import RunConfig
from tui.core.probes.suites import Suite, SuiteError, get_suite
from tui.core.options.settings import Settings, effective_spec_types, settings_json
from tui.core.lab.events import EventFn, LabError, Progress, WorkSize, new_cancel, work_size
from tui.core.lab.ranking import DEFAULT_WORKLOAD, MtpVerdict, PassSample, Side, decide

DEFAULT_PASSES = 3


def with_mtp(settings: Settings, on: bool) -> Settings:
    """`settings` with draft-mtp switched on or off and every other field identical."""
    types = [t for t in effective_spec_types(settings.spec_type) if t != "draft-mtp"]
    return replace(settings, spec_type=(["draft-mtp"] + types) if on else types)


def ab_size(suite: Suite, passes: int, n_predict: int | None) -> WorkSize:
    """2 x `passes` launches, each probing every prompt of `suite` once (`n_predict`: the run's
    tokens for prompts that do not set their own, RunConfig's default when None)."""
    per = n_predict or RunConfig().n_predict
    return work_size(2 * passes, [p.n_predict or per for p in suite.prompts], 1)


def interleaved(passes: int) -> list[tuple[Side, int]]:
    """off, on, off, on ...: `passes` of each side."""
    return [(side, i) for i in range(passes) for side in ("off", "on")]  # type: ignore[misc]


def run_ab(
    settings: Settings,
    suite: Suite | str,
    workload: tuple[int, int] = DEFAULT_WORKLOAD,
    passes: int = DEFAULT_PASSES,
    *,
    launcher: Launcher | None = None,
    server_bin: str | Path | None = None,
    prober: Prober | None = None,
    on_event: EventFn | None = None,
    cancel: threading.Event | None = None,
    store: Any = "default",
    n_predict: int | None = None,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = DEFAULT_READY_TIMEOUT,
    off_settings: Settings | None = None,
) -> MtpVerdict:
    """Measure MTP on against off with `passes` interleaved passes per side; the verdict for `workload`.

    `off_settings`: the MTP-off side when it differs in more than `--spec-type` (a tune's best MTP-off
    configuration against its best); by default `settings` with draft-mtp removed.

    `store`: a results store, "default" (`data_dir()/results.sqlite`) or None (nothing recorded).
    A side that cannot launch (e.g. draft-mtp on a model without MTP layers) ends the run `failed`
    with the server's explanation; the verdict then has the passes done so far.
    """
    if passes < 1:
        raise LabError(f"passes must be at least 1, not {passes}")
    if isinstance(suite, str):
        try:
            suite = get_suite(suite)
        except SuiteError as e:
            raise LabError(str(e)) from None
    prober = prober or default_prober()
    cancel = new_cancel(cancel)
    ab_id = uuid.uuid4().hex[:6]  # ties the passes of one A/B together in the store
    order = interleaved(passes)
    prog = Progress(len(order), on_event)
    samples: list[PassSample] = []
    run_ids: list[int] = []
    status, error = "complete", None
    with equipped(launcher, server_bin, store, env=env, ready_timeout=ready_timeout) as (launcher, store):
        aim_first_decode(launcher, suite.prompts[0])  # the suite's first prompt, as a sweep's check sends
        lab = Lab(launcher, cancel=cancel, progress=prog, store=store, suite=suite.name)
        prog.emit("started", f"MTP on vs off: {passes} passes each, interleaved ({len(order)} launches)")
        for n, (side, i) in enumerate(order):
            launched = with_mtp(off_settings, False) if off_settings is not None and side == "off" else \
                with_mtp(settings, side == "on")
            v = visit(side, i, passes, launched)
            label = f"A/B {ab_id} MTP {side} pass {i + 1}/{passes}"

            def measure(up: Launched, a: Attempt, k: int, side: Side = side, i: int = i, label: str = label) -> Any:
                rs = launcher.running_settings() if isinstance(launcher, SupervisorLauncher) else None  # a fake has none
                if rs is not None:  # labelled from what the server runs, not from what was asked
                    label = f"A/B {ab_id} {rs.label()} pass {i + 1}/{passes}"

                def progress(p: Any) -> None:
                    done, total = int(getattr(p, "done", 0) or 0), int(getattr(p, "total", 0) or 0)
                    prog.fraction = done / total if total else 0.0
                    prog.emit("probe", f"MTP {side} pass {i + 1}: {done}/{total} requests", side=side, probe=p)

                return prober(up.out.url or "", suite, repeat=1, n_predict=n_predict, label=label,
                              settings=rs.settings if rs is not None and rs.settings is not None else up.settings,
                              memory=up.out.memory, plan=None, cancel=cancel, progress=progress, sink=store)

            a = lab.trial(v, Step(measure, passes=lambda a: 0 if a.runs else 1, record=lambda a: a,
                                  label=label, relaunch=True, recover=False, store_config={"ab": label}))
            lab.stop()  # every visit launches anew, so drift hits both sides alike
            if a is None:
                status = "cancelled"
                break
            run = a.run
            if run is not None and run.run_id is not None:
                run_ids.append(int(run.run_id))
            elif a.launched is not None and a.launched.run_id is not None:
                run_ids.append(a.launched.run_id)
            if a.status != "ok":
                if run is None:
                    status, error = "failed", f"MTP {side} did not start: {a.reason}"
                    prog.emit("launch_failed", error, side=side)
                else:
                    status, error = "failed", f"MTP {side} pass {i + 1}: {a.dead.explain() if a.dead else run.error}"
                break
            samples += _samples(run, side, i, n)
            prog.step()
            prog.emit("pass_done", f"MTP {side} pass {i + 1}/{passes} done", side=side)
    result = decide(samples, workload, status=status, error=error, settings=settings_json(settings.redacted()),
                    run_ids=run_ids)
    prog.emit("cancelled" if status == "cancelled" else "finished", result.answer)
    return result


def visit(side: Side, i: int, passes: int, settings: Settings) -> Candidate:
    """One visit of an A/B, a candidate of the lab's loop: a side's pass `i` (0-based), its own launch
    key (every visit launches anew anyway)."""
    key = f"{side} {i}"
    return Candidate(settings, key, key, f"MTP {side} (pass {i + 1}/{passes})", side=side)


def _samples(run: Any, side: Side, i: int, order: int) -> list[PassSample]:
    """The run's complete pass(es) as samples of this side (`runner.samples_of`)."""
    s, run_id = samples_of(run), int(run.run_id) if run.run_id is not None else None
    return [PassSample(side, i, order, pp, tg, acc, run_id) for pp, tg, acc in zip(s.pp_tps, s.tg_tps, s.acceptance)]
