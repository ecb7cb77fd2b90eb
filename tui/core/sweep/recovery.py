"""Recovering a row from a memory allocation failure: choose the knob, search it, relaunch with the
answer, and step to the safe side when the probe still runs out of memory.

The search itself (bisection, bounds, convergence) is `search.py`; this module drives it with real
launches through the sweep's backend.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tui.core.options.lookup import default
from tui.core.options.settings import Settings
from tui.core.server.failures import FailureKind
from tui.core.sweep.backend import ALLOC_FAIL, Backend, LaunchOutcome
from tui.core.sweep.definition import Configuration
from tui.core.sweep.search import CTX_STEP, MIN_CTX, KnobFinding, Trial, ctx_start, fit_target_limit, search_knob

#: Launches with the search's answer (or the next safer values) before giving up on it.
RELAUNCH_TRIES = 3


class Recovery:
    """The memory-failure recovery of one sweep. `launch` counts and starts a server (the sweep's own),
    `emit(kind, **fields)` reports progress, `cancel` stops a search between trials."""

    def __init__(self, backend: Backend, launch: Callable[[Settings], LaunchOutcome], emit: Callable[..., None],
                 cancel: threading.Event, fit_step_mib: int) -> None:
        self.backend = backend
        self.launch = launch
        self.emit = emit
        self.cancel = cancel
        self.fit_step_mib = fit_step_mib

    def search(self, c: Configuration, settings: Settings, failed: LaunchOutcome) -> tuple[KnobFinding, LaunchOutcome, Settings]:
        """Search the knob that fixes `failed`; returns the finding, the outcome with the answer
        (a running server when found) and the settings used."""
        knob = choose_knob(settings, failed)
        step = self.fit_step_mib if knob == "fit_target" else CTX_STEP
        origin: int
        if knob == "fit_target":
            origin = start = int(settings.fit_target[0]) if settings.fit_target else int(default("--fit-target"))  # type: ignore[call-overload]
            # fit changes nothing while the target is at most the free memory left after its
            # projection ("no changes needed"), so every such value fails like the start: skip them.
            if failed.fit_headroom_mib is not None and failed.fit_headroom_mib > start:
                start += ((failed.fit_headroom_mib - start) // step) * step
            limit = fit_target_limit([int(dv.get("free_mib") or 0) for dv in failed.devices if "cpu" not in str(dv.get("name", "")).lower()])
            limit = start + ((limit - start) // step) * step
        else:
            n_ctx = None
            with contextlib.suppress(Exception):
                n_ctx = int((failed.memory or {}).get("target", {}).get("params", {}).get("n_ctx"))
            origin = start = ctx_start(settings.ctx_size, n_ctx)
            limit = MIN_CTX
        direction = 1 if knob == "fit_target" else -1

        def with_knob(v: int) -> Settings:
            return replace(settings, fit_target=[v]) if knob == "fit_target" else replace(settings, ctx_size=v)

        def trial(v: int) -> Trial:
            o = self.launch(with_knob(v))
            outcome, detail = judge(knob, o)
            self.backend.stop()
            return Trial(v, outcome, detail, round(o.seconds, 3))  # type: ignore[arg-type]

        def on_trial(t: Trial) -> None:
            self.emit("search_trial", row=c, trial=t, message=f"{knob.replace('_', '-')} {t.value}: {t.outcome}")

        first_jump = 1 if knob == "fit_target" else max(1, abs(start - limit) // step // 2)
        finding = search_knob(knob, trial, start=start, step=step, limit=limit, cause=failed.reason, cancel=self.cancel,
                              on_trial=on_trial, first_jump=first_jump)
        finding.origin = origin
        self.emit("search_done", row=c, message=finding.message)
        if not finding.converged or finding.value is None:
            return finding, failed, settings
        # Measure with the answer. Right at the bound a launch can pass once and fail the next time
        # (allocation order, threads); then step to the safe side, a few times at most.
        value = finding.value
        for _ in range(RELAUNCH_TRIES):
            final = with_knob(value)
            out = self.launch(final)
            if out.ok or out.cancelled:
                if value != finding.value:
                    finding.message += (f" {finding.flag} {finding.value} failed when launched again, so the row "
                                        f"uses {value} {finding.unit}, the first value that loaded again.")
                    finding.value = value
                return finding, out, final
            outcome, detail = judge(knob, out)
            t = Trial(value, outcome, f"relaunch: {detail}", round(out.seconds, 3))  # type: ignore[arg-type]
            finding.trials.append(t)
            on_trial(t)
            nxt = value + direction * step
            if outcome != "oom" or (direction > 0 and nxt > limit) or (direction < 0 and nxt < limit):
                break
            self.backend.stop()
            value = nxt
        finding.converged = False
        finding.message += f" But launching again with {finding.flag} {value} failed: {out.reason}"
        return finding, out, final

    def step_safer(self, finding: KnobFinding, settings: Settings, run: Any) -> tuple[Settings, LaunchOutcome] | None:
        """Relaunch one step to the safe side of `finding`; updates the finding. None if that fails."""
        direction = 1 if finding.knob == "fit_target" else -1
        value = int(finding.value or 0) + direction * finding.step
        if (direction > 0 and value > finding.limit) or (direction < 0 and value < finding.limit):
            return None
        self.backend.stop()
        finding.trials.append(Trial(int(finding.value or 0), "oom", f"the probe ran out of memory: {(run.error or '')[:160]}"))
        new = replace(settings, fit_target=[value]) if finding.knob == "fit_target" else replace(settings, ctx_size=value)
        out = self.launch(new)
        ok = out.ok
        finding.trials.append(Trial(value, "ok" if ok else "oom" if out.memory_failure else "failed",
                                    "relaunch after the probe ran out of memory" if ok else f"relaunch: {out.reason}",
                                    round(out.seconds, 3)))
        if not ok:
            finding.converged = False
            finding.message += f" The probe ran out of memory at {finding.value} and {value} did not launch: {out.reason}"
            return None
        finding.message += (f" The probe ran out of memory at {finding.flag} {finding.value} ({(run.error or '')[:120]}), "
                            f"so the row uses {value} {finding.unit}.")
        finding.value = value
        return new, out

    def probe_ran_out_of_memory(self, run: Any) -> bool:
        texts = [run.error or ""] + [getattr(r, "error", None) or "" for r in (run.requests or [])]
        if any(ALLOC_FAIL.search(t) for t in texts):
            return True
        f = self.backend.failure()
        return f is not None and f.kind in (FailureKind.OOM_DEVICE, FailureKind.OOM_HOST, FailureKind.CRASH, FailureKind.KILLED)


def judge(knob: str, o: LaunchOutcome) -> tuple[str, str]:
    """A launch's outcome as a knob-search trial: ok | oom | overshoot | failed | cancelled, and why."""
    if o.cancelled:
        return "cancelled", ""
    if o.ok:
        return "ok", "loaded and decoded"
    if knob == "fit_target" and o.fit_gave_up:
        return "overshoot", "fit cannot keep that much free"
    if o.memory_failure:
        return "oom", ("out of memory at the first decode" if o.at_first_decode else "out of memory at load")
    if o.failure is not None and o.failure.kind in (FailureKind.CRASH, FailureKind.KILLED):
        # Only the knob changed since a genuine allocation failure: a crash or a kill while loading
        # or at the first decode is the same shortage surfacing elsewhere (an unchecked allocation,
        # the OOM killer).
        return "oom", f"{o.failure.message} Counted as out of memory: only {knob.replace('_', '-')} changed."
    return "failed", (o.failure.message if o.failure else "the launch failed")


def choose_knob(settings: Settings, failed: LaunchOutcome) -> str:
    """fit-target when fit can act on the failing memory (a GPU/RPC device, fit on, and something
    left for fit to change); otherwise the context size."""
    fit_on = settings.fit is not False
    fit_free = settings.ctx_size is None or settings.n_gpu_layers in (None, "auto")
    if failed.memory_on_device and fit_on and fit_free:
        return "fit_target"
    return "ctx_size"
