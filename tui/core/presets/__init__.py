"""Saved configurations: llama-server `--models-preset` INI files and mtp-tune's TOML profiles.

Layout: `types` (lines, entries, sections, problems, router constants), `parse` (the reader, exactly
as llama-server b11434 parses a preset), `checks` (every finding, with its line), `convert`
(Settings <-> section, the args the router gives a model), `write` (one section replaced atomically,
with a backup), `profiles` (TOML profiles and the launch history). The INI API is re-exported here.
"""

from tui.core.presets.convert import (
    render_args,
    settings_from_options,
    settings_from_section,
    settings_to_entries,
    settings_to_ini,
    section_text,
)
from tui.core.presets.parse import parse_preset, read_preset, scan
from tui.core.presets.types import (
    DEFAULT_MODELS_MAX,
    DEFAULT_SECTION,
    GLOBAL_SECTION,
    PRESET_ONLY_KEYS,
    RESERVED_ENV,
    IniEntry,
    IniLine,
    IniProblem,
    IniSection,
    IniWriteError,
    PresetFile,
    bool_value,
    canonical_name,
)
from tui.core.presets.write import WriteResult, atomic_write_bytes, replace_section_text, write_section

__all__ = [
    "DEFAULT_MODELS_MAX", "DEFAULT_SECTION", "GLOBAL_SECTION", "PRESET_ONLY_KEYS", "RESERVED_ENV", "IniEntry",
    "IniLine", "IniProblem", "IniSection", "IniWriteError", "PresetFile", "WriteResult", "atomic_write_bytes",
    "bool_value", "canonical_name", "parse_preset", "read_preset", "render_args", "replace_section_text", "scan",
    "section_text", "settings_from_options", "settings_from_section", "settings_to_entries", "settings_to_ini",
    "write_section",
]
