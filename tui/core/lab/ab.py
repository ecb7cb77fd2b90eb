"""One A/B of any two sides, measured the way drift cannot decide it: passes interleaved A B A B.

The sides are two configurations, each with its own llama-server binary when it has one (two
llama.cpp builds): MTP off against on (`mtp_sides`: the same settings, only `--spec-type` differs;
the TUI's `a`, a tune's final step), or whatever `mtp-tune ab` read (`lab.sides`: profiles, preset
sections, pasted commands, the command's flags with changes). One engine for all of them: each pass
is a visit of the lab's trial loop (`lab.runner.Lab`, launching anew every visit, through the side's
launcher): the server launches with its side's settings (ready, then a first decode; never recorded
in the launch history, so quitting mid-A/B restores nothing), the suite is probed once, the run
recorded in the results store (a failed launch by the loop's one store write), and the server stops,
so slow drift (clocks, thermals, other load) hits both sides alike instead of favouring whichever ran
first. The verdict is `ranking.decide` over the passes, B judged against A; a UI recomputes it for
another workload with `AbVerdict.for_workload`.

`run_ab` blocks. Cancel by setting `cancel` from any thread: the probe abandons its in-flight
request within its 50 ms poll, the launch wait within 0.2 s, and the server is stopped.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tui.core.lab.candidate import Candidate
from tui.core.lab.events import EventFn, LabError, Progress, WorkSize, new_cancel, work_size
from tui.core.lab.launcher import DEFAULT_READY_TIMEOUT, Launcher, SupervisorLauncher, aim_first_decode, equipped
from tui.core.lab.ranking import AB, DEFAULT_WORKLOAD, AbVerdict, Pair, PassSample, decide
from tui.core.lab.runner import Attempt, Lab, Launched, Prober, Step, default_prober, samples_of
from tui.core.options.settings import Settings, effective_spec_types, settings_json
from tui.core.probes.run_types import RunConfig
from tui.core.probes.suites import Suite, SuiteError, get_suite

DEFAULT_PASSES = 3


@dataclass(frozen=True)
class AbSide:
    """One side of an A/B: the settings it launches, and its llama-server binary (None: the run's
    own launcher or `server_bin`)."""

    settings: Settings
    server_bin: Path | None = None


def with_mtp(settings: Settings, on: bool) -> Settings:
    """`settings` with draft-mtp switched on or off and every other field identical."""
    types = [t for t in effective_spec_types(settings.spec_type) if t != "draft-mtp"]
    return replace(settings, spec_type=(["draft-mtp"] + types) if on else types)


def mtp_sides(settings: Settings, off_settings: Settings | None = None) -> tuple[AbSide, AbSide]:
    """MTP off (A) and on (B) of `settings`. `off_settings`: the MTP-off side when it differs in more than
    `--spec-type` (a tune's best MTP-off configuration against its best)."""
    return AbSide(with_mtp(off_settings or settings, False)), AbSide(with_mtp(settings, True))


def ab_size(suite: Suite, passes: int, n_predict: int | None) -> WorkSize:
    """2 x `passes` launches, each probing every prompt of `suite` once (`n_predict`: the run's
    tokens for prompts that do not set their own, RunConfig's default when None)."""
    per = n_predict or RunConfig().n_predict
    return work_size(2 * passes, [p.n_predict or per for p in suite.prompts], 1)


def interleaved(passes: int, pair: Pair = AB) -> list[tuple[str, int]]:
    """A, B, A, B ...: `passes` of each side, by the pair's keys."""
    return [(side, i) for i in range(passes) for side in (pair.a, pair.b)]


def run_ab(
    a: AbSide,
    b: AbSide,
    suite: Suite | str,
    workload: tuple[int, int] = DEFAULT_WORKLOAD,
    passes: int = DEFAULT_PASSES,
    *,
    pair: Pair = AB,
    differs: Sequence[str] = (),
    launcher: Launcher | None = None,
    server_bin: str | Path | None = None,
    prober: Prober | None = None,
    on_event: EventFn | None = None,
    cancel: threading.Event | None = None,
    store: Any = "default",
    n_predict: int | None = None,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = DEFAULT_READY_TIMEOUT,
) -> AbVerdict:
    """Measure B against A with `passes` interleaved passes per side; the verdict for `workload`.

    `pair`: what the sides are called (`ranking.MTP` for MTP off/on); `differs`: what differs between
    them, in words, for the answer. A side without a binary of its own launches through `launcher`
    (the caller's) or one of `server_bin`; a side with one through a launcher of that binary.
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
    order = interleaved(passes, pair)
    sides = {pair.a: a, pair.b: b}
    prog = Progress(len(order), on_event)
    samples: list[PassSample] = []
    run_ids: list[int] = []
    status, error = "complete", None
    with contextlib.ExitStack() as stack:
        launchers, store = _launchers(stack, (a, b), launcher, server_bin, store, env=env, ready_timeout=ready_timeout)
        labs: dict[str, Lab] = {}
        for side, la in zip((pair.a, pair.b), launchers):
            aim_first_decode(la, suite.prompts[0])  # the suite's first prompt, as a sweep's check sends
            labs[side] = next((lab for lab in labs.values() if lab.launcher.inner is la), None) or \
                Lab(la, cancel=cancel, progress=prog, store=store, suite=suite.name)
        prog.emit("started", f"{pair.a_name} vs {pair.b_name}: {passes} passes each, interleaved ({len(order)} launches)")
        for n, (side, i) in enumerate(order):
            name, lab = pair.name(side), labs[side]
            title, which = f"A/B {ab_id} {name}:", f"pass {i + 1}/{passes}"
            label = f"{title} {which}"
            measure = _measure(lab.launcher.inner, prober, suite, prog, cancel, store, n_predict,
                               side=side, title=title, which=which, name=name)
            done = lab.trial(visit(side, name, i, passes, sides[side].settings),
                             Step(measure, passes=lambda at: 0 if at.runs else 1, record=lambda at: at, label=label,
                                  relaunch=True, recover=False, store_config={"ab": label}))
            lab.stop()  # every visit launches anew, so drift hits both sides alike
            if done is None:
                status = "cancelled"
                break
            run = done.run
            if run is not None and run.run_id is not None:
                run_ids.append(int(run.run_id))
            elif done.launched is not None and done.launched.run_id is not None:
                run_ids.append(done.launched.run_id)
            if done.status != "ok":
                if run is None:
                    status, error = "failed", f"{name} did not start: {done.reason}"
                    prog.emit("launch_failed", error, side=side)
                else:
                    status, error = "failed", f"{name} pass {i + 1}: {done.dead.explain() if done.dead else run.error}"
                break
            samples += _samples(run, side, i, n)
            prog.step()
            prog.emit("pass_done", f"{name} pass {i + 1}/{passes} done", side=side)
    result = decide(samples, workload, status=status, error=error, run_ids=run_ids, pair=pair, differs=differs,
                    settings={"a": settings_json(a.settings.redacted()), "b": settings_json(b.settings.redacted())})
    prog.emit("cancelled" if status == "cancelled" else "finished", result.answer)
    return result


def _launchers(stack: contextlib.ExitStack, sides: Sequence[AbSide], launcher: Launcher | None,
               server_bin: str | Path | None, store: Any, **kw: Any) -> tuple[list[Launcher], Any]:
    """Each side's launcher (`launcher.equipped`, let go of when `stack` closes) and the results store:
    the run's own for a side without a binary, one per other binary (two builds: two launchers)."""
    out: list[Launcher] = []
    by_bin: dict[str, Launcher] = {}
    shared: Launcher | None = None
    for side in sides:
        if side.server_bin is None:
            if shared is None:
                shared, store = stack.enter_context(equipped(launcher, server_bin, store, **kw))
            out.append(shared)
            continue
        key = str(side.server_bin)
        if key not in by_bin:
            by_bin[key], store = stack.enter_context(equipped(None, side.server_bin, store, **kw))
        out.append(by_bin[key])
    return out, store


def _measure(launcher: Launcher, prober: Prober, suite: Suite, prog: Progress, cancel: threading.Event, store: Any,
             n_predict: int | None, *, side: str, title: str, which: str, name: str) -> Any:
    """A visit's measurement: one pass of `suite` on the server up, its run labelled `title`, what the
    server runs (its supervisor's record, not what was asked) and `which` pass; its requests as progress."""

    def measure(up: Launched, a: Attempt, k: int) -> Any:
        rs = launcher.running_settings() if isinstance(launcher, SupervisorLauncher) else None  # a fake has none

        def progress(p: Any) -> None:
            done, total = int(getattr(p, "done", 0) or 0), int(getattr(p, "total", 0) or 0)
            prog.fraction = done / total if total else 0.0
            prog.emit("probe", f"{name} {which}: {done}/{total} requests", side=side, probe=p)

        return prober(up.out.url or "", suite, repeat=1, n_predict=n_predict,
                      label=f"{title} {rs.label()} {which}" if rs is not None else f"{title} {which}",
                      settings=rs.settings if rs is not None and rs.settings is not None else up.settings,
                      memory=up.out.memory, plan=None, cancel=cancel, progress=progress, sink=store)

    return measure


def visit(side: str, name: str, i: int, passes: int, settings: Settings) -> Candidate:
    """One visit of an A/B, a candidate of the lab's loop: a side's pass `i` (0-based), its own launch
    key (every visit launches anew anyway)."""
    key = f"{side} {i}"
    return Candidate(settings, key, key, f"{name} (pass {i + 1}/{passes})", side=side)


def _samples(run: Any, side: str, i: int, order: int) -> list[PassSample]:
    """The run's complete pass(es) as samples of this side (`runner.samples_of`)."""
    s, run_id = samples_of(run), int(run.run_id) if run.run_id is not None else None
    return [PassSample(side, i, order, pp, tg, acc, run_id) for pp, tg, acc in zip(s.pp_tps, s.tg_tps, s.acceptance)]
