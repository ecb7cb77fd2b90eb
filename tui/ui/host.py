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


class Relay:
    """A `Host` for controllers built before their screen: it forwards to the node `attach`ed to it
    (the cockpit screen, which attaches itself when built; workers start only once it is mounted)."""

    def __init__(self) -> None:
        self._node: Host | None = None

    def attach(self, node: Host) -> None:
        self._node = node

    def post_message(self, message: Message) -> bool:
        return self._node.post_message(message) if self._node is not None else False

    def run_worker(self, work: Any, name: str | None = "", group: str = "default", description: str = "",
                   exit_on_error: bool = True, start: bool = True, exclusive: bool = False,
                   thread: bool = False) -> Worker[Any]:
        assert self._node is not None, "a worker before the cockpit screen was built"
        return self._node.run_worker(work, name=name, group=group, description=description,
                                     exit_on_error=exit_on_error, start=start, exclusive=exclusive, thread=thread)
