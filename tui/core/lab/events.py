"""What every experiment (sweep, tune, A/B, knob searches) tells its caller: the one progress event
`LabEvent`, and the one error `LabError`.

Why one: the sweep had `SweepEvent` (rows) and the tuning actions `TuneEvent` (passes, trials);
both were a kind, a done/total count, the elapsed time, an ETA and a message, plus what the event
is about. A UI draws every experiment with one progress bar from `LabEvent`; what it is about sits
in the optional fields (`candidate`, `trial`, `probe`, `side`).

`Progress` counts and emits: `done` finished units (plus the running unit's `fraction`) of `total`
(0 when unknown). Its ETA is elapsed / done * (total - done) unless the experiment gives its own
(`eta`: a sweep's `pace.Pace`, which weighs launches and generation length).

Why one error: the sweep, the A/B, the tune and the knob searches each raised their own (or a bare
ValueError) for the same reasons (no server binary, a bad suite, a journal or results store that
cannot be used), so every front end caught a different set; now each catches `LabError`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tui.core.lab.candidate import Candidate


class LabError(RuntimeError):
    """An experiment cannot start or go on (no server binary, a bad suite, a journal or results store
    that cannot be used, the same experiment already running); one clear paragraph."""


@dataclass(frozen=True)
class LabEvent:
    """One progress report.

    `kind`: started | row_started | launching | ready | launch_failed | search_trial | search_done |
    probe | pass_done | row_done | plan | trial | hygiene | stopped | cancelled | finished.
    `done`/`total` count an experiment's units (sweep: rows; A/B: passes; tune and searches:
    trials, `total` 0 when unknown); `eta_s` is None until something has been measured.
    `candidate`: the `candidate.Candidate` the event is about (a sweep's row, a tune's point, an
    A/B visit, a knob try); `trial`: its record once done (`row_done`, a tune's `trial`) or a knob
    search's launch (`search_trial`, a search's `trial`: `knob.KnobTry`); `probe`:
    `probes.run_types.ProbeProgress` (kind `probe`); `side`: an A/B visit's ("off" | "on");
    `launches`: so far.
    """

    kind: str
    done: float
    total: int
    elapsed_s: float
    eta_s: float | None = None
    message: str = ""
    candidate: Candidate | None = None
    trial: Any = None
    probe: Any = None
    side: str | None = None
    launches: int = 0


EventFn = Callable[[LabEvent], None]


class Progress:
    """Counts finished units and emits `LabEvent`s with an ETA (see the module docstring)."""

    def __init__(self, total: int, on_event: EventFn | None, *, eta: Callable[[], float | None] | None = None,
                 launches: Callable[[], int] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.on_event = on_event
        self.done = 0
        self.fraction = 0.0  # of the running unit, 0..1
        self.clock = clock
        self.t0 = clock()
        self._eta, self._launches = eta, launches

    def restart(self) -> None:
        self.t0 = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def eta(self) -> float | None:
        if self._eta is not None:
            return self._eta()
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
        kw.setdefault("launches", self._launches() if self._launches is not None else 0)
        kw.setdefault("eta_s", self.eta())  # an experiment may give its own (a tune's trials, its A/B's)
        ev = LabEvent(kind, round(self.done + self.fraction, 3), self.total, round(self.elapsed(), 3), message=message,
                      **kw)
        with contextlib.suppress(Exception):  # a broken UI callback must not stop the experiment
            self.on_event(ev)


def new_cancel(cancel: threading.Event | None) -> threading.Event:
    """The caller's cancel event, or a fresh one that nobody sets."""
    return cancel if cancel is not None else threading.Event()
