"""A cockpit backend whose server is up without launching anything, for the probe and lab keys' UI tests."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from tui.core.options.settings import Settings
from tui.ui.cockpit.backend import Backend
from tui.ui.cockpit.views import ProbeState, ServerStatus
from tui.ui.options import AppOptions


class Ready(Backend):
    """A backend whose server is up (nothing launched) with the given settings; a probe run records
    what it was asked for and ends at once."""

    def __init__(self, options: AppOptions, running: Settings) -> None:
        super().__init__(options)
        self.running_settings = running
        self.asked: list[tuple[str, int]] = []

    def status(self) -> ServerStatus:
        return ServerStatus(state="ready", url="http://127.0.0.1:9")

    def _run_probes(self, suite: str, settings: Settings, previous: ProbeState, progress: Any,
                    cancel: threading.Event, concurrency: int = 1) -> tuple[ProbeState, Any, str | None]:
        self.asked.append((suite, concurrency))
        return dataclasses.replace(previous, message="ok"), 1, None
