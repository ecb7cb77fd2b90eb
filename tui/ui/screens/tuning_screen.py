"""What the screens of a tuning action (sweep, MTP on/off verdict, tune) share: the App's tuning
controller, which owns the running action and its view, and the size classes their CSS lays out by."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.screen import Screen

if TYPE_CHECKING:
    from tui.ui.app import MtpTuneApp
    from tui.ui.controllers.tuning import TuningController

#: below these the screens stack (`-narrow`) or drop their plot (`-short`)
NARROW_WIDTH = 110
SHORT_HEIGHT = 34


class TuningScreen(Screen[None]):
    """A full screen over the main one for a tuning action; it keeps running when the screen is left."""

    def on_resize(self) -> None:
        self._apply_size_classes()

    def _apply_size_classes(self) -> None:
        self.set_class(self.app.size.width < NARROW_WIDTH, "-narrow")
        self.set_class(self.app.size.height < SHORT_HEIGHT, "-short")

    def _panel(self) -> TuningController:
        return cast("MtpTuneApp", self.app).tuning
