"""The two sides of `mtp-tune ab A B` (and the TUI's A/B against a profile or another build): what
each side is, read through the reader that owns its format, checked by the one validator against
its own build's `--help`, and what differs between them in llama-server's spelling.

A side is written as one of (`read_side`):

* `NAME`: a saved profile (`mtp-tune profile list`);
* `FILE:SECTION`: a section of a `--models-preset` INI file (`presets.ini:fast`, `[*]` cascaded as
  llama-server does);
* a pasted command, quoted (anything with a space): `"llama-server -m model.gguf -ngl 99"`; a
  binary written as a path (`/opt/b2/llama-server ...`) is that side's build;
* `base`: the llama-server flags given to the command after the sides;
* `+FLAGS`: those flags with changes after them (`"+-ctk q8_0 -ctv q8_0"`; the later value wins,
  as llama-server reads a repeated option).

Why every format is read into `Settings` by its own reader (`profiles`, `presets`, `argv`) and then
validated once: a side reaches the launcher the same way whatever it was written as, and a problem
is said in the one validator's words, prefixed with the side and its build ("B (build 11434):
--spec-draft-p-min is not accepted by this build of llama-server"). The build's options come from
its own `--help` (`server.binary.probe`), so two builds are each held to what they accept, before
anything launches.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tui.core.options.argv import parse_command_line, settings_from_argv, split_command
from tui.core.options.diff import settings_changes
from tui.core.options.problems import Problem, errors
from tui.core.options.redact import redact_argv
from tui.core.options.settings import Settings, settings_json
from tui.core.options.validate import combine, validate
from tui.core.presets import read_preset, settings_from_section
from tui.core.presets.profiles import ProfileError, load_profile
from tui.core.server.binary import ServerInfo, ServerProbeError, probe
from tui.core.server.provision import ENV_SERVER, SERVER_NAME, build_root

#: The side that stands for the command's own llama-server flags.
BASE = "base"
#: Keys every side launches alike (the lab picks the port; acceptance needs /metrics): never a difference.
SAME_FOR_BOTH = frozenset({"port", "host", "metrics", "api_key"})
_PROFILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FORMS = ("NAME (a saved profile)", "FILE:SECTION (a preset INI section)", '"llama-server -m ..." (a pasted command)',
         "base (the flags given)", '"+FLAGS" (the flags given with changes, e.g. "+-ctk q8_0")')


class SideError(ValueError):
    """A side that cannot be read or run; one sentence naming the side and the problem."""


@dataclass(frozen=True)
class ReadSide:
    """One side as read: `label` (A or B), its settings, what it is in words, the binary it names (a
    pasted command's path, else None) and the problems of reading it (the validator's come later)."""

    label: str
    settings: Settings
    source: str
    server_bin: Path | None = None
    problems: tuple[Problem, ...] = field(default_factory=tuple)


def read_side(label: str, text: str, base: Sequence[str] = ()) -> ReadSide:
    """Side `label` written as `text` (see the module docstring); `base`: the command's own flags."""
    text = text.strip()
    if not text:
        raise SideError(f"{label}: empty; give one of {', '.join(FORMS)}.")
    if text == BASE or text.startswith("+"):
        return _from_base(label, text, list(base))
    if any(c.isspace() for c in text):
        return _from_command(label, text)
    if ":" in text:
        return _from_preset(label, text)
    if not _PROFILE.match(text):
        raise SideError(f"{label}: {text!r} is none of {', '.join(FORMS)}.")
    try:
        settings = load_profile(text)
    except ProfileError as e:
        raise SideError(f"{label}: {e}") from None
    return ReadSide(label, _launchable(settings), f"profile {text}")


def _from_base(label: str, text: str, base: list[str]) -> ReadSide:
    if not base:
        raise SideError(f"{label} is {text.split()[0] if text == BASE else repr(text)}, but no llama-server flags were "
                        "given after the sides (e.g. `mtp-tune ab base +-fa on -m model.gguf`).")
    changes: list[str] = []
    if text != BASE:
        try:
            changes = split_command(text[1:])
        except ValueError as e:
            raise SideError(f"{label}: {text!r} cannot be split into words ({e}); check its quotes.") from None
        if not changes:
            raise SideError(f"{label}: {text!r} has no flags after the '+' (e.g. \"+-ctk q8_0\").")
    imp = settings_from_argv([*base, *changes], base=Settings(metrics=False))
    what = "the flags given" + (f" with {' '.join(redact_argv(changes))}" if changes else "")
    return ReadSide(label, _launchable(imp.settings), what, problems=tuple(imp.problems))


