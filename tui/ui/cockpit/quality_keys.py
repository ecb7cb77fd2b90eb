"""The main screen's quality keys and news: `d` measures (or cancels), `Escape` cancels, `D` opens quality
vs memory; the lookup's and the measurement's messages re-say the plan panel's quality line.

A mixin of `MainScreen` (its handlers are found by name along the screen's MRO), so the screen module
keeps to the loop it composes; the work is the quality controller's (cockpit/quality.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tui.ui import keys
from tui.ui.cockpit.messages import QualityLooked, QualityMeasured, QualityProgressed
from tui.ui.cockpit.quality_screen import QualityMemoryScreen
from tui.ui.host import Notice

if TYPE_CHECKING:
    from tui.ui.cockpit.screen import MainScreen


class QualityKeys:
    """`d`, `Escape` and `D` on the main screen, and the quality messages its workers post."""

    def _quality_key(self: MainScreen) -> str:
        """The quality key as the user's `[keymap]` has it (the line says "press d")."""
        bound = self.mtp_app.keymap.get("quality", "d")
        return keys.key_label(bound.split(",")[0].strip() or "d")

    def _show_quality(self: MainScreen) -> None:
        """Re-say the quality line for the settings on screen (looking their model up when it is new)."""
        self.quality.watch(self.plan.settings)
        self.vram.quality(self.quality.line(self.plan.settings, self._quality_key()))

    def on_quality_looked(self: MainScreen, message: QualityLooked) -> None:
        if self.quality.looked(message):
            self._show_quality()

    def on_quality_progressed(self: MainScreen, message: QualityProgressed) -> None:
        if self.quality.progressed(message):
            self._show_quality()

    def on_quality_measured(self: MainScreen, message: QualityMeasured) -> None:
        if self.quality.finished(message):
            self._show_quality()

    def action_quality(self: MainScreen) -> None:
        """Measure what the K/V types on screen cost (KLD against f16), or cancel the measurement."""
        why = self.quality.toggle(self.plan.settings)
        if why:
            self._notice(Notice(why, "Quality", timeout=8))
        self._show_quality()

    def action_cancel_quality(self: MainScreen) -> None:
        """Cancel the quality measurement (its llama-perplexity pass is stopped)."""
        if self.quality.cancel():
            self._show_quality()

    def action_quality_memory(self: MainScreen) -> None:
        """Each K/V type's KV memory at this context against its measured quality."""
        self.app.push_screen(QualityMemoryScreen(self.cockpit.quality_memory(self.plan.settings, self.plan.snapshot)))
