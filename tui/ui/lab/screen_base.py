"""What the screens of a lab action (sweep, MTP on/off verdict, tune) share: the lab controller they
are given (it owns the running action and its view), and the size classes their CSS lays out by."""

from __future__ import annotations

from textual import on
from textual.screen import Screen

from tui.ui.lab.controller import LabController
from tui.ui.lab.messages import Kept

#: below these the screens stack (`-narrow`) or drop their plot (`-short`)
NARROW_WIDTH = 110
SHORT_HEIGHT = 34


class TuningScreen(Screen[None]):
    """A full screen over the main one for a lab action; it keeps running when the screen is left."""

    def __init__(self, lab: LabController) -> None:
        super().__init__()
        self.lab = lab

    def on_resize(self) -> None:
        self._apply_size_classes()

    def _apply_size_classes(self) -> None:
        self.set_class(self.app.size.width < NARROW_WIDTH, "-narrow")
        self.set_class(self.app.size.height < SHORT_HEIGHT, "-short")

    @on(Kept)
    def _kept(self, message: Kept) -> None:
        """A worker saved the best or wrote a report (workers never notify: they post `Kept`)."""
        if message.error:
            self.notify(message.text, title=message.title, severity="error", timeout=12)
        else:
            self.notify(message.text, title=message.title, timeout=10)
