"""What a sweep tells its caller: the outcome and the one error it raises (progress is `lab.events.LabEvent`)."""

from __future__ import annotations

from dataclasses import dataclass

from tui.core.lab.journal import Journal


class SweepError(RuntimeError):
    """The sweep cannot start (bad suite, no server binary, unwritable state); one clear paragraph."""


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
