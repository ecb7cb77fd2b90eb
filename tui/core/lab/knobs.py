"""Searches as actions: the largest context that fits, and the smallest `--fit-target` that survives.

Both answer a question a user otherwise settles by hand, one launch at a time:

* `largest_ctx`: plan first (a binary search over the context with the memory planner, instant),
  then confirm with a real launch that survives a first decode; if it does not, step down with the
  lab's knob search (`lab.knob.search_knob`: gallop, then bisect to one 256-cell block).
* `smallest_fit_target`: the smallest `--fit-target` (MiB `--fit` keeps free per device) that
  survives a first decode, to one 64 MiB step: what a laptop user does by hand. From a failing value
  the lab's recovery searches upward (`lab.recovery.Recovery`, as a sweep's row does); from a working
  value the knob search comes down from it, so the answer is the smallest working value either way.
  A tune seeds it with the answer of the nearest memory footprint it knows.

These are strategies only: every try is a launch-only trial of the lab's one loop (a `Step` with no
measurement), every outcome judged by `lab.failures.knob_outcome`.

Each returns a `SearchResult`: the input settings with the answer applied (what a UI offers as the
new setting) and the evidence (every trial with its outcome). Progress goes to `on_event`; setting
`cancel` stops between launches and aborts a launch in progress within 0.2 s.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.core.options.settings import Settings
from tui.core.planning.devices import DeviceSpec
from tui.core.planning.errors import PlanError
from tui.core.planning.gguf_meta import GGUFMeta
from tui.core.lab.candidate import Candidate
from tui.core.lab.failures import knob_outcome
from tui.core.lab.knob import FIT_STEP_MIB, KNOB_FLAGS, Knob, KnobFinding, KnobTry, search_knob
from tui.core.lab.launcher import LaunchOutcome, Launcher, equipped
from tui.core.lab.recovery import choose_knob, with_knob
from tui.core.lab.runner import Lab, Step
from tui.core.planning.largest_ctx import CTX_STEP, MIN_CTX, ctx_limit, plan_largest_ctx
from tui.core.planning.resolve import DEFAULT_FIT_TARGET_MIB
from tui.core.lab.events import EventFn, Progress, new_cancel


@dataclass
class SearchResult:
    """What a search found: `settings` is the input with `value` applied (None when nothing works)."""

    knob: Knob
    value: int | None
    settings: Settings | None
    message: str
    trials: list[KnobTry] = field(default_factory=list)  # every launch, in order, with its outcome
    finding: KnobFinding | None = None  # the knob search's own record, when one ran
    planned: int | None = None  # largest_ctx: the planner's answer before any launch
    plan_trials: list[tuple[int, str]] = field(default_factory=list)  # (ctx, risk) the planner was asked
    cancelled: bool = False

    @property
    def found(self) -> bool:
        return self.value is not None and self.settings is not None

    def to_json(self) -> dict[str, Any]:
        return {"knob": self.knob, "value": self.value, "message": self.message, "cancelled": self.cancelled,
                "planned": self.planned, "plan_trials": [list(t) for t in self.plan_trials],
                "trials": [t.to_json() for t in self.trials], "finding": self.finding.to_json() if self.finding else None}


def knob_value(knob: Knob, value: int, settings: Settings) -> Candidate:
    """One try of a knob search, a candidate of the lab's loop: `settings` with the knob at `value`."""
    key = f"{knob}={value}"
    return Candidate(settings, key, key, f"with {KNOB_FLAGS[knob]} {value}", ((knob, value),), knob=knob)