def _from_command(label: str, text: str) -> ReadSide:
    imp = parse_command_line(text, base=Settings(metrics=False))
    binary = Path(imp.binary).expanduser() if imp.binary and os.sep in imp.binary else None
    return ReadSide(label, _launchable(imp.settings), "a pasted command", binary, tuple(imp.problems))


def _from_preset(label: str, text: str) -> ReadSide:
    path, _, section = text.rpartition(":")
    if not section:
        raise SideError(f"{label}: {text!r} names no section after the ':' (FILE:SECTION, e.g. presets.ini:fast).")
    try:
        pf = read_preset(Path(path).expanduser())
        settings, _preset_only, notes = settings_from_section(pf, section)
    except (OSError, UnicodeError) as e:
        raise SideError(f"{label}: {e}") from None
    except KeyError as e:
        raise SideError(f"{label}: {e.args[0]}") from None
    return ReadSide(label, _launchable(settings), f"section [{section}] of {path}", problems=tuple(notes))


def _launchable(settings: Settings) -> Settings:
    """A side as the lab launches it: its port picked at launch, /metrics on (acceptance is read there)."""
    return replace(settings, port=None, metrics=True)


def build_name(info: ServerInfo | None) -> str:
    """`build 11434`, or `build unknown` (a tree built without git), as a side's problems and differences say it."""
    return f"build {info.version}" if info is not None and info.version is not None else "build unknown"


def side_problems(side: ReadSide, info: ServerInfo | None) -> list[Problem]:
    """Every problem of `side`, reading and validating, errors first. With `info` (its binary's
    `--help`), an option that build does not list is an error; each message is prefixed with the
    side and its build (`B (build 11434): ...`)."""
    found = combine(side.problems, validate(side.settings, info.options if info is not None else None,
                                            require_model=True, unknown="error"))
    where = f"{side.label} ({build_name(info)})" if info is not None else side.label
    return [replace(p, message=f"{where}: {p.message}") for p in found]


def check_sides(problems: Sequence[Problem]) -> None:
    """SideError listing every error of both sides (one per line), or nothing."""
    bad = errors(list(problems))
    if bad:
        raise SideError("\n  ".join(p.message for p in bad))


def vetted(sides: Sequence[ReadSide], bins: Sequence[Path]) -> tuple[list[ServerInfo], tuple[str, ...], list[Problem]]:
    """Both sides before anything launches, as `mtp-tune ab` and the TUI's A/B check them: each side's
    build asked for its `--help` and version, every error of both sides said at once (SideError, as
    a build that cannot be asked is), then what differs. Returns (the builds, the differences, every
    problem: the warnings are the caller's to show)."""
    try:
        infos = [probe(path) for path in bins]
    except ServerProbeError as e:
        raise SideError(str(e)) from None
    problems = [p for side, info in zip(sides, infos) for p in side_problems(side, info)]
    check_sides(problems)
    return infos, differences(sides[0].settings, sides[1].settings, infos[0], infos[1]), problems


def differences(a: Settings, b: Settings, a_info: ServerInfo | None = None,
                b_info: ServerInfo | None = None) -> tuple[str, ...]:
    """What differs between the sides: each option in llama-server's spelling (`options.diff`:
    `--cache-type-k (default f16) -> q8_0`), then the binaries when they are two, with their builds."""
    out = [str(c) for c in settings_changes(settings_json(a.redacted()), settings_json(b.redacted()),
                                            ignore=SAME_FOR_BOTH)]
    if a_info is not None and b_info is not None and not _same_file(a_info.path, b_info.path):
        if a_info.version != b_info.version:
            out.append(f"llama-server {build_name(a_info)} -> {build_name(b_info)} ({a_info.path} -> {b_info.path})")
        else:
            out.append(f"llama-server {a_info.path} -> {b_info.path} (both {build_name(a_info)})")
    return tuple(out)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def other_builds(current: str | os.PathLike[str] | None, limit: int = 3) -> list[Path]:
    """llama-server binaries on this machine other than `current`, what an A/B of builds is offered
    (the TUI): $MTP_TUNE_LLAMA_SERVER, the one on PATH, then mtp-tune's cached builds, newest first."""
    cached = sorted(build_root().parent.glob(f"*/bin/{SERVER_NAME}"), key=lambda p: p.stat().st_mtime, reverse=True)
    out: list[Path] = []
    for c in (os.environ.get(ENV_SERVER), shutil.which(SERVER_NAME), *cached):
        if not c or not os.access(c, os.X_OK) or not Path(c).is_file():
            continue
        path = Path(c)
        if (current is not None and _same_file(path, Path(current))) or any(_same_file(path, o) for o in out):
            continue
        out.append(path)
    return out[:limit]
