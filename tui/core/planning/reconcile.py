"""Predicted vs reported memory, per device and component, as data (shown to the user and stored).

After every launch the supervisor's memory report (tui.core.server.memreport) is compared with the plan
(tui.core.planning.plan); the differences are kept as plain numbers so the planner's error is always
visible. The calibration launches that feed it live in tests/helpers/launch.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tui.core.planning.result import COMPONENT_KEYS, Plan
from tui.core.server.memreport import MemoryReport

#: Tolerances of the goals: absolute MiB or relative, whichever is larger.
EXACT_COMPONENTS: tuple[str, ...] = ("weights", "kv", "draft_kv", "recurrent")
APPROX_COMPONENTS: tuple[str, ...] = ("compute", "draft_compute")


@dataclass
class Diff:
    device: str
    component: str
    predicted_mib: float
    reported_mib: float
    exact_mib: float | None = None  # llama.cpp's own dry run (exact mode), when one was made

    @property
    def exact_error_mib(self) -> float | None:
        return None if self.exact_mib is None else round(self.exact_mib - self.reported_mib, 2)

    @property
    def error_mib(self) -> float:
        return round(self.predicted_mib - self.reported_mib, 2)

    @property
    def error_rel(self) -> float:
        """Relative error against the report (0 when both are 0)."""
        if self.reported_mib == 0:
            return 0.0 if abs(self.predicted_mib) < 0.005 else float("inf")
        return (self.predicted_mib - self.reported_mib) / self.reported_mib

    def within(self, rel: float, abs_mib: float) -> bool:
        return abs(self.error_mib) <= max(abs_mib, rel * abs(self.reported_mib))

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device, "component": self.component, "predicted_mib": round(self.predicted_mib, 2),
            "reported_mib": round(self.reported_mib, 2), "error_mib": self.error_mib,
            "error_pct": None if self.error_rel == float("inf") else round(100 * self.error_rel, 2),
            **({} if self.exact_mib is None else {"exact_mib": round(self.exact_mib, 2), "exact_error_mib": self.exact_error_mib}),
        }


@dataclass
class Reconciliation:
    diffs: list[Diff] = field(default_factory=list)
    unmatched_devices: list[str] = field(default_factory=list)

    def for_component(self, component: str) -> list[Diff]:
        return [d for d in self.diffs if d.component == component]

    def max_abs_error(self, component: str) -> float:
        return max((abs(d.error_mib) for d in self.for_component(component)), default=0.0)

    def max_rel_error(self, component: str, min_mib: float = 0.0) -> float:
        vals = [abs(d.error_rel) for d in self.for_component(component) if d.reported_mib > min_mib]
        return max(vals, default=0.0)

    def failures(self, exact_rel: float = 0.01, exact_abs: float = 1.0, approx_rel: float = 0.10, approx_abs: float = 1.0) -> list[Diff]:
        """Diffs outside the goals: exact components 1 % or 1 MiB, compute 10 % (or 1 MiB)."""
        out = []
        for d in self.diffs:
            if d.component in EXACT_COMPONENTS and not d.within(exact_rel, exact_abs):
                out.append(d)
            elif d.component in APPROX_COMPONENTS and not d.within(approx_rel, approx_abs):
                out.append(d)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"diffs": [d.to_dict() for d in self.diffs], "unmatched_devices": list(self.unmatched_devices)}


def reconcile(plan: Plan, report: MemoryReport, exact: Plan | None = None) -> Reconciliation:
    """Compare component by component. Plan devices are matched to report devices by their key
    (`Host`, `CUDA0`, `RPC0[host:port]`); a device present on one side only compares against 0.
    `exact` (the exact-mode plan, tui.core.planning.exact) adds llama.cpp's figure beside each."""
    reported = report.per_device()
    rec = Reconciliation()
    planned = {d.key: d for d in plan.devices}
    keys = list(planned) + [k for k in reported if k not in planned]
    for key in keys:
        pd = planned.get(key)
        rd = reported.get(key)
        if pd is None or rd is None:
            rec.unmatched_devices.append(key)
        for comp in COMPONENT_KEYS:
            pv = pd.components.get(comp, 0.0) if pd else 0.0
            rv = (rd or {}).get(comp, 0.0)
            if comp == "output" and rd is not None:
                rv += rd.get("draft_output", 0.0)
            if pd is None and rv == 0:
                continue
            ed = exact.device(key) if exact is not None else None
            rec.diffs.append(Diff(key, comp, pv, rv, None if ed is None else ed.components.get(comp, 0.0)))
    return rec