class _Run:
    """One search's launches with one knob changed: each a launch-only trial of the lab's loop
    (`lab.runner.Lab`, no measurement), every trial reported and recorded."""

    def __init__(self, knob: Knob, settings: Settings, launcher: Launcher, cancel: threading.Event, prog: Progress,
                 step: int = FIT_STEP_MIB) -> None:
        self.knob, self.settings, self.cancel, self.prog = knob, settings, cancel, prog
        self.lab = Lab(launcher, cancel=cancel, progress=prog, fit_step_mib=step)
        self.trials: list[KnobTry] = []

    def with_value(self, v: int) -> Settings:
        return with_knob(self.settings, self.knob, v)

    def record(self, t: KnobTry) -> None:
        self.trials.append(t)
        self.prog.step()
        self.prog.emit("trial", f"{KNOB_FLAGS[self.knob]} {t.value}: {t.outcome}" + (f" ({t.detail})" if t.detail else ""), trial=t)

    def trial(self, v: int) -> KnobTry:
        t, _ = self.outcome(v)
        self.lab.stop()
        return t

    def outcome(self, v: int) -> tuple[KnobTry, LaunchOutcome]:
        """One launch at `v`, kept running (stopped by the caller); for the recovery's start."""
        c = knob_value(self.knob, v, self.with_value(v))
        a = self.lab.trial(c, Step(None, lambda a: 0, lambda a: a, label=c.label, relaunch=True, recover=False))
        o = a.launched.out if a is not None and a.launched is not None else LaunchOutcome(False, cancelled=True)
        outcome, detail = knob_outcome(self.knob, o)
        t = KnobTry(v, outcome, detail, round(o.seconds, 3))
        self.record(t)
        return t, o


# --------------------------------------------------------------------------- largest context


def this_machine(settings: Settings, profile: str | None = None) -> tuple[list[DeviceSpec], float | None, float | None]:
    """(devices, host total, host free) to plan against now: a simulated profile's GPUs or the ones
    NVML sees, the `--rpc` servers that answer, and this machine's host memory (the one device list)."""
    from tui.core.planning.devices import devices_now

    ds = devices_now(profile, settings.rpc)
    return list(ds.devices), ds.host_total_mib, ds.host_free_mib


def largest_ctx(settings: Settings, devices: list[DeviceSpec] | None = None, *, meta: GGUFMeta | None = None,
                host_total_mib: float | None = None, host_free_mib: float | None = None, upper: int | None = None,
                launcher: Launcher | None = None, server_bin: str | Path | None = None,
                on_event: EventFn | None = None, cancel: threading.Event | None = None) -> SearchResult:
    """The largest `--ctx-size` that loads and survives a first decode: planned, then confirmed.

    `devices`/`host_*`: what the planner plans against (a `planning.devices.DeviceSet`'s; None:
    `this_machine`); `upper`: the largest context to consider (default: the
    model's training context).
    """
    if devices is None:
        devices, host_total_mib, host_free_mib = this_machine(settings)
    cancel = new_cancel(cancel)
    prog = Progress(0, on_event)
    if meta is None:
        from tui.core.planning.gguf_reader import read_gguf

        if not settings.model:
            return SearchResult("ctx_size", None, None, "the largest context needs a local model file (-m) to plan with.")
        meta = read_gguf(settings.model)
    try:
        planned, seen = plan_largest_ctx(meta, settings, devices, host_total_mib=host_total_mib,
                                         host_free_mib=host_free_mib, upper=upper)
    except PlanError as e:
        return SearchResult("ctx_size", None, None, str(e))
    prog.emit("plan", f"the planner fits a context of {planned} tokens ({len(seen)} plans)" if planned
              else "the planner predicts an OOM even at the smallest context")
    if planned is None:
        return SearchResult("ctx_size", None, None, f"the planner predicts an OOM even at --ctx-size {MIN_CTX}; "
                            "lower the micro-batch, quantize the KV cache or offload less.", plan_trials=seen)
    with equipped(launcher, server_bin) as (be, _):
        run = _Run("ctx_size", settings, be, cancel, prog)
        first = run.trial(planned)
        if first.outcome == "ok":
            capped = planned >= (upper or ctx_limit(meta, settings))  # the bound stopped it, not memory
            why = ("the model's training context: llama-server caps a slot there, so the search stops at it"
                   if capped else "planned")
            msg = f"largest --ctx-size: {planned} tokens ({why}; a launch survived a first decode)."
            return _done(run, planned, msg, None, planned, seen, prog)
        if first.outcome != "oom":
            return _done(run, None, f"--ctx-size {planned}: {first.detail or first.outcome}; the context does not "
                         "explain this failure, so the search stopped.", None, planned, seen, prog)
        finding = search_knob("ctx_size", run.trial, start=planned, step=CTX_STEP, limit=MIN_CTX, cause=first.detail,
                              cancel=cancel, max_trials=30)
        value = finding.value if finding.converged else None
        msg = (f"largest --ctx-size: {value} tokens (the planner said {planned}, which ran out of memory; "
               f"{finding.message})" if value is not None else finding.message)
        return _done(run, value, msg, finding, planned, seen, prog)


