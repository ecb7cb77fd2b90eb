"""The main screen's bottom line: what a tuning action (sweep, MTP on/off, search) is doing behind.

Display only: the `LabController` (tui/ui/lab/controller.py) owns the work and writes the line.
"""

from __future__ import annotations

from typing import Any

from textual.content import Content
from textual.widgets import Static


class TuningPanel(Static):
    """One line; hidden while there is nothing to say."""

    DEFAULT_CSS = """
    TuningPanel { height: 1; padding: 0 1; background: $panel; color: $foreground; display: none; }
    TuningPanel.-active { display: block; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", **kwargs)

    def show(self, line: str) -> None:
        self.update(Content(line))
        self.set_class(bool(line), "-active")
