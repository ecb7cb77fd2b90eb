"""Every action is reachable from the keyboard: bindings, the help screen, the command palette, all
built from the one table (`tui.ui.keys`), and a user's `[keymap]` moves a key everywhere."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from tests.helpers import ui_samples as samples
from tui.ui import keys
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.help_screen import HelpScreen, help_text
from tui.ui.cockpit.key_bar import KeyBar
from tui.ui.cockpit.screen import MainScreen
from tui.ui.runs.screen import RunsScreen

TUI_UI = Path(__file__).resolve().parents[1] / "tui" / "ui"


def test_every_binding_has_an_action_an_id_and_is_documented() -> None:
    text = help_text({})
    for owner in (MainScreen, MtpTuneApp):
        for binding in owner.BINDINGS:
            assert binding.id, binding  # type: ignore[union-attr]
            namespace, _, action = binding.action.rpartition(".")  # type: ignore[union-attr]
            target = MtpTuneApp if namespace == "app" or owner is MtpTuneApp else MainScreen
            assert hasattr(target, f"action_{action}"), binding.action  # type: ignore[union-attr]
    for action in keys.ACTIONS:
        assert f"`{keys.key_label(action.key)}`" in text, f"{action.id} is not in the help screen"


def _help_ids(text: str) -> list[str]:
    """The actions the help screen lists, by their line (each line is one table row)."""
    return [a.id for a in keys.ACTIONS if f"| {a.help} | {a.id} |" in text]


async def test_key_bar_help_and_palette_list_the_same_ids_from_the_one_table() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(220, 60)) as pilot:
        await pilot.pause()
        bar = app.screen.query_one(KeyBar)
        ranked, pinned = bar.entries()
        want, want_pinned = keys.bar(bar.tags)
        assert [label for _, label in ranked] == [a.label for a in want]
        assert [a.id for a in want_pinned] == ["help", "quit", "quit_now", "palette"]  # ctrl+q: Quit while typing
        assert pinned == [("?", "Help"), ("q", "Quit"), ("^p", "palette")]
        drawn = bar.render_line(0).text
        assert all(f"{key} {label}" in drawn for key, label in ranked + pinned)  # 220 columns hold them all
        palette = {c.title for c in app.get_system_commands(app.screen)}
        ours = {a.palette[0]: a.id for a in keys.ACTIONS if a.palette}
        assert set(ours) <= palette and {ours[t] for t in palette & set(ours)} == {a.id for a in keys.palette("main")}
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert _help_ids(app.screen.text) == [a.id for a in keys.ACTIONS]
        # the palette on another screen offers no main-screen action
        assert not {c.title for c in app.get_system_commands(app.screen)} & set(ours)


def test_every_action_has_a_section_and_the_bar_knows_its_states() -> None:
    for action in keys.ACTIONS:
        assert action.section in keys.SECTIONS, action.id
        assert action.when <= keys.STATE_TAGS, action.id
        assert not (action.rank and action.pinned), action.id
    always = [a.rank for a in keys.ACTIONS if a.rank and not a.when]
    assert len(set(always)) == len(always)  # one order for the keys every state shows


def _config(text: str) -> Path:
    path = Path(os.environ["MTP_TUNE_CONFIG_DIR"]) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _notes(app: MtpTuneApp) -> list[str]:
    return [n.message for n in app._notifications]


async def test_a_keymap_moves_probe_to_P_everywhere() -> None:
    _config('[keymap]\nprobe = "P"\nhelp = "f2,question_mark"\n[keymap.typing]\nprobe = "f12"\n')
    app = make_app(samples.fixed_options("ready"))
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("p")
        await pilot.pause()
        assert not any("fixed preview" in n for n in _notes(app))  # p no longer probes
        await pilot.press("P")
        await pilot.pause()
        assert any("fixed preview" in n for n in _notes(app))  # P does (a preview refuses to run it)
        drawn = app.screen.query_one(KeyBar).render_line(0).text
        assert "P Probe" in drawn and "p Probe" not in drawn
        assert "f2 Help" in drawn and "? Help" not in drawn  # the user's first key, not the table's `?`
        await pilot.press("question_mark")
        await pilot.pause()
        assert "| `P` | `F12` | run the chosen probe suite | probe |" in app.screen.text  # type: ignore[attr-defined]


async def test_a_bad_keymap_is_named_by_file_and_line_and_the_app_starts() -> None:
    path = _config('[keymap]\nlaunch = "L"\nprobbe = "P"\nstop = "ctrl+"\nrestart = 5\n')
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.pause()
        notes = _notes(app)
        assert any(f"{path}, line 3" in n and "unknown id 'probbe'" in n for n in notes), notes
        assert any(f"{path}, line 4" in n and "stop:" in n for n in notes), notes
        assert any(f"{path}, line 5" in n and "restart: give the key as a string" in n for n in notes), notes
        assert isinstance(app.screen, MainScreen)
        assert "L Launch" in app.screen.query_one(KeyBar).render_line(0).text  # the good line applies
        active = {b.binding.id: key for key, b in app.screen.active_bindings.items()}
        assert active["launch"] == "L" and active["stop"] == "s"  # the bad one leaves the default


async def test_a_keymap_that_is_not_toml_is_named_and_the_defaults_stay() -> None:
    path = _config('[keymap]\nprobe = "P"\nstop = \n')
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("p")
        await pilot.pause()
        notes = _notes(app)
        assert any(f"{path}, line 3" in n and "not valid TOML" in n for n in notes), notes
        assert any("fixed preview" in n for n in notes)  # p still probes


async def test_help_opens_and_closes() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


async def test_command_palette_reaches_the_runs_view() -> None:
    app = make_app(samples.fixed_options("runs"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Runs")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not isinstance(app.screen, RunsScreen):
            await pilot.press("enter")
            await pilot.pause(0.2)
        assert isinstance(app.screen, RunsScreen)


async def test_main_screen_keys_do_not_fire_in_dialogs() -> None:
    """`p` in the runs view must not probe (main-screen keys are scoped to the main screen, no guard);
    the footer there shows the view's own keys, and quitting still works."""
    app = make_app(samples.fixed_options("runs"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("h")
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("p", "l", "w")
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen) and not _notes(app)
        shown = {b.binding.id for b in app.screen.active_bindings.values()}
        assert not shown & {a.id for a in keys.ACTIONS if a.scope == "main"}
        assert "quit_now" in shown  # ctrl+q (q closes the runs view)
        await pilot.press("escape", "p")  # back on the main screen, p is a probe again
        await pilot.pause()
        assert any("fixed preview" in n for n in _notes(app))


def test_no_widget_or_screen_reaches_into_the_apps_privates() -> None:
    """Widgets, screens and controllers use the App's public API, typed (`cast("MtpTuneApp", ...)`)."""
    offenders = []
    for path in TUI_UI.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for pattern in (r"\bapp\._[a-z]", r"\bapp: Any\b", r"getattr\(self\.app\b", r"self\.app\.(options|backend)\b"):
            offenders += [f"{path.relative_to(TUI_UI)}: {m.group(0)}" for m in re.finditer(pattern, text)]
    assert offenders == []
