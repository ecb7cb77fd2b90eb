"""What a sweep tells its caller: progress events, the outcome, and the one error it raises."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tui.core.sweep.definition import Configuration
from tui.core.lab.knob import KnobTry
from tui.core.lab.journal import Journal
from tui.core.lab.trial import Trial


class SweepError(RuntimeError):
    """The sweep cannot start (bad suite, no server binary, unwritable state); one clear paragraph."""


@dataclass(frozen=True)
class SweepEvent:
    """Progress for the CLI and the TUI.

    `kind`: started | row_started | launching | ready | launch_failed | search_trial | search_done |
    probe | row_done | stopped | finished. `done`/`total` count rows (skipped and duplicate rows are
    done at once); `eta_s` is None until something has been measured.
    """

    kind: str
    done: int
    total: int
    elapsed_s: float
    eta_s: float | None = None
    row: Configuration | None = None
    result: Trial | None = None
    message: str = ""
    launches: int = 0
    probe: Any = None  # probes.run_types.ProbeProgress for kind "probe"
    trial: KnobTry | None = None


EventFn = Callable[[SweepEvent], None]


@dataclass
class SweepOutcome:
    """What `Sweep.run()` returns."""

    state: Journal
    stopped: str  # done | cancelled | budget
    seconds: float
    launches: int  # launches in this session
    ran: list[str]  # row keys run in this session

    @property
    def complete(self) -> bool:
        return self.stopped == "done"
