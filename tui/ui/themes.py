"""Theme loading: the bundled TOML themes (wheel or repo checkout) plus the user's own.

Themes are plain TOML so users can write one without Python; colours live only in theme files and
every `.tcss` rule refers to theme variables, so any theme works on every screen.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from textual.theme import Theme

from tui.core.config.paths import config_dir

DEFAULT_THEME = "mtp-dark"
#: Custom variables the widgets use; builtin Textual themes get them derived from their own palette.
PLAN_VARIABLES: tuple[str, ...] = (
    "plan-weights", "plan-kv", "plan-draft-kv", "plan-recurrent", "plan-compute", "plan-output", "plan-other",
)
SERIES_VARIABLES: tuple[str, ...] = ("series-1", "series-2", "series-3", "series-4")
_THEME_KEYS = frozenset(
    {"name", "primary", "secondary", "warning", "error", "success", "accent", "foreground", "background",
     "surface", "panel", "boost", "dark", "luminosity_spread", "text_alpha", "variables"}
)


@dataclass(frozen=True)
class ThemeProblem:
    """A user theme file that could not be loaded, with the reason (shown as a notification)."""

    path: Path
    message: str


def bundled_theme_dirs() -> list[Path]:
    """Where the shipped themes are: `tui/themes` in a wheel, the repo's `themes/` in a checkout."""
    found: list[Path] = []
    try:
        pkg = resources.files("tui") / "themes"
        if pkg.is_dir():
            found.append(Path(str(pkg)))
    except (ModuleNotFoundError, OSError):  # pragma: no cover - tui is always importable here
        pass
    repo = Path(__file__).resolve().parents[2] / "themes"
    if repo.is_dir() and repo not in found:
        found.append(repo)
    return found


def user_theme_dir() -> Path:
    return config_dir() / "themes"


def theme_from_toml(path: Path) -> Theme:
    """Parse one theme file; raises ValueError with a message naming the file and the bad key."""
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"theme {path}: cannot be read ({exc})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"theme {path}: not valid TOML ({exc}); fix the file or remove it") from exc
    unknown = sorted(set(data) - _THEME_KEYS)
    if unknown:
        raise ValueError(f"theme {path}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_THEME_KEYS))}")
    if "primary" not in data:
        raise ValueError(f"theme {path}: 'primary' is required")
    data.setdefault("name", path.stem)
    variables = data.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ValueError(f"theme {path}: [variables] must map names to colour strings")
    try:
        theme = Theme(**data)
        theme.to_color_system().generate()  # fails early on a bad colour
    except Exception as exc:  # noqa: BLE001 - any bad value becomes one message
        raise ValueError(f"theme {path}: {exc}") from exc
    return theme


def load_themes() -> tuple[list[Theme], list[ThemeProblem]]:
    """Bundled themes first, then user themes (a user theme with the same name replaces a bundled one)."""
    themes: dict[str, Theme] = {}
    problems: list[ThemeProblem] = []
    dirs = bundled_theme_dirs()
    user = user_theme_dir()
    for d in [*dirs, user]:
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.toml")):
            try:
                theme = theme_from_toml(path)
            except ValueError as exc:
                problems.append(ThemeProblem(path, str(exc)))
                continue
            themes[theme.name] = theme
    return list(themes.values()), problems


def derived_defaults(variables: dict[str, str]) -> dict[str, str]:
    """Plan and series colours for themes that do not define them (Textual's builtin themes)."""
    pick = {
        "plan-weights": "primary",
        "plan-kv": "secondary",
        "plan-draft-kv": "accent",
        "plan-recurrent": "success",
        "plan-compute": "warning",
        "plan-output": "foreground-muted",
        "plan-other": "panel-lighten-2",
        "series-1": "primary",
        "series-2": "accent",
        "series-3": "success",
        "series-4": "secondary",
    }
    return {name: variables.get(src, variables.get("primary", "ansi_blue")) for name, src in pick.items()}
