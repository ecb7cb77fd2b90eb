"""The types the option table is made of: one server option, one value rule, one removed option.

Why apart from the data: `table.py` is generated from b11434's registry and only holds values;
these classes say what a value means and are shared by the reader, validation and the presets.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "FALSEY",
    "TRUTHY",
    "RemovedOption",
    "ServerOption",
    "ValueRule",
    "is_falsey",
    "is_truthy",
    "normalize_spelling",
]

TRUTHY: frozenset[str] = frozenset({"on", "enabled", "true", "1"})
FALSEY: frozenset[str] = frozenset({"off", "disabled", "false", "0"})


def is_truthy(value: str) -> bool:
    """llama-server's `is_truthy` (case-sensitive, arg.cpp:1337)."""
    return value in TRUTHY


def is_falsey(value: str) -> bool:
    """llama-server's `is_falsey` (case-sensitive)."""
    return value in FALSEY


def normalize_spelling(arg: str) -> str:
    """What the server matches: `--long_name` has its underscores turned into dashes (arg.cpp:832)."""
    return arg.replace("_", "-") if arg.startswith("--") else arg


@dataclass(frozen=True)
class ValueRule:
    """What one option's value is: its type, llama-server's default and the range it accepts.

    `type`: `int`, `float`, `onoff`, `choice`, `ngl` (auto/all/N), `list_int`, `list_float`,
    `list_str`, `spec` (spec-type list) or `flag`. `minimum`/`maximum` are inclusive; `why` says what
    the bound means (shown in the refusal). `source` points at the llama.cpp line the rule comes from.
    """

    type: str
    default: object = None
    minimum: float | None = None
    maximum: float | None = None
    why: str = ""
    choices: tuple[str, ...] = ()
    source: str = ""

    def range_text(self) -> str:
        """`0..1024`, `>= 1` or `<= 5`; "" when unbounded."""
        lo, hi = self.minimum, self.maximum
        fmt = (lambda x: f"{x:g}") if self.type in ("float", "list_float") else (lambda x: str(int(x)))
        if lo is not None and hi is not None:
            return f"{fmt(lo)}..{fmt(hi)}"
        if lo is not None:
            return f">= {fmt(lo)}"
        if hi is not None:
            return f"<= {fmt(hi)}"
        return ""

    def contains(self, x: float) -> bool:
        return (self.minimum is None or x >= self.minimum) and (self.maximum is None or x <= self.maximum)


@dataclass(frozen=True)
class ServerOption:
    """One option as registered in llama-server.

    `kind` is the C++ handler type: `void` (flag), `bool` (flag with negative spellings), `int`,
    `string`, `strstr` (two values). `preset_only` keys exist only in `--models-preset` files.
    `repeatable`: every occurrence counts (the handler appends); otherwise the last one wins.
    `rule`: the value's type, default and range where mtp-tune needs them (None otherwise).
    """

    args: tuple[str, ...]
    neg: tuple[str, ...] = ()
    hint: str | None = None
    env: str | None = None
    kind: str = "string"
    preset_only: bool = False
    repeatable: bool = False
    rule: ValueRule | None = None

    @property
    def takes_value(self) -> bool:
        return self.hint is not None

    @property
    def default(self) -> object:
        """llama-server's default for this option (None when the table does not record it)."""
        return self.rule.default if self.rule else None

    @property
    def canonical(self) -> str:
        """The first long (`--`) spelling; the name mtp-tune writes."""
        return next((a for a in self.args if a.startswith("--")), self.args[-1])

    @property
    def canonical_neg(self) -> str | None:
        return next((a for a in self.neg if a.startswith("--")), self.neg[-1] if self.neg else None)

    @property
    def spellings(self) -> tuple[str, ...]:
        return self.args + self.neg

    @property
    def env_names(self) -> tuple[str, ...]:
        """Env names, including the `LLAMA_ARG_NO_*` twin of options with a negative form."""
        if not self.env:
            return ()
        if self.neg:
            return (self.env, self.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_"))
        return (self.env,)

    @property
    def ini_key(self) -> str:
        """The key mtp-tune writes into a preset section."""
        return self.canonical.lstrip("-")

    @property
    def ini_keys(self) -> tuple[str, ...]:
        """Every key the preset parser maps to this option (preset.cpp:251-262)."""
        return tuple(s.lstrip("-") for s in self.spellings) + self.env_names

    def is_negative(self, spelling: str) -> bool:
        """True when `spelling` (with or without dashes) is one of the negative forms."""
        bare = spelling.lstrip("-")
        return any(n.lstrip("-") == bare for n in self.neg)


@dataclass(frozen=True)
class RemovedOption:
    """An option older guides use that b11434 rejects, and what to write instead.

    `registered` ones still exist in the server only to throw "the argument has been removed" (so
    they appear in `--help` and a preset key for them is accepted at load but kills the child);
    the others are plain "invalid argument" / "option not recognized". When `field` is set the
    importer translates the option: to `value` for flags, to the given value otherwise.
    """

    spellings: tuple[str, ...]
    replacement: str
    takes_value: bool = False
    field: str | None = None
    value: str | None = None
    registered: bool = False

    @property
    def ini_keys(self) -> tuple[str, ...]:
        return tuple(s.lstrip("-") for s in self.spellings)
