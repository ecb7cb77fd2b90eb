"""Progress, ETA and cancel for the tuning actions (the A/B verdict and the searches).

Why not the sweep's `SweepEvent`: that one is about grid rows (`Configuration`, `lab.trial.Trial`); a
tuning action has passes or trials. What they share is the shape (kind, done/total, elapsed, ETA,
a message), so a UI draws both with one progress bar.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TuneEvent:
    """One progress report.

    `kind`: started | launching | ready | launch_failed | probe | pass_done | plan | trial |
    cancelled | finished. `done`/`total` count units of work (A/B: passes; searches: launches,
    `total` 0 when unknown); `eta_s` is None until something has been measured.
    """

    kind: str
    done: float
    total: int
    elapsed_s: float
    eta_s: float | None = None
    message: str = ""
    side: str | None = None  # A/B: "off" | "on"
    pass_index: int | None = None  # A/B: 0-based pass of that side
    trial: Any = None  # searches: lab.knob.KnobTry
    probe: Any = None  # probes.run_types.ProbeProgress for kind "probe"


EventFn = Callable[[TuneEvent], None]


class Progress:
    """Counts finished units (plus the running unit's fraction) and emits events with an ETA.

    ETA = elapsed / done * (total - done): every unit of an A/B run is one launch plus one probe
    of the same suite, so they cost about the same.
    """

    def __init__(self, total: int, on_event: EventFn | None) -> None:
        self.total = total
        self.on_event = on_event
        self.done = 0
        self.fraction = 0.0  # of the running unit, 0..1
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def eta(self) -> float | None:
        done = self.done + self.fraction
        if not self.total or done <= 0:
            return None
        return round(max(0.0, self.elapsed() / done * (self.total - done)), 1)

    def step(self) -> None:
        self.done += 1
        self.fraction = 0.0

    def emit(self, kind: str, message: str = "", **kw: Any) -> None:
        if self.on_event is None:
            return
        ev = TuneEvent(kind, round(self.done + self.fraction, 3), self.total, round(self.elapsed(), 3), self.eta(),
                       message, **kw)
        with contextlib.suppress(Exception):  # a broken UI callback must not stop the action
            self.on_event(ev)


def new_cancel(cancel: threading.Event | None) -> threading.Event:
    """The caller's cancel event, or a fresh one that nobody sets."""
    return cancel if cancel is not None else threading.Event()
