"""The main screen's key bar: the keys that matter for the state, whole entries only, Help, Quit and
the palette always at its end, the user's keys; and the help screen that scrolls at once, by section."""

from __future__ import annotations

import re

import pytest
from textual.binding import Binding

from tests.helpers import ui_samples as samples
from tui.ui import keys
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.cockpit.key_bar import KeyBar, fit
from tui.ui.cockpit.messages import ProbeFinished, ServerUpdated
from tui.ui.help_screen import help_text

SIZES = ((100, 30), (160, 45), (220, 60))
END = "? Help  q Quit  ^p palette"


def bar_text(app: MtpTuneApp) -> str:
    """The bar's row as drawn, after checking that it is the screen's whole bottom row."""
    bar = app.screen.query_one(KeyBar)
    assert bar.region.y == app.size.height - 1 and bar.region.width == app.size.width
    return bar.render_line(0).text


def table_entries(app: MtpTuneApp) -> set[str]:
    """Every entry the bar may show with the default keys ("l Launch", "^p palette"), from the one table."""
    return {f"{app.get_key_display(Binding(a.key, a.action, key_display=a.key_display))} {a.label}"
            for a in keys.ACTIONS}


def entries(text: str) -> list[str]:
    return [e for e in re.split(r" {2,}", text.strip()) if e]


@pytest.mark.parametrize("state", ["idle", "ready", "probes"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_bar_shows_whole_entries_and_ends_with_help_quit_palette(state: str, size: tuple[int, int]) -> None:
    app = make_app(samples.fixed_options(state))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        text = bar_text(app)
        assert len(text) == size[0]
        shown = entries(text)
        assert set(shown) <= table_entries(app), f"a cut or unknown entry in {text!r}"
        assert text.rstrip().endswith(END), text
        assert shown.count("? Help") == 1 and len(shown) >= 6, text  # room for the state's keys too
        if size[0] >= 220:
            assert "T Tune" in shown and "c Max ctx" in shown and "F Min fit-target" in shown, text
            assert "v Variants" in shown and "m Memory" in shown, text


@pytest.mark.parametrize(("state", "shown", "hidden"), [
    ("idle", {"l Launch"}, {"s Stop", "r Restart", "p Probe", "x Cancel"}),
    ("ready", {"r Restart", "s Stop", "p Probe"}, {"l Launch", "x Cancel"}),
    ("probes", {"r Restart", "s Stop", "x Cancel"}, {"l Launch", "p Probe"}),
])
async def test_the_bar_shows_the_keys_of_the_state(state: str, shown: set[str], hidden: set[str]) -> None:
    app = make_app(samples.fixed_options(state))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        found = set(entries(bar_text(app)))
        assert shown <= found and not hidden & found, found


async def test_the_bar_follows_the_probe_run_and_the_server() -> None:
    """Through the screen's own handlers: a finished probe run brings Probe back; a server that the
    backend reads as stopped (nothing was launched here) brings Launch back."""
    app = make_app(samples.fixed_options("probes"))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        assert "x Cancel" in entries(bar_text(app))
        app.main.post_message(ProbeFinished(app.main.probes.state))
        await pilot.pause()
        found = entries(bar_text(app))
        assert "p Probe" in found and "x Cancel" not in found
        app.main.post_message(ServerUpdated())
        await pilot.pause()
        found = entries(bar_text(app))
        assert "l Launch" in found and "s Stop" not in found and "p Probe" not in found


async def test_in_a_field_the_bar_shows_the_keys_that_still_work() -> None:
    """Letters go to the field there: the form's own key and the F-keys show instead, Quit is ctrl+q."""
    app = make_app(samples.fixed_options("ready"))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("e")
        await pilot.pause()
        found = entries(bar_text(app))
        assert found[0] == "esc Leave form" and {"f6 Restart", "f7 Stop", "f8 Probe"} <= set(found), found
        assert found[-3:] == ["f1 Help", "^q Quit", "^p palette"], found
        assert not {"r Restart", "p Probe", "e Edit", "q Quit"} & set(found), found
        await pilot.press("escape")
        await pilot.pause()
        assert entries(bar_text(app))[-3:] == ["? Help", "q Quit", "^p palette"]


async def test_the_bar_refits_on_resize() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(220, 60)) as pilot:
        await pilot.pause()
        wide = entries(bar_text(app))
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        narrow = entries(bar_text(app))
        assert len(bar_text(app)) == 100 and narrow[-3:] == wide[-3:] == ["? Help", "q Quit", "^p palette"]
        assert narrow[:-3] == wide[:len(narrow) - 3] and len(narrow) < len(wide)  # the same order, cut whole


def test_fit_keeps_rank_order_and_never_cuts() -> None:
    ranked = [("l", "Launch"), ("a", "MTP on/off"), ("e", "Edit")]
    pinned = [("?", "Help"), ("q", "Quit")]
    assert fit(ranked, pinned, 200) == (ranked, pinned)
    # "l Launch  a MTP on/off" is 22 cells, the pinned 14, a gap of 2: 38 leaves out "e Edit" too
    assert fit(ranked, pinned, 38) == (ranked[:2], pinned)
    assert fit(ranked, pinned, 37) == (ranked[:1], pinned)  # a smaller later entry never jumps the queue
    assert fit(ranked, pinned, 10) == ([], pinned[1:])


async def test_help_scrolls_at_once_with_the_usual_keys() -> None:
    for key in ("pagedown", "j", "space", "down", "end"):
        app = make_app(samples.fixed_options("idle"))
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("question_mark")
            await pilot.pause()
            box = app.screen.query_one("#help-scroll")
            assert box.scroll_y == 0 and box.max_scroll_y > 30
            await pilot.press(key)
            await pilot.wait_for_scheduled_animations()
            assert box.scroll_y > 0, key
            before = box.scroll_y
            await pilot.press("k" if key != "end" else "pageup")
            await pilot.wait_for_scheduled_animations()
            assert box.scroll_y < before, key


def test_help_lists_every_action_by_section_and_the_other_screens() -> None:
    """(The help screen shows this text: test_ui_keys.py opens it and finds every action's row.)"""
    text = help_text({})
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert [h for h in headings if h[3:] in keys.SECTIONS] == [f"## {s}" for s in keys.SECTIONS]
    for heading in ("## Tune (`T`)", "## Variants (`v`)", "## Memory (`m`)"):
        assert heading in headings
    assert "`g` Run/continue" in text and "`k` KV types" in text and "`Escape` `q` `m` Close" in text
    for section in keys.SECTIONS:  # each action sits under its own section's heading
        block = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
        listed = {a.id for a in keys.ACTIONS if f"| {a.id} |" in block}
        assert listed == {a.id for a in keys.ACTIONS if a.section == section}, section


async def test_the_memory_screen_scrolls_at_once() -> None:
    """`m`'s table did not scroll until Tab was pressed, as the help screen did."""
    from textual.containers import VerticalScroll

    from tui.ui.cockpit.reconcile_screen import ReconcileScreen
    from tui.ui.cockpit.views import ReconcileRow

    rows = tuple(ReconcileRow(f"CUDA{i // 7}", f"component {i}", 100.0 + i, 101.0 + i) for i in range(70))
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(100, 30)) as pilot:
        app.push_screen(ReconcileScreen(rows, None))
        await pilot.pause()
        box = app.screen.query_one(VerticalScroll)
        assert box.scroll_y == 0 and box.max_scroll_y > 0
        await pilot.press("pagedown")
        await pilot.wait_for_scheduled_animations()
        assert box.scroll_y > 0
