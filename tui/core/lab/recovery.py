"""The one recovery from a memory failure, for every experiment (sweep, tune, knob searches).

The policy:

* a memory failure on a GPU/RPC device where `--fit` can act (fit on, and the context or -ngl left
  for it to change) -> the smallest `--fit-target` search (`knob.search_knob`, climbing from the
  failing value, or from where fit's own projection says smaller values change nothing). A tune runs
  the same search before its first launch of each memory footprint, seeded with the nearest answer
  it already knows (`lab.knobs.smallest_fit_target`);
* a memory failure in host RAM, or where fit cannot act -> the largest `--ctx-size` search;
* a searched answer that then runs out of memory, relaunched or measured (right at the bound a
  launch can pass once and fail the next time: allocation order, threads) -> one step to the safe
  side (`FIT_STEP_MIB` up, or one context block down) and again, `RELAUNCH_TRIES` launches at most
  (`Recovery.relaunch`);
* anything else -> recorded (`failures`), never retried blindly.

Launches go through the experiment's own launcher (a `launcher.CountingLauncher` where the
experiment counts them), so every launch of a search is counted and paced like any other.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from tui.core.lab.failures import knob_outcome
from tui.core.lab.knob import (CTX_STEP, FIT_STEP_MIB, MIN_CTX, Knob, KnobFinding, KnobTry, ctx_start, fit_target_limit,
                               search_knob)
from tui.core.lab.launcher import LaunchOutcome, Launcher
from tui.core.options.settings import Settings
from tui.core.planning.resolve import DEFAULT_FIT_TARGET_MIB

#: Launches with a searched answer (or the next safer values) before giving up on it.
RELAUNCH_TRIES = 3

OnTry = Callable[[KnobTry], None]


def choose_knob(settings: Settings, failed: LaunchOutcome) -> Knob:
    """fit-target when fit can act on the failing memory (a GPU/RPC device, fit on, and something
    left for fit to change); otherwise the context size."""
    fit_on = settings.fit is not False
    fit_free = settings.ctx_size is None or settings.n_gpu_layers in (None, "auto")
    if failed.memory_on_device and fit_on and fit_free:
        return "fit_target"
    return "ctx_size"


def with_knob(settings: Settings, knob: Knob, value: int) -> Settings:
    """`settings` with one knob set (one fit-target for every device)."""
    return replace(settings, fit_target=[value]) if knob == "fit_target" else replace(settings, ctx_size=value)


def safer(knob: Knob, value: int, step: int) -> int:
    """One step to the safe side: more kept free by fit, or a smaller context."""
    return value + step if knob == "fit_target" else value - step


@dataclass
class Relaunched:
    """The last launch of `Recovery.relaunch`: its value, outcome and settings, and the launches spent."""

    value: int
    out: LaunchOutcome
    settings: Settings
    launches: int


class Recovery:
    """The memory-failure recovery of one experiment: `launcher` starts its servers, `cancel` stops a
    search between launches, `fit_step_mib` is the fit-target search's step."""

    def __init__(self, launcher: Launcher, cancel: threading.Event, fit_step_mib: int = FIT_STEP_MIB) -> None:
        self.launcher, self.cancel, self.fit_step_mib = launcher, cancel, fit_step_mib

    def step(self, knob: Knob) -> int:
        return self.fit_step_mib if knob == "fit_target" else CTX_STEP

    def relaunch(self, knob: Knob, settings: Settings, value: int, *, limit: int | None = None,
                 tries: int = RELAUNCH_TRIES, on_try: OnTry | None = None) -> Relaunched:
        """Launch with the knob at `value`; while that runs out of memory, step to the safe side and
        launch again, `tries` launches at most and never past `limit`. A failure the knob does not
        explain ends it at once. Each failed launch is reported to `on_try` ("relaunch: ...")."""
        step = self.step(knob)
        n = 0
        while True:
            s = with_knob(settings, knob, value)
            out = self.launcher.launch(s, self.cancel)
            n += 1
            if out.ok or out.cancelled:
                return Relaunched(value, out, s, n)
            outcome, detail = knob_outcome(knob, out)
            if on_try is not None:
                on_try(KnobTry(value, outcome, f"relaunch: {detail}", round(out.seconds, 3)))
            nxt = safer(knob, value, step)
            past = limit is not None and (nxt > limit if knob == "fit_target" else nxt < limit)
            if outcome != "oom" or n >= tries or past:
                return Relaunched(value, out, s, n)
            self.launcher.stop()
            value = nxt

    def search(self, settings: Settings, failed: LaunchOutcome, *,
               on_try: OnTry | None = None) -> tuple[KnobFinding, LaunchOutcome, Settings]:
        """Search the knob that fixes `failed`, then launch with the answer (`relaunch`). Returns the
        finding, the outcome with the answer (a running server when found) and the settings used."""
        knob = choose_knob(settings, failed)
        step = self.step(knob)
        if knob == "fit_target":
            origin = start = int(settings.fit_target[0]) if settings.fit_target else DEFAULT_FIT_TARGET_MIB
            # fit changes nothing while the target is at most the free memory left after its
            # projection ("no changes needed"), so every such value fails like the start: skip them.
            if failed.fit_headroom_mib is not None and failed.fit_headroom_mib > start:
                start += ((failed.fit_headroom_mib - start) // step) * step
            limit = fit_target_limit([int(dv.get("free_mib") or 0) for dv in failed.devices
                                      if "cpu" not in str(dv.get("name", "")).lower()])
            limit = start + ((limit - start) // step) * step
        else:
            n_ctx = None
            with contextlib.suppress(Exception):
                n_ctx = int((failed.memory or {}).get("target", {}).get("params", {}).get("n_ctx"))
            origin = start = ctx_start(settings.ctx_size, n_ctx)
            limit = MIN_CTX

        def trial(v: int) -> KnobTry:
            o = self.launcher.launch(with_knob(settings, knob, v), self.cancel)
            outcome, detail = knob_outcome(knob, o)
            self.launcher.stop()
            return KnobTry(v, outcome, detail, round(o.seconds, 3))

        first_jump = 1 if knob == "fit_target" else max(1, abs(start - limit) // step // 2)
        finding = search_knob(knob, trial, start=start, step=step, limit=limit, cause=failed.reason, cancel=self.cancel,
                              on_trial=on_try, first_jump=first_jump)
        finding.origin = origin
        if not finding.converged or finding.value is None or self.cancel.is_set():
            return finding, failed, settings

        def relaunch_try(t: KnobTry) -> None:
            finding.trials.append(t)
            if on_try is not None:
                on_try(t)

        r = self.relaunch(knob, settings, finding.value, limit=limit, on_try=relaunch_try)
        if r.out.ok or r.out.cancelled:
            if r.value != finding.value:
                finding.message += (f" {finding.flag} {finding.value} failed when launched again, so the row "
                                    f"uses {r.value} {finding.unit}, the first value that loaded again.")
                finding.value = r.value
            return finding, r.out, r.settings
        finding.converged = False
        finding.message += f" But launching again with {finding.flag} {r.value} failed: {r.out.reason}"
        return finding, r.out, r.settings

    def step_safer(self, finding: KnobFinding, settings: Settings, why: str) -> tuple[Settings, LaunchOutcome] | None:
        """The searched answer ran out of memory while measured (`why`): relaunch one step to the safe
        side, updating the finding. None when that is past the search's limit or does not launch."""
        knob: Knob = finding.knob
        value = safer(knob, int(finding.value or 0), finding.step)
        if (value > finding.limit) if knob == "fit_target" else (value < finding.limit):
            return None
        self.launcher.stop()
        finding.trials.append(KnobTry(int(finding.value or 0), "oom", f"the probe ran out of memory: {why[:160]}"))
        r = self.relaunch(knob, settings, value, tries=1)
        outcome, _ = knob_outcome(knob, r.out)
        finding.trials.append(KnobTry(value, "ok" if r.out.ok else outcome,
                                      "relaunch after the probe ran out of memory" if r.out.ok else f"relaunch: {r.out.reason}",
                                      round(r.out.seconds, 3)))
        if not r.out.ok:
            finding.converged = False
            finding.message += f" The probe ran out of memory at {finding.value} and {value} did not launch: {r.out.reason}"
            return None
        finding.message += (f" The probe ran out of memory at {finding.flag} {finding.value} ({why[:120]}), "
                            f"so the row uses {value} {finding.unit}.")
        finding.value = value
        return r.settings, r.out
