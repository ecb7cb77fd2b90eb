"""Messages that workers and core callbacks post to the App (thread-safe), one per kind of news.

Widget messages live in their widget (`SettingsForm.Changed`); these come from threads the App
started, so they belong to no widget. Messages that carry a "newest state" override
`can_replace` so a burst collapses to the latest one (free back-pressure).
"""

from __future__ import annotations

from typing import Any

from textual.message import Message

from tui.core.gpu.types import GpuSnapshot
from tui.ui.cockpit.views import PlanView, ProbeState


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
        """Textual drops this plan for `message`, queued after it: only for a plan as new (workers
        finish in any order; a newer plan dropped for an older one would leave no plan current)."""
        return isinstance(message, Planned) and message.plan.seq >= self.plan.seq


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


class QualityLooked(Message):
    """What is measured on `model`: (its header digest, the index's entries newest first), or one
    sentence why its header could not be read."""

    def __init__(self, model: str, result: Any) -> None:
        super().__init__()
        self.model, self.result = model, result


class QualityProgressed(Message):
    """How far quality job `job` got ("q8_0: chunk 2/4"); the newest replaces a pending one."""

    def __init__(self, job: int, text: str) -> None:
        super().__init__()
        self.job, self.text = job, text

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, QualityProgressed) and message.job == self.job


class QualityMeasured(Message):
    """Quality job `job` measured `kv` on `model`: `result` is what is now measured on the model
    (the index's entries), or one sentence why not ("cancelled" when it was stopped)."""

    def __init__(self, job: int, model: str | None, kv: Any, result: Any) -> None:
        super().__init__()
        self.job, self.model, self.kv, self.result = job, model, kv, result


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
