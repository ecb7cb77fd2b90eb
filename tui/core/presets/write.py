"""Safe preset writes: replace one section, keep every other byte, atomically, with a backup."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tui.core.options.settings import Settings
from tui.core.presets.types import DEFAULT_SECTION, IniWriteError
from tui.core.presets.parse import parse_preset, scan
from tui.core.presets.convert import section_text, settings_to_entries

#: The mode of a file that holds a secret (an API key): its owner's only.
PRIVATE = 0o600


# --------------------------------------------------------------------------- safe write


@dataclass
class WriteResult:
    path: Path
    backup: Path | None
    replaced: bool
    removed_duplicates: int = 0


def _detect_newline(text: str) -> str:
    m = re.search(r"\r\n|\n|\r", text)
    return m.group(0) if m else "\n"


def replace_section_text(text: str, name: str, new_section: str) -> tuple[str, bool, int]:
    """`text` with section `name` replaced by `new_section` (or appended); returns (text, replaced, dups removed).

    A section's block runs from its header to the next header; comment and blank lines just before
    the next header stay (they usually describe the next section). Later duplicates of the section
    are removed so the written one is the one the server uses.
    """
    lines, _ = scan(text)
    blocks: list[tuple[int, int]] = []
    for idx, u in enumerate(lines):
        if u.kind == "header" and u.name == name:
            j = idx + 1
            while j < len(lines) and lines[j].kind != "header":
                j += 1
            k = j
            while k > idx + 1 and lines[k - 1].kind in ("comment", "blank"):
                k -= 1
            end = lines[k - 1].end
            blocks.append((u.start, end))
    nl = _detect_newline(text)
    if not blocks:
        prefix = text
        if prefix and not prefix.endswith(("\n", "\r")):
            prefix += nl
        unified = prefix[-64:].replace("\r\n", "\n").replace("\r", "\n")
        if prefix.strip() and not re.search(r"\n[ \t]*\n$", unified):
            prefix += nl
        return prefix + new_section, False, 0
    out = text
    for start, end in reversed(blocks[1:]):
        out = out[:start] + out[end:]
    start, end = blocks[0]
    return out[:start] + new_section + out[end:], True, len(blocks) - 1


def write_section(
    path: str | os.PathLike[str],
    name: str,
    settings: Settings,
    *,
    preset_only: dict[str, str] | None = None,
    accepted: frozenset[str] | None = None,
    backup: bool = True,
) -> WriteResult:
    """Add or replace section `name` in the preset at `path`, keeping everything else byte for byte.

    Refuses (IniWriteError) when a value would be cut or rejected, or when the result would be
    refused by llama-server. The previous file is kept as `FILE.bak`; the write is atomic
    (temp file in the same directory, fsync, `os.replace`) and keeps the file's permissions.
    """
    target = Path(os.path.realpath(path))
    old = target.read_bytes().decode("utf-8", errors="surrogateescape") if target.exists() else ""
    if old:
        before = parse_preset(old, target, accepted=accepted)
        if not before.server_accepts:
            first = next(p for p in before.problems if p.rejects)
            raise IniWriteError(f"{target} is already refused by llama-server ({first}); fix it first, mtp-tune will not write into it.")
        implicit = before.sections.get(DEFAULT_SECTION)
        if name == DEFAULT_SECTION and implicit is not None and implicit.line is None and implicit.entries:
            raise IniWriteError(f"{target} starts with keys before any section, which llama-server already reads as model 'default'; a [default] section would silently replace them. Choose another section name.")
    nl = _detect_newline(old) if old else "\n"
    if preset_only is None and old:
        # keep the section's own load-on-startup / stop-timeout / dedup-cache-models
        prev = before.sections.get(name)
        preset_only = {e.option.ini_key: e.value for e in (prev.options().values() if prev else []) if e.option and e.option.preset_only}
    section = section_text(name, settings_to_entries(settings, name, preset_only), nl)
    if not old:
        new, replaced, dups = "version = 1" + nl + nl + section, False, 0
    else:
        new, replaced, dups = replace_section_text(old, name, section)
    after = parse_preset(new, target, accepted=accepted)
    bad = [p for p in after.problems if p.rejects or (p.severity == "error" and p.section == name)]
    if bad:
        listing = "; ".join(str(p) for p in bad[:5])
        raise IniWriteError(f"not written: llama-server would reject or misread {target}: {listing}")
    if after.model(name) is None:
        raise IniWriteError(f"not written: section [{name}] would not be read back as a model.")
    bak: Path | None = None
    if backup and target.exists():
        bak = target.with_name(target.name + ".bak")
        shutil.copy2(target, bak)
    atomic_write_bytes(target, new.encode("utf-8", errors="surrogateescape"))
    return WriteResult(target, bak, replaced, dups)


def atomic_write_bytes(target: Path, data: bytes, mode: int | None = None) -> None:
    """Write `data` to `target` atomically: temp file in the same directory, fsync, rename.

    The temp file is created 0600 (mkstemp: os.open with O_EXCL and mode 0600), so `data` is never
    readable by others while it is written. It ends with `mode` if given (`PRIVATE` for a secret:
    never widened, even over an existing 0644 file), else the existing file's mode, else 0600."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode is None and target.exists():
        mode = target.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None and mode != PRIVATE:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
