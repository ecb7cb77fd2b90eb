"""View models more than one feature draws: a probe's measured request is plotted by the cockpit's
probe panel and by the lab's sweep and tune screens (widgets/probe_plot.py), so it lives here and no
feature imports another feature's views for it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProbePoint:
    """One measured request: its configuration label, its index in the run, and the server's timings."""

    config: str
    index: int
    tg_tps: float | None
    pp_tps: float | None
    acceptance: float | None
