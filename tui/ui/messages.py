"""Messages that workers and core callbacks post to the App (thread-safe), one per kind of news.

Widget messages live in their widget (`SettingsForm.Changed`); these come from threads the App
started, so they belong to no widget. Messages that carry a "newest state" override
`can_replace` so a burst collapses to the latest one (free back-pressure).
"""

from __future__ import annotations

from typing import Any

from textual.message import Message

from tui.core.gpu.types import GpuSnapshot
from tui.ui.view import PlanView, ProbeState


class Sampled(Message):
    """A new telemetry snapshot; a pending older one is dropped."""

    def __init__(self, snapshot: GpuSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Sampled)


class Planned(Message):
    """A plan for the settings with sequence number `plan.seq` (stale ones are ignored)."""

    def __init__(self, plan: PlanView) -> None:
        super().__init__()
        self.plan = plan

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Planned)


class RemoteReading(Message):
    """A worker starts reading the header of the remote model of change `seq` (`label`: repo or URL)."""

    def __init__(self, seq: int, label: str) -> None:
        super().__init__()
        self.seq = seq
        self.label = label


class ExactPlanned(Message):
    """llama.cpp's exact plan for exact request `rid` (or, `plan.exact == "unavailable"`, why not);
    the App shows it only while `rid` is the newest request."""

    def __init__(self, rid: int, plan: PlanView) -> None:
        super().__init__()
        self.rid = rid
        self.plan = plan


class CalibrationProgressed(Message):
    """How far calibration job `job` got ("calibrating the estimate 3/21"; a few dozen words a run)."""

    def __init__(self, job: int, text: str) -> None:
        super().__init__()
        self.job, self.text = job, text


class Calibrated(Message):
    """Calibration job `job` of `model` ended: `result` is the Calibration for `meta` (its GGUFMeta),
    or one sentence why not ("cancelled" when it was stopped)."""

    def __init__(self, job: int, model: str, meta: Any, result: Any) -> None:
        super().__init__()
        self.job = job
        self.model = model
        self.meta = meta
        self.result = result


class ServerUpdated(Message):
    """The supervisor's state, log or download changed; the App re-reads it. Bursts collapse to one."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ServerUpdated)


class ServerActionDone(Message):
    """A launch/restart/stop worker finished; `error` is a user-facing paragraph when it failed."""

    def __init__(self, action: str, error: str | None = None) -> None:
        super().__init__()
        self.action = action
        self.error = error


class ProbeUpdated(Message):
    """New probe progress (the newest state replaces a pending one)."""

    def __init__(self, state: ProbeState) -> None:
        super().__init__()
        self.state = state

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ProbeUpdated)


class ProbeFinished(Message):
    """A probe run ended (done, cancelled or failed)."""

    def __init__(self, state: ProbeState, run_id: Any = None, error: str | None = None) -> None:
        super().__init__()
        self.state = state
        self.run_id = run_id
        self.error = error


# --- tuning actions (sweep, MTP on/off, searches): posted by their workers to the main screen ---


class SweepProgressed(Message):
    """New sweep progress (a SweepView); the newest replaces a pending one."""

    def __init__(self, view: Any) -> None:
        super().__init__()
        self.view = view

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SweepProgressed)


class SweepFinished(Message):
    """The sweep ended (done, cancelled, budget or failed); `error` is a paragraph when it failed."""

    def __init__(self, view: Any, error: str | None = None) -> None:
        super().__init__()
        self.view = view
        self.error = error


class AbProgressed(Message):
    """An MTP on/off LabEvent; the newest replaces a pending one."""

    def __init__(self, event: Any) -> None:
        super().__init__()
        self.event = event

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, AbProgressed)


class AbFinished(Message):
    """The MTP on/off run ended with its MtpVerdict (None when it could not start)."""

    def __init__(self, verdict: Any, error: str | None = None) -> None:
        super().__init__()
        self.verdict = verdict
        self.error = error


class SearchProgressed(Message):
    """A search's LabEvent (every trial counts: these are not collapsed)."""

    def __init__(self, knob: str, event: Any) -> None:
        super().__init__()
        self.knob = knob
        self.event = event


class SearchFinished(Message):
    """A search ended with its SearchResult (None when it could not run)."""

    def __init__(self, knob: str, result: Any, error: str | None = None) -> None:
        super().__init__()
        self.knob = knob
        self.result = result
        self.error = error


class TuningChanged(Message):
    """The tuning controller's state changed (started, cancelling): redraw its line and screens."""

    def __init__(self, extra: str = "") -> None:
        super().__init__()
        self.extra = extra


class SweepPreviewed(Message):
    """The sweep screen's grid planned (a SweepView, or an error naming the field); newest wins by `seq`."""

    def __init__(self, seq: int, view: Any, defn: Any = None, plans: Any = None, error: str | None = None) -> None:
        super().__init__()
        self.seq = seq
        self.view = view
        self.defn = defn
        self.plans = plans
        self.error = error


class VariantsProgressed(Message):
    """The variants picker's worker is at a step ("listing REPO", "reading the header of FILE"); plan `seq`."""

    def __init__(self, seq: int, text: str) -> None:
        super().__init__()
        self.seq = seq
        self.text = text

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, VariantsProgressed)


class VariantsPlanned(Message):
    """The variants picker's table for plan `seq` (a `VariantsView`; its `error` says why there is none)."""

    def __init__(self, seq: int, view: Any) -> None:
        super().__init__()
        self.seq = seq
        self.view = view


class TuneProgressed(Message):
    """New tune progress (a TuneView); the newest replaces a pending one."""

    def __init__(self, view: Any) -> None:
        super().__init__()
        self.view = view

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TuneProgressed)


class TuneFinished(Message):
    """The tune ended (done, budget, cancelled, or refused before it began): its final TuneView, the
    core's TuneOutcome (None when it never ran) and the fixed settings; `error` a paragraph."""

    def __init__(self, view: Any, outcome: Any = None, base: Any = None, error: str | None = None) -> None:
        super().__init__()
        self.view = view
        self.outcome = outcome
        self.base = base
        self.error = error


class TunePrepared(Message):
    """The tune screen's setup checked (an adapters.tune.Prepared, or why it cannot run); newest `seq` wins."""

    def __init__(self, seq: int, prepared: Any) -> None:
        super().__init__()
        self.seq = seq
        self.prepared = prepared
