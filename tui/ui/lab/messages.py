"""The lab's messages: what its workers (sweep, MTP on/off, searches, tune, the screens' checks) post.

They are posted to the host the lab controller runs its workers on (the cockpit screen) or to the
lab screen whose worker made them; newest-state ones override `can_replace`.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message


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


class SavedSweep(Message):
    """The newest saved sweep as (settings, setup), or why there is none to show."""

    def __init__(self, found: Any) -> None:
        super().__init__()
        self.found = found


class Kept(Message):
    """A lab screen's worker saved the best or wrote a report: what to tell the user (`error` when it failed)."""

    def __init__(self, title: str, text: str, error: bool = False) -> None:
        super().__init__()
        self.title = title
        self.text = text
        self.error = error
