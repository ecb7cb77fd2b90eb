"""The user's `[keymap]` in config.toml: binding ids to keys (`probe = "P"`), as Posting and Harlequin do.

A pure reader: it validates ids against the ones the UI knows and keys against the key names
terminals send (`P`, `ctrl+r`, `f8`, `question_mark`), and returns what it could use with one
problem per thing it could not, each naming the file, the line and the id. Nothing here is fatal: a
bad line is reported and skipped, the rest of the keymap applies.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui.core.config.paths import config_dir

SECTION = "keymap"
MODIFIERS = frozenset({"ctrl", "shift", "alt", "meta", "super", "hyper"})
#: Keys that are not characters (characters go by themselves, `P`, or by their Unicode name, `question_mark`).
NAMED_KEYS = frozenset(
    {"escape", "enter", "tab", "space", "backspace", "delete", "insert", "home", "end", "pageup", "pagedown",
     "up", "down", "left", "right", *(f"f{n}" for n in range(1, 25))}
)


@dataclass(frozen=True)
class KeymapProblem:
    """One keymap line that was not applied, and why (shown as a notification)."""

    path: Path
    line: int | None
    binding_id: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.path}, line {self.line}" if self.line else str(self.path)
        return f"{where}: {self.message}"


def config_file() -> Path:
    """`config.toml` in the config directory."""
    return config_dir() / "config.toml"


def key_problem(keys: str) -> str | None:
    """Why `keys` (one key or a comma-separated list) is not a key a terminal sends; None when it is."""
    if not keys.strip():
        return "no key given"
    for key in keys.split(","):
        key = key.strip()
        if not key:
            return f"{keys!r} has an empty key between commas (no key given)"
        parts = key.split("+")
        *mods, name = parts
        if not name:
            return f"{key!r} ends in '+' with no key after it"
        bad = [m for m in mods if m.lower() not in MODIFIERS]
        if bad:
            return f"{key!r}: {bad[0]!r} is not a modifier (ctrl, shift, alt, meta, super or hyper)"
        if len(name) == 1:
            if not name.isprintable() or name.isspace():
                return f"{key!r} is not a printable key"
            continue
        if name.lower() in NAMED_KEYS or _character_name(name):
            continue
        return f"{key!r} is not a key name (a character like P, or f1-f24, escape, enter, tab, space, up, ...)"
    return None


def _character_name(name: str) -> bool:
    """`question_mark`, `full_stop`, `hyphen_minus`: a character by its Unicode name (Textual's spelling)."""
    for spelled in (name.replace("_", " "), name.replace("_", "-")):
        try:
            unicodedata.lookup(spelled)
            return True
        except KeyError:
            continue
    return False


def read_keymap(path: Path, known: Collection[str]) -> tuple[dict[str, str], tuple[KeymapProblem, ...]]:
    """The `[keymap]` of `path` as {id: keys}, and the problems (unknown ids, bad keys, bad TOML).
    A missing file is an empty keymap."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, ()
    except (OSError, UnicodeDecodeError) as exc:
        return {}, (KeymapProblem(path, None, None, f"cannot be read: {exc}"),)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"at line (\d+)", str(exc))
        reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        return {}, (KeymapProblem(path, int(found.group(1)) if found else None, None, f"not valid TOML: {reason}"),)
    section = data.get(SECTION, {})
    if not isinstance(section, Mapping):
        return {}, (KeymapProblem(path, _line(text, None, SECTION), None, f"[{SECTION}] must be a table of id = \"key\""),)
    keymap: dict[str, str] = {}
    problems: list[KeymapProblem] = []
    for binding_id, value in _flatten(section):
        line = _line(text, binding_id)
        if binding_id not in known:
            problems.append(KeymapProblem(path, line, binding_id, f"unknown id {binding_id!r} in [{SECTION}] (ignored; "
                                          f"the help screen lists the ids)"))
            continue
        if not isinstance(value, str):
            problems.append(KeymapProblem(path, line, binding_id,
                                          f"{binding_id}: give the key as a string, e.g. {binding_id} = \"P\""))
            continue
        why = key_problem(value)
        if why:
            problems.append(KeymapProblem(path, line, binding_id, f"{binding_id}: {why}"))
            continue
        keymap[binding_id] = ",".join(k.strip() for k in value.split(","))
    return keymap, tuple(problems)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """`[keymap.typing] probe = "f8"` is the id `typing.probe`."""
    out: list[tuple[str, Any]] = []
    for key, value in table.items():
        if isinstance(value, Mapping):
            out += _flatten(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _line(text: str, binding_id: str | None, section: str | None = None) -> int | None:
    """The line where `binding_id` is set (by its last part, after a `[keymap...]` header), or where
    `section` is, 1-based; None when it cannot be told."""
    inside = False
    last = binding_id.split(".")[-1] if binding_id else None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("["):
            header = line.strip("[] ").split("#")[0].strip()
            inside = header == SECTION or header.startswith(SECTION + ".")
            if section is not None and header == section:
                return number
            continue
        if section is not None and re.match(rf"{re.escape(section)}\s*=", line):
            return number
        if inside and last is not None and re.match(rf"""["']?{re.escape(binding_id or '')}["']?\s*=|["']?{re.escape(last)}["']?\s*=""", line):
            return number
    return None
