"""Which plan the bars show: the instant estimate per settings change, replaced by llama.cpp's exact
figures once the dry run for the same settings returns (tui.core.planning.exact via the runner).

Plain state, no Textual: the App feeds it requests and answers (on its event loop) and shows what
it returns. Every settings change gets a sequence number; an estimate for an older one, or an exact
answer for a request that is no longer the newest, is dropped, so a stale result never overwrites
a newer estimate.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tui.ui.cockpit.views import PlanView


def shown_plan(estimate: PlanView, exact: PlanView | None, state: tuple[str, str],
               previous: PlanView | None = None) -> PlanView:
    """What the bars show: llama.cpp's figures once they came for these settings, else the estimate
    marked with exact mode's `state` ("pending" | "unavailable" | "off", and the reason). While a dry
    run is pending, the notes of the `previous` exact plan (the stand-ins' caveat) stay, so the
    screen does not shift on every keystroke."""
    if estimate.error:
        return estimate
    if exact is not None and exact.exact == "exact":
        return replace(exact, seq=estimate.seq)
    if exact is not None:
        return replace(estimate, exact="unavailable", exact_reason=exact.exact_reason)
    view = replace(estimate, exact=state[0], exact_reason=state[1])
    if state[0] == "pending" and previous is not None and previous.exact == "exact":
        view = replace(view, warnings=tuple(dict.fromkeys([*estimate.warnings, *previous.warnings])))
    return view


class PlanState:
    """The newest settings' estimate and exact request, and what is on screen."""

    def __init__(self) -> None:
        self.seq = 0
        self.estimate: PlanView | None = None
        self.exact_rid: int | None = None
        self.exact_state: tuple[str, str] = ("off", "")
        self.exact_view: PlanView | None = None
        self.shown: PlanView | None = None
        self._asked: Any = None  # (settings, devices) of the exact request in force

    @property
    def exact_pending(self) -> bool:
        """An exact request is out and its answer has not come yet."""
        return self.exact_rid is not None and self.exact_view is None

    def next_seq(self) -> int:
        """A new settings change: its estimate will carry this number."""
        self.seq += 1
        return self.seq

    def wants_exact(self, asked: Any, keep: bool = False) -> bool:
        """Ask for a new exact plan? Not while one stands for the same settings and devices (`asked`),
        nor with `keep` (the devices were known before the snapshot that brought this re-plan)."""
        return not (self.exact_rid is not None and (keep or asked == self._asked))

    def exact_asked(self, asked: Any, rid: int | None, why: str) -> None:
        """The runner took request `rid`, or (rid None) exact is off ("") or unavailable (`why`)."""
        self._asked = asked
        self.exact_rid, self.exact_view = rid, None
        self.exact_state = ("pending", "") if rid is not None else (("unavailable", why) if why else ("off", ""))

    def take_estimate(self, plan: PlanView) -> tuple[PlanView | None, bool]:
        """(the plan to show or None, whether to cancel the exact request: an estimate that failed
        leaves nothing to make exact)."""
        if plan.seq < self.seq:
            return None, False  # a newer plan is on its way
        self.estimate = plan
        cancel = bool(plan.error) and self.exact_rid is not None
        if cancel:
            self.exact_rid, self.exact_state, self._asked = None, ("off", ""), None
        return self._compose(), cancel

    def take_exact(self, rid: int, view: PlanView) -> PlanView | None:
        """The plan to show for exact answer `rid`, or None when it is for settings no longer on screen."""
        if rid != self.exact_rid:
            return None
        self.exact_view = view
        return self._compose()

    def _compose(self) -> PlanView | None:
        est = self.estimate
        if est is None or est.seq != self.seq:
            return None  # the estimate for these settings is on its way; keep the last plan until then
        self.shown = shown_plan(est, self.exact_view, self.exact_state, self.shown)
        return self.shown