def _done(run: _Run, value: int | None, message: str, finding: KnobFinding | None, planned: int | None,
          seen: list[tuple[int, str]], prog: Progress) -> SearchResult:
    cancelled = run.cancel.is_set()
    if cancelled:
        value, message = None, "search cancelled."
    res = SearchResult(run.knob, value, run.with_value(value) if value is not None else None, message, list(run.trials),
                       finding, planned, seen, cancelled)
    prog.emit("cancelled" if cancelled else "finished", message)
    return res


# --------------------------------------------------------------------------- smallest fit-target


def smallest_fit_target(settings: Settings, *, launcher: Launcher | None = None, server_bin: str | Path | None = None,
                        step: int = FIT_STEP_MIB, floor: int = 0, on_event: EventFn | None = None,
                        cancel: threading.Event | None = None) -> SearchResult:
    """The smallest `--fit-target` (one value for every device) that survives a first decode."""
    cancel = new_cancel(cancel)
    prog = Progress(0, on_event)
    current = int(settings.fit_target[0]) if settings.fit_target else DEFAULT_FIT_TARGET_MIB
    with equipped(launcher, server_bin) as (be, _):
        run = _Run("fit_target", settings, be, cancel, prog, step)
        first, out = run.outcome(current)
        if first.outcome == "cancelled":
            return _done(run, None, "", None, None, [], prog)
        if first.outcome == "ok":
            be.stop()
            if current <= floor:
                return _done(run, current, f"smallest --fit-target: {current} MiB (the floor, and it works).", None,
                             None, [], prog)
            value, how = _search_down(run, current, floor, step)
            return _done(run, value, f"smallest --fit-target: {value} MiB ({how}).", None, None, [], prog)
        if first.outcome != "oom":
            return _done(run, None, f"--fit-target {current}: {first.detail or first.outcome}; fit-target does not "
                         "explain this failure.", None, None, [], prog)
        if choose_knob(settings, out) != "fit_target":
            return _done(run, None, "the allocation failed where --fit cannot help (host memory, --fit off, or both "
                         "the context and -ngl fixed); search the context instead.", None, None, [], prog)
        be.stop()
        finding, _, _ = run.lab.recovery.search(settings, out, on_try=run.record)
        be.stop()
        value = finding.value if finding.converged else None
        return _done(run, value, f"smallest --fit-target: {value} MiB ({finding.message})" if value is not None
                     else finding.message, finding, None, [], prog)


def _search_down(run: _Run, current: int, floor: int, step: int) -> tuple[int, str]:
    """From a working `current`, the smallest working value down to `floor`: the knob search run
    with the outcomes mirrored (a working value is what it steps past, the first failure is the
    bound), so it gallops down from the current value instead of climbing from the floor."""
    mirrored = {"ok": "oom", "oom": "ok"}

    def trial(v: int) -> KnobTry:
        t = run.trial(v)  # recorded with its real outcome
        return KnobTry(v, mirrored.get(t.outcome, t.outcome), t.detail, t.seconds)  # type: ignore[arg-type]

    f = search_knob("fit_target", trial, start=current, step=step, limit=floor, cancel=run.cancel)
    works = [t.value for t in run.trials if t.outcome == "ok"]
    if f.converged and f.value is not None:
        return f.value + step, f"{f.value} MiB fails; {len(run.trials)} launches"
    low = min(works) if works else current
    reached = current - ((current - floor) // step) * step
    if low == reached:
        return low, f"it works down to {reached} MiB, the lowest value tried; {len(run.trials)} launches"
    last = run.trials[-1] if run.trials else None
    why = f"--fit-target {last.value}: {last.detail or last.outcome}" if last else "no launch"
    return low, f"the search stopped ({why}); {low} MiB is the smallest value that worked"
