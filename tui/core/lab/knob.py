"""The knob search: the value of one knob that turns a memory allocation failure into a working
launch (each launch judged by `failures.knob_outcome`; `recovery` drives it with real launches).

On GPUs (and llama.cpp RPC devices) the knob is `--fit-target`: the MiB `--fit` keeps free per
device. Raising it makes fit shrink the context (or move layers) until the allocation succeeds; the
answer is the *smallest* fit-target that loads and survives a first decode. On the CPU backend
`--fit` only plans GPU devices, so fit-target changes nothing there; the knob that fixes a host
allocation failure is the context size, and the answer is the *largest* `--ctx-size` that works.

Both are one search: over steps i = 1, 2, ... away from the failing start value (value = start +
direction * step * i), find the first i that no longer fails for lack of memory. The steps grow
1, 2, 4, 8 ... until a trial passes (or the limit is reached), then bisection between the last
failing and the first passing step pins the bound to one step (64 MiB by default). A fit-target so
large that fit cannot meet it at all ("overshoot": fit gives up and loads unchanged) counts as past
the bound, so it narrows the bisection without being an answer.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tui.core.lab.failures import Outcome
from tui.core.planning.largest_ctx import CTX_STEP, MIN_CTX

Knob = Literal["fit_target", "ctx_size"]
#: One fit-target step: the bound a search pins, and the step to the safe side after a failure.
FIT_STEP_MIB = 64

KNOB_UNITS: dict[str, str] = {"fit_target": "MiB", "ctx_size": "tokens"}
KNOB_FLAGS: dict[str, str] = {"fit_target": "--fit-target", "ctx_size": "--ctx-size"}


@dataclass(frozen=True)
class KnobTry:
    """One launch of the search (not a lab trial: a knob value and how it launched)."""

    value: int
    outcome: Outcome
    detail: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class KnobFinding:
    """What the search found, recorded with the row and in the sweep's findings."""

    knob: Knob
    start: int  # the failing value the search started from
    step: int
    limit: int
    value: int | None = None  # the answer; None when nothing in range works
    converged: bool = False
    trials: list[KnobTry] = field(default_factory=list)
    message: str = ""
    cause: str = ""  # the failure that started the search
    origin: int | None = None  # the configuration's own value, when the search could start further on

    @property
    def unit(self) -> str:
        return KNOB_UNITS[self.knob]

    @property
    def flag(self) -> str:
        return KNOB_FLAGS[self.knob]

    @property
    def launches(self) -> int:
        return len(self.trials)

    def to_json(self) -> dict[str, Any]:
        return {
            "knob": self.knob, "flag": self.flag, "unit": self.unit, "start": self.start, "step": self.step,
            "limit": self.limit, "value": self.value, "converged": self.converged, "message": self.message,
            "cause": self.cause, "origin": self.origin, "trials": [t.to_json() for t in self.trials],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KnobFinding:
        return cls(d["knob"], int(d["start"]), int(d["step"]), int(d["limit"]), d.get("value"), bool(d.get("converged")),
                   [KnobTry(**t) for t in d.get("trials", [])], d.get("message", ""), d.get("cause", ""), d.get("origin"))


def search_knob(
    knob: Knob,
    try_value: Callable[[int], KnobTry],
    *,
    start: int,
    step: int,
    limit: int,
    cause: str = "",
    cancel: threading.Event | None = None,
    on_trial: Callable[[KnobTry], None] | None = None,
    max_trials: int = 40,
    first_jump: int = 1,
) -> KnobFinding:
    """Find the first value past `start` (towards `limit`) whose trial is not an `oom`.

    `try_value(v)` launches with the knob at v and reports the outcome; `start` is known to fail.
    For fit_target the values rise (start < limit), for ctx_size they fall (start > limit).
    `first_jump` is the first step count tried (1 for fit-target's 64 MiB steps; a context search
    starts at half the failing context, since memory grows linearly with it).
    """
    if step <= 0:
        raise ValueError("step must be positive")
    direction = 1 if limit >= start else -1
    i_max = abs(limit - start) // step
    finding = KnobFinding(knob, start, step, limit, cause=cause)
    if i_max < 1:
        finding.message = f"no room to search: {finding.flag} {start} is already at the limit {limit} {finding.unit}."
        return finding
    tried: dict[int, KnobTry] = {}

    def value(i: int) -> int:
        return start + direction * step * i

    def attempt(i: int) -> KnobTry:
        if i in tried:
            return tried[i]
        if cancel is not None and cancel.is_set():
            raise _Stopped("search cancelled.")
        if len(tried) >= max_trials:
            raise _Stopped(f"search stopped after {max_trials} launches without pinning the bound.")
        t0 = time.monotonic()
        t = try_value(value(i))
        if not t.seconds:
            t = KnobTry(t.value, t.outcome, t.detail, round(time.monotonic() - t0, 3))
        tried[i] = t
        finding.trials.append(t)
        if on_trial is not None:
            on_trial(t)
        if t.outcome == "cancelled":
            raise _Stopped("search cancelled.")
        return t

    try:
        # Gallop: 1, 2, 4 ... steps until something is past the bound.
        last_bad, first_past = 0, None
        i = max(1, min(first_jump, i_max))
        while True:
            t = attempt(i)
            if t.outcome == "failed":
                finding.message = (f"{finding.flag} {t.value}: {t.detail or 'the launch failed for another reason'}; "
                                   f"changing {finding.flag} does not fix this, so the search stopped.")
                return finding
            if t.outcome == "oom":
                last_bad = i
                if i == i_max:
                    break
                i = min(i * 2, i_max)
                continue
            first_past = i
            break
        if first_past is None:
            finding.message = (f"still out of memory at {finding.flag} {value(i_max)} {finding.unit}, the end of the "
                               f"range; nothing between {start} and {limit} works.")
            return finding
        # Bisect (last_bad, first_past] to one step.
        lo, hi = last_bad, first_past
        while hi - lo > 1:
            mid = (lo + hi) // 2
            t = attempt(mid)
            if t.outcome == "failed":
                finding.message = (f"{finding.flag} {t.value}: {t.detail or 'the launch failed for another reason'}; "
                                   "the search stopped.")
                return finding
            if t.outcome == "oom":
                lo = mid
            else:
                hi = mid
        best = tried[hi]
        if best.outcome != "ok":
            finding.message = (f"{finding.flag} {value(lo)} {finding.unit} still fails to allocate and "
                               f"{value(hi)} is more than fit can keep free; no value works.")
            return finding
        finding.value = best.value
        finding.converged = True
        bound = f"{value(lo)} fails" if lo > 0 else f"the start value {start} fails"
        finding.message = (f"{'smallest' if direction > 0 else 'largest'} {finding.flag} that loads and survives a first "
                           f"decode: {best.value} {finding.unit} ({bound}; {len(finding.trials)} launches).")
        return finding
    except _Stopped as why:
        finding.message = str(why)
        return finding


class _Stopped(Exception):
    """The search ends before it pins the bound (cancelled, or out of launches); the message says why."""


def fit_target_limit(device_free_mib: list[int]) -> int:
    """The largest fit-target worth trying: the largest device's free memory (64 GiB if unknown)."""
    return max(device_free_mib) if device_free_mib else 65536


def ctx_start(requested: int | None, n_ctx_loaded: int | None) -> int:
    """Where a context search starts: the context that failed, rounded down to whole 256-cell blocks."""
    v = requested or n_ctx_loaded or 4096
    return max(MIN_CTX, int(math.floor(v / CTX_STEP)) * CTX_STEP)
