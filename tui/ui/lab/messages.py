"""The lab's messages: what its workers (sweep, MTP on/off, searches, tune, the screens' checks) post.

Two shapes carry the actions' news to the host the lab controller runs its workers on (the cockpit
screen): `Progressed` (newest state) and `Finished` (the result and an error). There is one subclass
per action only because Textual routes a message to `@on(Class)` by its class.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message


class Progressed(Message):
    """An action's news (a view, or the core's LabEvent); the newest replaces one of its kind still queued."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value

    def can_replace(self, message: Message) -> bool:
        return type(message) is type(self)


class Finished(Message):
    """An action ended: its result (None when it could not run) and `error`, a paragraph when it failed."""

    def __init__(self, value: Any, error: str | None = None) -> None:
        super().__init__()
        self.value = value
        self.error = error


class SweepProgressed(Progressed):
    """A SweepView."""


class SweepFinished(Finished):
    """The final SweepView (done, cancelled, budget or failed)."""


class AbProgressed(Progressed):
    """An MTP on/off LabEvent."""


class AbFinished(Finished):
    """The core's AbVerdict."""


class SearchProgressed(Progressed):
    """A search's LabEvent: every trial counts, so none replaces another."""

    def can_replace(self, message: Message) -> bool:
        return False


class SearchFinished(Finished):
    """The core's SearchResult."""


class TuneProgressed(Progressed):
    """A TuneView."""


class TuneFinished(Finished):
    """The final TuneView (done, budget, cancelled, or refused before it began); `outcome` is the core's
    TuneOutcome (None when it never ran) and `base` its fixed settings (the report lists them)."""

    def __init__(self, value: Any, error: str | None = None, outcome: Any = None, base: Any = None) -> None:
        super().__init__(value, error)
        self.outcome = outcome
        self.base = base


class TuningChanged(Message):
    """The lab controller's state changed (started, cancelling): redraw its line and screens."""

    def __init__(self, extra: str = "") -> None:
        super().__init__()
        self.extra = extra


class Checked(Message):
    """A lab screen's setup checked on its worker (a planned grid, a tune's request, or why it cannot
    run: a str); only the newest `seq` is shown."""

    def __init__(self, seq: int, value: Any) -> None:
        super().__init__()
        self.seq = seq
        self.value = value


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
