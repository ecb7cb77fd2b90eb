"""Repair a `--models-preset` file that llama-server refuses because of removed options, in place.

Why: guides print presets with options b11434 removed (`mmap = 1`, `no-mmap = true`,
`draft-max = 4`); the router refuses the whole file (or the model fails to start), and the user
only wants the old meaning back. Each removed key is migrated to its replacement from the options
table's `REMOVED` records (`mmap = 1` -> `load-mode = mmap`, `draft-max = 4` ->
`spec-draft-n-max = 4`); only the key and value of those lines change, so every other byte (comments,
blank lines, line endings, the comment after a value) stays. Anything that cannot be migrated
unambiguously is refused with the line and the reason, and nothing is written. The write reuses the
preset module's atomic writer, with the old file kept as `FILE.bak`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tui.core.options import FIELD_BY_NAME, REMOVED_ENV, RemovedOption, find_removed
from tui.core.options.removed import replacement_value
from tui.core.presets.parse import parse_preset
from tui.core.presets.types import IniLine, IniProblem
from tui.core.presets.write import atomic_write_bytes


class PresetFixError(Exception):
    """The file cannot be repaired automatically; the message names the line and what to do."""


@dataclass(frozen=True)
class FixChange:
    """One repaired line: what it said and what it says now (`new` None: the line was deleted)."""

    line: int
    section: str
    old: str
    new: str | None
    note: str

    def __str__(self) -> str:
        after = "deleted" if self.new is None else self.new
        return f"line {self.line} [{self.section}]: {self.old} -> {after} ({self.note})"


@dataclass
class FixResult:
    path: Path
    changes: list[FixChange]
    text: str  # the repaired file
    written: bool
    backup: Path | None = None
    #: With `section`: what still makes llama-server refuse the file, outside that section.
    remaining: list[IniProblem] = field(default_factory=list)


def removed_record(key: str) -> RemovedOption | None:
    """The removal record for a preset key: a spelling without dashes or a removed env name."""
    return REMOVED_ENV.get(key) or (None if key.startswith("LLAMA_ARG_") else find_removed(key))


def migrated(removed: RemovedOption, value: str) -> tuple[str, str] | None:
    """(replacement key, value) for a removed key's value; None when the line means nothing now
    (`mlock = 0`). Raises PresetFixError when the option has no single replacement."""
    if removed.field is None:
        raise PresetFixError(f"it has no single replacement; use {removed.replacement}")
    key = FIELD_BY_NAME[removed.field].option.ini_key
    new = replacement_value(removed, value)
    return None if new is None else (key, new)


def plan_fix(text: str, section: str | None = None) -> tuple[str, list[FixChange]]:
    """The repaired text and its changes (pure). `section`: repair only that section (and no `[*]`)."""
    pf = parse_preset(text)
    if section is not None and section not in pf.sections and pf.model(section) is None:
        known = ", ".join(s.name for s in pf.sections.values()) or "none"
        raise PresetFixError(f"--section {section}: no such section in the file (sections: {known}).")
    units = {(u.line, u.key): u for u in pf.lines if u.kind == "kv"}
    edits: list[tuple[IniLine, tuple[str, str] | None, FixChange]] = []
    for sec in pf.sections.values():
        if section is not None and section not in (sec.name, sec.model_name):
            continue
        present = {e.option.ini_key for e in sec.entries if e.option is not None and removed_record(e.key) is None}
        targets: dict[str, list[tuple[IniLine, str, FixChange]]] = {}
        for e in sec.entries:
            removed = removed_record(e.key)
            if removed is None:
                continue
            u = units[(e.line, e.key)]
            old = f"{e.key} = {e.value}"
            try:
                new = migrated(removed, e.value)
            except PresetFixError as exc:
                raise PresetFixError(f"line {e.line} [{sec.name}]: {e.key} was removed and cannot be migrated: {exc}. "
                                     "Edit that line by hand; nothing was changed.") from None
            if new is None:
                edits.append((u, None, FixChange(e.line, sec.name, old, None, f"{e.key} off is the default now")))
                continue
            key, value = new
            if key in present:
                raise PresetFixError(f"line {e.line} [{sec.name}]: {e.key} was removed, and the section already sets "
                                     f"{key}; keep one of the two by hand. Nothing was changed.")
            targets.setdefault(key, []).append((u, value, FixChange(e.line, sec.name, old, f"{key} = {value}",
                                                                    f"{e.key} was removed; {removed.replacement}")))
        for key, items in targets.items():
            values = {v for _, v, _ in items}
            if values == {"mmap", "mlock"}:
                values = {"mmap+mlock"}  # what `mmap = 1` plus `mlock = 1` meant together
            if len(values) > 1:
                lines = ", ".join(str(c.line) for _, _, c in items)
                raise PresetFixError(f"lines {lines} [{sec.name}]: removed keys that map to {key} disagree "
                                     f"({' vs '.join(sorted(values))}); keep one by hand. Nothing was changed.")
            (value,) = values
            # The last line carries the setting; earlier ones for the same option go.
            for u, _, c in items[:-1]:
                edits.append((u, None, FixChange(c.line, c.section, c.old, None, f"merged into line {items[-1][2].line}")))
            u, _, c = items[-1]
            edits.append((u, (key, value), FixChange(c.line, c.section, c.old, f"{key} = {value}", c.note)))
    out = text
    for u, repl, _ in sorted(edits, key=lambda x: x[0].start, reverse=True):
        out = out[:u.start] + (_rewrite(text[u.start:u.end], u, *repl) if repl is not None else "") + out[u.end:]
    changes = sorted((c for _, _, c in edits), key=lambda c: c.line)
    return out, changes


def _rewrite(line: str, u: IniLine, key: str, value: str) -> str:
    """The line with its key and value replaced; blanks around `=`, comment and line ending kept."""
    assert u.key is not None and u.value is not None
    tail = len(u.value) + len(u.after)
    middle = line[len(u.key):len(line) - tail]  # e.g. " = "
    return key + middle + value + u.after


def fix_preset(path: str | os.PathLike[str], section: str | None = None, *, dry_run: bool = False,
               backup: bool = True) -> FixResult:
    """Repair the preset at `path` in place (see the module docstring). Raises PresetFixError or
    FileNotFoundError; refuses when the result would still be refused by llama-server (with
    `section`: because of that section; what other sections still break is in `remaining`)."""
    target = Path(os.path.realpath(path))
    if not target.exists():
        raise FileNotFoundError(f"{path}: no such preset file.")
    text = target.read_bytes().decode("utf-8", errors="surrogateescape")
    new, changes = plan_fix(text, section)
    after = parse_preset(new, target)
    left = [p for p in after.problems if p.rejects or (p.severity == "error" and p.key and removed_record(p.key))]
    scope = [p for p in left if section is None or p.section in (section, None)]
    if scope or (section is None and not after.server_accepts):
        first = (scope or left)[0]
        raise PresetFixError(f"{target} would still be refused after migrating removed options: {first}. "
                             "Fix that by hand (`mtp-tune profile check` lists every problem); nothing was changed.")
    if dry_run or not changes:
        return FixResult(target, changes, new, False, remaining=left)
    bak = None
    if backup:
        bak = target.with_name(target.name + ".bak")
        shutil.copy2(target, bak)
    atomic_write_bytes(target, new.encode("utf-8", errors="surrogateescape"))
    return FixResult(target, changes, new, True, bak, left)


__all__ = ["FixChange", "FixResult", "PresetFixError", "fix_preset", "migrated", "plan_fix",
           "removed_record"]
