"""The profile dialog's one door to the core: TOML profiles, `--models-preset` INI sections, and
a pasted command line read by the one argv reader.

Each call returns a user-facing sentence; failures never raise into the UI. `last_launched` is the
CLI's (the settings a plain `mtp-tune` starts from), beside the profile store it reads.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tui.core.options.argv import parse_command_line
from tui.core.options.redact import REDACTED
from tui.core.options.settings import Settings


def last_launched() -> Settings | None:
    """The settings of the newest launch in the history (API key dropped: history never keeps it)."""
    # lazy: the profile store (tomli_w) loads when asked, not before the first frame
    from tui.core.presets.profiles import list_history

    try:
        entries = list_history(limit=1)
    except OSError:
        return None
    if not entries:
        return None
    settings = entries[0].settings
    return dataclasses.replace(settings, api_key=None) if settings.api_key == REDACTED else settings


class ProfilesController:
    """Save, list, load and export profiles, import a command line (small files: called on the UI thread)."""

    def save_profile(self, name: str, settings: Settings) -> tuple[str, bool]:
        # lazy: the profile store (tomli_w) loads when asked, not before the first frame
        from tui.core.presets.profiles import ProfileError, save_profile as core_save

        if not name:
            return "give the profile a name first", False
        try:
            path = core_save(name, settings)
        except (ProfileError, OSError, ValueError) as exc:
            return str(exc), False
        return f"saved profile {name!r} to {path}", True

    def list_profiles(self) -> tuple[list[str], str | None]:
        # lazy: the profile store (tomli_w) loads when asked, not before the first frame
        from tui.core.presets.profiles import ProfileError, list_profiles as core_list

        try:
            return [p.name for p in core_list()], None
        except (ProfileError, OSError) as exc:
            return [], str(exc)

    def load_profile(self, name: str) -> tuple[Settings | None, str]:
        # lazy: the profile store (tomli_w) loads when asked, not before the first frame
        from tui.core.presets.profiles import ProfileError, load_profile as core_load

        try:
            return core_load(name), f"loaded {name}"
        except (ProfileError, OSError, ValueError) as exc:
            return None, str(exc)

    def write_ini_section(self, path: str, section: str, settings: Settings) -> tuple[str, bool]:
        # lazy: the profile store (tomli_w) loads when asked, not before the first frame
        from tui.core.presets import IniWriteError, write_section

        if not path or not section:
            return "give both the preset file and the section name", False
        try:
            result = write_section(Path(path).expanduser(), section, settings)
        except IniWriteError as exc:
            return str(exc), False
        except (OSError, ValueError) as exc:
            return f"{path}: {exc}", False
        verb = "replaced" if result.replaced else "added"
        backup = f"; previous file kept as {result.backup}" if result.backup else ""
        return f"{verb} section [{section}] in {result.path}{backup}", True

    def import_command(self, text: str, base: Settings) -> tuple[Settings | None, str, bool]:
        """A pasted command line -> Settings; the message lists warnings, or the errors that stop it."""
        if not text.strip():
            return None, "paste a llama-server command line first", False
        result = parse_command_line(text)
        lines = [f"{p.severity}: {p.message}" for p in result.problems]
        if not result.ok:
            return None, " ".join(lines), False
        return result.settings, " ".join(lines), True
