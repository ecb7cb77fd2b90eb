"""SVG snapshots of the sweep screen and the MTP on/off verdict in three themes at 80x24 and 120x40,
from the fixed samples in tests/helpers/tuning_samples.py (no server, no timers).

Update after an intended UI change with `pytest tests/test_ui_tuning_snapshots.py --snapshot-update`
and review the SVGs in tests/__snapshots__/.
"""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input

from tests.helpers import tuning_samples
from tests.helpers import ui_samples as samples
from tui.ui.app import make_app
from tui.ui.lab.sweep_screen import SweepScreen
from tui.ui.lab.verdict_screen import VerdictScreen

THEMES = ("mtp-dark", "mtp-light", "mtp-okabe-ito")
SIZES = ((80, 24), (120, 40))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("theme", THEMES)
def test_sweep_screen(snap_compare, theme: str, size: tuple[int, int]) -> None:
    app = make_app(samples.fixed_options("idle", theme))
    assert snap_compare(app, run_before=tuning_samples.push_sweep("running"), terminal_size=size)


def test_sweep_screen_done(snap_compare) -> None:
    app = make_app(samples.fixed_options("idle"))
    assert snap_compare(app, run_before=tuning_samples.push_sweep("done"), terminal_size=(120, 40))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("theme", THEMES)
def test_verdict_screen(snap_compare, theme: str, size: tuple[int, int]) -> None:
    app = make_app(samples.fixed_options("idle", theme))
    assert snap_compare(app, run_before=tuning_samples.push_verdict(), terminal_size=size)


@pytest.mark.parametrize("size", SIZES)
async def test_fixed_sweep_renders(size: tuple[int, int]) -> None:
    """The same screen through run_test, which re-raises app errors (a snapshot of a crash would pass)."""
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=size) as pilot:
        await tuning_samples.push_sweep("running")(pilot)
        screen = app.screen
        assert isinstance(screen, SweepScreen)
        table = screen.query_one("#sweep-table", DataTable)
        assert table.row_count == 6
        cells = [[str(c) for c in table.get_row_at(i)] for i in range(6)]
        assert cells[2][4] == "oom" and cells[2][5] == "skip:oom"  # planned, marked, skipped
        # Columns as wide as their widest cell, set with the rows (not left to the table's idle measuring).
        for i, column in enumerate(table.ordered_columns[:-1]):
            assert column.width >= max(len(row[i]) for row in cells), (column.label, column.width)
        # #2 leads on TG but #1 is within its noise and cheaper (the smaller micro-batch): #1 is the best
        assert cells[0][-1].startswith("BEST") and cells[1][-1].startswith("~best") and cells[4][5] == "▶ running"
        assert "4/6 rows" in str(screen.query_one("#sweep-progress-text").render())
        assert "ETA 6:42" in str(screen.query_one("#sweep-progress-text").render())
        await pilot.press("g")  # a fixed preview runs nothing
        assert app.lab.running is None


async def test_fixed_verdict_follows_the_workload() -> None:
    """Editing the workload re-judges the same passes at once: MTP loses a 13k summary, wins long answers."""
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        await tuning_samples.push_verdict()(pilot)
        screen = app.screen
        assert isinstance(screen, VerdictScreen)
        assert "MTP LOSES" in str(screen.query_one("#verdict-headline").render())
        assert "PP loss outweighs the TG gain" in screen.view.answer
        screen.query_one("#verdict-out", Input).value = "30000"
        await pilot.pause()
        assert screen.view.label == "b_wins" and "MTP WINS" in str(screen.query_one("#verdict-headline").render())
        assert screen.view.workload == (13000, 30000)
        screen.query_one("#verdict-in", Input).value = "1000"
        screen.query_one("#verdict-out", Input).value = "500"
        await pilot.pause()
        # 500 tokens is just under the break-even of 523: neither side wins, the ranges overlap.
        assert screen.view.label == "same" and "THE SAME WITHIN THE NOISE" in str(screen.query_one("#verdict-headline").render())
        assert "523 tokens" in str(screen.query_one("#verdict-break-even").render())


def _sweep_in_background(app) -> None:  # noqa: ANN001
    """The TuningPanel as while a sweep runs behind the main screen (the fixed sample's progress)."""
    app.lab.running = "sweep"
    app.lab.sweep_view = tuning_samples.sweep_running()
    app.main.lab.changed()


async def test_main_screen_shows_a_sweep_running_behind() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        assert not app.main.tuning_panel.has_class("-active")  # nothing has run: the line takes no room
        _sweep_in_background(app)
        await pilot.pause()
        line = str(app.main.tuning_panel.render())
        assert app.main.tuning_panel.has_class("-active") and app.main.tuning_panel.region.height == 1
        assert line.startswith("◆ sweep 4/6 rows · 15:17 elapsed · ETA 6:42 · #5 mtp=off ub=1024"), line
        assert "w shows it" in line


def test_main_screen_with_a_sweep_behind(snap_compare) -> None:
    async def run_before(pilot) -> None:  # noqa: ANN001
        _sweep_in_background(pilot.app)
        await pilot.pause()

    assert snap_compare(make_app(samples.fixed_options("idle")), run_before=run_before, terminal_size=(120, 40))


async def test_tuning_actions_in_the_command_palette_and_refused_in_a_preview() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("Sweep", "MTP on vs off", "Largest context", "Smallest fit-target"):
            assert title in titles
        await pilot.press("a")  # the verdict screen opens; a fixed preview runs nothing
        await pilot.pause()
        assert isinstance(app.screen, VerdictScreen) and app.lab.running is None
        assert any("fixed preview" in n.message for n in app._notifications)
        await pilot.press("escape", "c")
        await pilot.pause()
        assert app.lab.running is None and not isinstance(app.screen, VerdictScreen)
