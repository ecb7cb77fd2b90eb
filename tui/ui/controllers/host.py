"""What a controller needs from the screen it works for: a place to run workers and to post to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from textual.message import Message
from textual.worker import Worker


class Host(Protocol):
    """The `MainScreen` (a Textual node): workers run in its worker manager, messages go to its queue."""

    def post_message(self, message: Message) -> bool: ...

    def run_worker(self, work: Any, name: str | None = "", group: str = "default", description: str = "",
                   exit_on_error: bool = True, start: bool = True, exclusive: bool = False,
                   thread: bool = False) -> Worker[Any]: ...


@dataclass(frozen=True)
class Notice:
    """What the user should be told (why an action did not start, how one ended): a notification."""

    message: str
    title: str = ""
    severity: str = "warning"
    timeout: float | None = None  # None: Textual's default
