"""The profile dialog: save writes a TOML profile the core reads back, write adds an INI section the
core's preset parser accepts, load and import put settings into the form."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Input, OptionList, TextArea

from tui.core.presets import read_preset, settings_from_section
from tui.core.presets.profiles import load_profile, profiles_dir, save_profile
from tui.core.options.settings import Settings
from tests.helpers import ui_samples as samples
from tui.ui.app import make_app
from tui.ui.profiles.screen import ProfileDialog


async def open_dialog(pilot) -> ProfileDialog:  # noqa: ANN001 - Pilot
    await pilot.press("f")
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, ProfileDialog)
    return screen


async def test_save_writes_a_profile() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        await open_dialog(pilot)
        await pilot.press(*"laptop-mtp", "enter")
        await pilot.pause()
        result = str(app.screen.query_one("#profile-result").render())
        assert "saved profile" in result
    path = profiles_dir() / "laptop-mtp.toml"
    assert path.is_file()
    assert load_profile("laptop-mtp") == samples.settings()


async def test_bad_profile_name_is_explained() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        dialog = await open_dialog(pilot)
        await pilot.press(*"bad name/x", "enter")
        await pilot.pause()
        assert dialog.query_one("#profile-result").has_class("-error")
    assert not (profiles_dir().is_dir() and list(profiles_dir().glob("*.toml")))


async def test_write_ini_section(tmp_path: Path) -> None:
    ini = tmp_path / "models.ini"
    ini.write_text("version = 1\n\n; keep me\n[other]\nmodel = /x/other.gguf\nctx-size = 2048\n")
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        dialog = await open_dialog(pilot)
        dialog.query_one("#profile-tabs").active = "tab-ini"
        await pilot.pause()
        dialog.query_one("#ini-path", Input).value = str(ini)
        dialog.query_one("#ini-section", Input).focus()
        await pilot.press(*"qwen-mtp", "enter")
        await pilot.pause()
        assert "added section [qwen-mtp]" in str(dialog.query_one("#profile-result").render())
    text = ini.read_text()
    assert "; keep me" in text and "[other]" in text
    preset = read_preset(ini)
    assert preset.ok
    settings, _extra, problems = settings_from_section(preset, "qwen-mtp")
    assert settings.ctx_size == 16384 and settings.spec_draft_n_max == 2
    assert (tmp_path / "models.ini.bak").is_file()


async def test_load_profile_fills_the_form() -> None:
    save_profile("small", Settings(model="/m/small.gguf", ctx_size=2048, parallel=1))
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        dialog = await open_dialog(pilot)
        dialog.query_one("#profile-tabs").active = "tab-load"
        await pilot.pause()
        options = dialog.query_one("#profile-list", OptionList)
        options.focus()
        options.highlighted = 0
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, ProfileDialog)
        assert app.main.plan.settings.ctx_size == 2048 and app.main.plan.settings.model == "/m/small.gguf"
        assert app.query_one("#f-ctx_size", Input).value == "2048"


async def test_import_command_line() -> None:
    app = make_app(samples.fixed_options("idle"))
    command = (
        "llama-server -m /models/q.gguf -c 32768 \\\n  --spec-type draft-mtp --spec-draft-n-max 2 "
        "-ctkd q8_0 -ctvd q8_0 --no-mmap -np 1"
    )
    async with app.run_test(size=(120, 40)) as pilot:
        dialog = await open_dialog(pilot)
        dialog.query_one("#profile-tabs").active = "tab-import"
        await pilot.pause()
        dialog.query_one("#import-text", TextArea).text = command
        dialog.query_one("#import").press()
        await pilot.pause()
        assert app.main.plan.settings.ctx_size == 32768
        assert app.main.plan.settings.spec_type == ["draft-mtp"] and app.main.plan.settings.cache_type_k_draft == "q8_0"
        assert app.main.plan.settings.load_mode == "none"  # removed --no-mmap translated by the core


async def test_import_with_errors_is_refused() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        dialog = await open_dialog(pilot)
        dialog.query_one("#profile-tabs").active = "tab-import"
        await pilot.pause()
        dialog.query_one("#import-text", TextArea).text = "llama-server -m 'unclosed"
        dialog.query_one("#import").press()
        await pilot.pause()
        assert isinstance(app.screen, ProfileDialog)
        assert dialog.query_one("#profile-result").has_class("-error")
        assert app.main.plan.settings == samples.settings()
