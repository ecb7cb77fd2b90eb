"""What every experiment (sweep, tune, A/B, knob searches) tells its caller: the one progress event
`LabEvent`, and the one error `LabError`.

Why one: the sweep had `SweepEvent` (rows) and the tuning actions `TuneEvent` (passes, trials);
both were a kind, a done/total count, the elapsed time, an ETA and a message, plus what the event
is about. A UI draws every experiment with one progress bar from `LabEvent`; what it is about sits
in the optional fields (`candidate`, `trial`, `probe`, `side`).

`Progress` counts and emits: `done` finished units (plus the running unit's `fraction`) of `total`
(0 when unknown). Its ETA is elapsed / done * (total - done) unless the experiment gives its own
(`eta`: a sweep's `Pace`, which weighs launches and generation length).

Why one error: the sweep, the A/B, the tune and the knob searches each raised their own (or a bare
ValueError) for the same reasons (no server binary, a bad suite, a journal or results store that
cannot be used), so every front end caught a different set; now each catches `LabError`.

`Pace` is the experiments' clock: the ETA and the time budget, from launch and generation times
measured in this session. A launch costs its mean measured time; generation costs seconds per unit
of a row's weight (its n_predict), so longer outputs count for more. Before any row finished, the
running probe's own progress gives the rate.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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


class Work(Protocol):
    """What the pace weighs of a candidate (a sweep's `candidate.Candidate`, a tune's passes)."""

    key: str
    launch_key: str
    n_predict: int | None


#: The row being probed: (configuration, monotonic start, requests done, requests in all).
Current = tuple[Work, float, int, int]


def weight(c: Work) -> float:
    """A row's generation work, in units the measured rate is per."""
    return float(c.n_predict or 512)


@dataclass(frozen=True)
class WorkSize:
    """What an experiment does, before it starts: the question in front of a long run says it."""

    launches: int
    requests: int
    tokens: int  # generated tokens at most

    def seconds(self, tg_tps: float | None, launch_s: float | None) -> float | None:
        """Its duration from one measured generation speed and launch time on this machine (None when
        either is unknown). A floor: prompt processing and MTP's speed-up are left out."""
        if not tg_tps or tg_tps <= 0 or launch_s is None:
            return None
        return self.launches * launch_s + self.tokens / tg_tps


def work_size(launches: int, prompt_tokens: Sequence[int], repeat: int) -> WorkSize:
    """`launches` servers, each probing every prompt `repeat` times (`prompt_tokens`: each prompt's
    generated tokens at most)."""
    return WorkSize(launches, launches * repeat * len(prompt_tokens), launches * repeat * sum(prompt_tokens))


class Pace:
    """Measured launch and generation times; the ETA and the budget check read them."""

    def __init__(self) -> None:
        self._launch_s: list[float] = []
        self._work_s = 0.0
        self._work_done = 0.0

    def launched(self, seconds: float) -> None:
        self._launch_s.append(seconds)

    def worked(self, seconds: float, c: Work) -> None:
        self._work_s += seconds
        self._work_done += weight(c)

    def _mean_launch_s(self) -> float:
        return sum(self._launch_s) / len(self._launch_s) if self._launch_s else 0.0

    def eta(self, left: Sequence[Work], cur: Current | None) -> float | None:
        """Seconds left: mean launch time per launch left, plus generation work left at the
        measured seconds per token of n_predict (from finished rows, or the running probe)."""
        if not left:
            return 0.0
        per_w = self._work_s / self._work_done if self._work_done else None
        cur_left = 0.0
        if cur is not None:
            c, t0, done, total = cur
            if done and total:
                spent = time.monotonic() - t0
                if per_w is None:
                    per_w = spent / done * total / weight(c)
                cur_left = max(0.0, spent / done * (total - done))
        if per_w is None and not self._launch_s:
            return None
        others = [x for x in left if cur is None or x.key != cur[0].key]
        groups = len({x.launch_key for x in others if cur is None or x.launch_key != cur[0].launch_key})
        return round(groups * self._mean_launch_s() + sum(weight(x) for x in others) * (per_w or 0.0) + cur_left, 1)

    def over_budget(self, group: Sequence[Work], elapsed: float, budget: float | None) -> bool:
        """True when the budget is spent, or when this launch group would not finish inside it."""
        if budget is None:
            return False
        if elapsed >= budget:
            return True
        if self._launch_s or self._work_done:
            per_w = self._work_s / self._work_done if self._work_done else 0.0
            need = self._mean_launch_s() + sum(weight(c) for c in group) * per_w
            return elapsed + need > budget
        return False
