"""The backend half every fake tune machine shares: one server at a time, `current` while it runs."""

from __future__ import annotations

from typing import Any


class FakeBackendBase:
    """`stop` forgets the running settings; nothing to close; no failure to report."""

    current: Any = None

    def stop(self) -> None:
        self.current = None

    def close(self) -> None:
        pass

    def failure(self) -> None:
        return None
