"""The backend half every fake tune machine shares: one server at a time, `current` while it runs."""

from __future__ import annotations

from typing import Any

from tui.core.lab.trial import Samples


class FakeBackendBase:
    """`stop` forgets the running settings; nothing to close; no failure to report; `passes` measures on
    a virtual clock (`now`)."""

    current: Any = None
    now: float = 0.0
    #: Each pass is the base time times this pattern: a fixed spread, no noise beyond it.
    SPREAD: tuple[float, ...] = (1.0, 1.01, 0.995, 1.005)

    def passes(self, base: float, n: int, got: Samples) -> Samples:
        """`n` passes of `base` seconds per request (PP 1000, TG 100 t/s) added to `got`, the clock moved on."""
        for i in range(n):
            e = base * self.SPREAD[i % len(self.SPREAD)]
            got.pp_tps.append(1000.0), got.tg_tps.append(100.0), got.acceptance.append(0.8), got.e2e_s.append(e)
            self.now += e
        return got

    def stop(self) -> None:
        self.current = None

    def close(self) -> None:
        pass

    def failure(self) -> None:
        return None
