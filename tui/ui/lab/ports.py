"""What the lab needs of the cockpit, as protocols: the lab never imports the cockpit, and the cockpit's
server and plan controllers satisfy these by shape (a test can pass any object that does)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tui.core.options.settings import Settings


class ServerPort(Protocol):
    """What the lab needs of the cockpit's server controller: whether the user's server runs, with
    what, why a launch cannot happen, and a stop that tells the cockpit (called on a worker)."""

    @property
    def alive(self) -> bool: ...

    def running_settings(self) -> Settings | None: ...

    def blocked(self, action: str, problems: Sequence[Any] = ()) -> str | None: ...

    def stop_now(self) -> None: ...


class ProblemsPort(Protocol):
    """The settings on screen and their problems (a launch with errors is refused)."""

    problems: Sequence[Any]

    @property
    def settings(self) -> Settings: ...


@dataclass(frozen=True)
class RestartOffer:
    """The user's server was stopped for an experiment that is now over: what it ran with, and which
    experiment stopped it (the offer names it)."""

    settings: Settings
    what: str
