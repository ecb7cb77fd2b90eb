"""The VRAM bars follow the device count however fast it changes (a plan and a sample in one frame)."""

from __future__ import annotations

import dataclasses

from textual.app import App, ComposeResult

from tests.helpers import ui_samples
from tui.ui import themes
from tui.ui.cockpit.vram_bars import DeviceBar, VramBars


class BarsOnly(App[None]):
    def get_theme_variable_defaults(self) -> dict[str, str]:  # the plan colours, as MtpTuneApp gives them
        return themes.derived_defaults(self.current_theme.to_color_system().generate())

    def compose(self) -> ComposeResult:
        yield VramBars(id="vram")


async def test_the_count_changing_twice_before_a_frame_leaves_one_bar_per_device() -> None:
    """Two, one, three devices handed down back to back: a removal that Textual finishes later must
    not leave stale bars counted (it used to end in DuplicateIds for 'gpu-0', or in extra bars)."""
    one = ui_samples.snapshot()
    dev = one.devices[0]
    many = {n: dataclasses.replace(one, devices=tuple(dataclasses.replace(dev, index=i) for i in range(n)))
            for n in (1, 2, 3)}
    app = BarsOnly()
    async with app.run_test(size=(120, 40)) as pilot:
        bars = app.query_one(VramBars)
        bars.show(None, many[2])
        bars.show(None, many[1])
        bars.show(None, many[3])
        await pilot.pause()
        assert len(list(bars.query(DeviceBar))) == 3
        bars.show(None, many[1])
        bars.show(None, many[2])
        await pilot.pause()
        shown = list(bars.query(DeviceBar))
        assert [b.index for b in shown] == [0, 1]
        assert all(b.live is not None for b in shown)
