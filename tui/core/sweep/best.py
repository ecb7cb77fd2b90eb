"""Saving a sweep's best configuration as a TOML profile and a `--models-preset` INI section, in one step."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tui.core.options.settings import Settings
from tui.core.sweep.results import SweepTable


@dataclass
class SavedBest:
    profile_path: Path
    ini_path: Path
    section: str
    settings: Settings


def save_best(table: SweepTable, name: str, *, ini_path: str | Path | None = None) -> SavedBest:
    """Save the best configuration as profile `name` (TOML) and as section `[name]` of a
    `--models-preset` INI file (default: `config_dir()/presets.ini`), in one step.

    Both are checked before either is written: a name or value the INI cannot hold leaves neither
    file changed. Raises ValueError with a one-paragraph message when there is no best.
    """
    if table.best is None:
        raise ValueError("the sweep has no measured configuration yet, so there is no best to save; run it first.")
    settings = table.best_settings()
    assert settings is not None
    return save_settings(settings, name, ini_path=ini_path)


def save_settings(settings: Settings, name: str, *, ini_path: str | Path | None = None) -> SavedBest:
    """`save_best` for settings chosen elsewhere (the tune's best): profile `name` and INI section `[name]`."""
    from tui.core import presets as preset_ini
    from tui.core.presets import profiles
    from tui.core.config.paths import config_dir

    settings = Settings(**{**settings.__dict__, "port": None, "api_key": None})
    profiles.check_name(name)
    target = Path(ini_path) if ini_path is not None else config_dir() / "presets.ini"
    # Check the INI side first, so a refusal leaves the profile unwritten too.
    preset_ini.settings_to_ini(name, settings)
    if target.exists():
        existing = preset_ini.read_preset(target)
        if not existing.server_accepts:
            first = next((p for p in existing.problems if p.rejects), None)
            raise preset_ini.IniWriteError(f"{target} is already refused by llama-server ({first}); fix it first, "
                                           "nothing was saved.")
    profile_path = profiles.save_profile(name, settings)
    res = preset_ini.write_section(target, name, settings)
    return SavedBest(profile_path, res.path, name, settings)
