"""The preset file as data: lines, entries, sections, problems, and the router's constants."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from tui.core.options import TRUTHY, ServerOption, option_for_ini_key

Severity = Literal["error", "warning"]
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.I)

DEFAULT_SECTION = "default"
GLOBAL_SECTION = "*"
DEFAULT_MODELS_MAX = 4
PRESET_ONLY_KEYS: tuple[str, ...] = ("load-on-startup", "stop-timeout", "dedup-cache-models")
#: Env names the router unsets or overrides in every model (server-models.cpp:479-531).
RESERVED_ENV: dict[str, str] = {
    "LLAMA_ARG_SSL_KEY_FILE": "stripped by the router",
    "LLAMA_ARG_SSL_CERT_FILE": "stripped by the router",
    "LLAMA_API_KEY": "stripped by the router (set --api-key on the router itself)",
    "LLAMA_ARG_API_KEY_FILE": "stripped by the router (set it on the router itself)",
    "LLAMA_ARG_MODELS_DIR": "stripped by the router",
    "LLAMA_ARG_MODELS_MAX": "stripped by the router",
    "LLAMA_ARG_MODELS_PRESET": "stripped by the router",
    "LLAMA_ARG_MODELS_AUTOLOAD": "stripped by the router",
    "LLAMA_ARG_HOST": "overridden: the router runs every model on 127.0.0.1",
    "LLAMA_ARG_PORT": "overridden: the router picks a free port per model",
    "LLAMA_ARG_LOG_COLORS": "overridden: models follow the router's colors",
}



class IniWriteError(Exception):
    """Writing was refused; the message says which section/key/value and what to do."""


@dataclass(frozen=True)
class IniProblem:
    """One finding with its 1-based line. `rejects`: the router refuses the whole file for it."""

    line: int | None
    section: str | None
    key: str | None
    severity: Severity
    message: str
    rejects: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"line": self.line, "section": self.section, "key": self.key, "severity": self.severity, "message": self.message}

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "file"
        sec = f" [{self.section}]" if self.section is not None else ""
        return f"{where}{sec}: {self.severity}: {self.message}"


@dataclass
class IniLine:
    """One parsed unit of the file (a header may span several physical lines)."""

    kind: Literal["header", "kv", "comment", "blank", "invalid"]
    start: int
    end: int
    line: int
    name: str | None = None  # header: section name as stored by the server
    key: str | None = None
    value: str | None = None
    after: str = ""  # kv/header: what follows the value up to the end of the line


@dataclass
class IniEntry:
    key: str
    value: str
    line: int
    option: ServerOption | None


@dataclass
class IniSection:
    """A section as the server keeps it: only the entries after its last header."""

    name: str
    line: int | None
    entries: list[IniEntry] = field(default_factory=list)

    @property
    def model_name(self) -> str:
        """The name requests must use (`:TAG` canonicalized, preset.cpp:291-301)."""
        return canonical_name(self.name)

    def options(self) -> dict[ServerOption, IniEntry]:
        """Effective value per option: last duplicate key, then alphabetically last spelling."""
        by_key: dict[str, IniEntry] = {}
        for e in self.entries:
            if e.key != "version":
                by_key[e.key] = e
        out: dict[ServerOption, IniEntry] = {}
        for key in sorted(by_key):
            e = by_key[key]
            if e.option is not None:
                out[e.option] = e
        return out

    def value_of(self, key: str) -> str | None:
        """The effective value for any spelling of an option, or None."""
        opt = option_for_ini_key(key)
        e = self.options().get(opt) if opt else None
        return None if e is None else bool_value(e)


def bool_value(entry: IniEntry) -> str:
    """The value the server stores: negative keys of bool options invert (preset.cpp:264-277)."""
    opt = entry.option
    if opt is not None and opt.neg and opt.is_negative(entry.key):
        return "false" if entry.value in TRUTHY else "true"
    return entry.value


def canonical_name(name: str) -> str:
    if name in (GLOBAL_SECTION, DEFAULT_SECTION):
        return name
    idx = name.rfind(":")
    if idx < 0:
        return name
    tag = name[idx + 1 :]
    m = _TAG.search(tag)
    canon = (m.group(1) if m else tag).upper()
    return name[: idx + 1] + canon if canon != tag else name


@dataclass
class PresetFile:
    """A parsed preset: the lines, the server's view of the sections, and every problem."""

    text: str
    path: str | None
    lines: list[IniLine]
    sections: dict[str, IniSection]
    problems: list[IniProblem] = field(default_factory=list)

    @property
    def global_section(self) -> IniSection | None:
        return self.sections.get(GLOBAL_SECTION)

    @property
    def models(self) -> list[IniSection]:
        """Model sections the router lists (a `default` section counts only with options)."""
        return [
            s for name, s in self.sections.items()
            if name != GLOBAL_SECTION and not (name == DEFAULT_SECTION and not s.options() and not _has_unknown(s))
        ]

    def model(self, name: str) -> IniSection | None:
        return next((s for s in self.models if s.name == name or s.model_name == name), None)

    def effective_options(self, section: IniSection) -> dict[ServerOption, IniEntry]:
        """`[*]` cascaded under the section (section wins per option)."""
        out = dict(self.global_section.options()) if self.global_section else {}
        out.update(section.options())
        return out

    @property
    def server_accepts(self) -> bool:
        """False when the router would refuse to start with this file."""
        return not any(p.rejects for p in self.problems)

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)


def _has_unknown(s: IniSection) -> bool:
    return any(e.option is None and e.key != "version" for e in s.entries)
