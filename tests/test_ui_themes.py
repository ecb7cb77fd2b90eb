"""Themes: the bundled ones load from the package or the checkout, user themes from the config dir,
bad files are reported (not raised), and `.tcss` never hard-codes a colour."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tui.core.config.paths import config_dir
from tests.helpers import ui_samples as samples
from tui.ui.app import make_app
from tui.ui.themes import bundled_theme_dirs, load_themes, theme_from_toml

UI = Path(__file__).resolve().parents[1] / "tui" / "ui"
HEX = re.compile(r"#[0-9a-fA-F]{3,8}\b")


def test_bundled_themes_include_dark_light_and_colour_blind() -> None:
    themes, problems = load_themes()
    names = {t.name: t for t in themes}
    assert not problems
    assert {"mtp-dark", "mtp-light", "mtp-okabe-ito"} <= set(names)
    assert names["mtp-dark"].dark and not names["mtp-light"].dark
    assert bundled_theme_dirs(), "the themes directory must be found in a checkout or a wheel"


def test_no_hex_colours_in_css() -> None:
    """Colours only through theme variables, in .tcss files and in widgets' DEFAULT_CSS."""
    offenders = []
    for path in [*UI.rglob("*.tcss"), *UI.rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        css_blocks = re.findall(r'DEFAULT_CSS = """(.*?)"""', text, re.S) if path.suffix == ".py" else [text]
        for block in css_blocks:
            offenders += [f"{path.name}: {m}" for m in HEX.findall(block)]
    assert not offenders


def test_user_theme_loaded_and_bad_one_reported() -> None:
    user = config_dir() / "themes"
    user.mkdir(parents=True)
    (user / "mine.toml").write_text('name = "user-mine"\nprimary = "#ff8800"\ndark = true\n')
    (user / "broken.toml").write_text('name = "user-broken"\nprimary = \n')
    (user / "typo.toml").write_text('name = "user-typo"\nprimary = "#ff8800"\nprimry = "#000000"\n')
    themes, problems = load_themes()
    assert "user-mine" in {t.name for t in themes}
    bad = {p.path.name: p.message for p in problems}
    assert set(bad) == {"broken.toml", "typo.toml"}
    assert "not valid TOML" in bad["broken.toml"]
    assert "primry" in bad["typo.toml"]


def test_theme_file_needs_primary(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text('name = "x"\n')
    with pytest.raises(ValueError, match="'primary' is required"):
        theme_from_toml(path)


async def test_theme_switch_at_run_time() -> None:
    """`t` cycles the themes while running; the plan colours follow the theme's variables."""
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        seen = [app.theme]
        colours = [app.theme_variables["plan-weights"]]
        for _ in range(2):
            await pilot.press("t")
            await pilot.pause()
            seen.append(app.theme)
            colours.append(app.theme_variables["plan-weights"])
        assert len(set(seen)) == 3
        assert len(set(colours)) == 3


async def test_builtin_theme_gets_plan_colours() -> None:
    """A Textual builtin theme has no plan-* variables; they are derived so the CSS still parses."""
    app = make_app(samples.fixed_options("idle", theme="textual-light"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.theme == "textual-light"
        assert app.theme_variables["plan-kv"] == app.theme_variables["secondary"]
