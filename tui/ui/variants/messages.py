"""The variants picker's messages: its worker's steps and its table."""

from __future__ import annotations

from typing import Any

from textual.message import Message


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
