"""The one argv reader: finds options in an argv exactly as llama-server b11434 does.

llama.cpp's rules (common/arg.cpp, `common_params_parse_ex`): a token is an option when it is one of
the registered spellings (`--long_name` has `_` turned into `-`); an option with a value takes the next
token whatever it looks like; repeating an option calls its handler again, so list-building options
(`-ot`, `--spec-type`, `--rpc`, ... see `ServerOption.repeatable`) accumulate and every other one keeps
its last value. `--name=value` is not llama.cpp syntax (the server rejects it), but pasted commands
use it, so the reader understands it and marks it `inline` for a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tui.core.options.lookup import find_option
from tui.core.options.spec import ServerOption, normalize_spelling

__all__ = ["Occurrence", "scan", "occurrences", "values", "value", "present", "without", "option_named"]


@dataclass(frozen=True)
class Occurrence:
    """One option as written in an argv: where, which spelling, and its value (None for a flag)."""

    index: int  # position of the option token
    end: int  # one past the last token it used
    spelling: str  # as written, without `=value`
    option: ServerOption
    value: str | None
    inline: bool = False  # written `--name=value`
    missing_value: bool = False  # a value option at the end of argv

    @property
    def negative(self) -> bool:
        return self.option.is_negative(self.spelling)


def option_named(name: str | ServerOption) -> ServerOption:
    """The table entry for a spelling such as `-c` or `--ctx-size` (a KeyError names an unknown one)."""
    if isinstance(name, ServerOption):
        return name
    opt = find_option(name)
    if opt is None:
        raise KeyError(f"{name} is not a llama-server option")
    return opt


def scan(args: Sequence[str]) -> list[Occurrence | str]:
    """Every token of `args`: an `Occurrence` for each known option, the bare string otherwise."""
    out: list[Occurrence | str] = []
    i = 0
    while i < len(args):
        tok = str(args[i])
        opt = find_option(tok)
        if opt is not None:
            if opt.takes_value:
                if i + 1 < len(args):
                    out.append(Occurrence(i, i + 2, tok, opt, str(args[i + 1])))
                    i += 2
                else:
                    out.append(Occurrence(i, i + 1, tok, opt, None, missing_value=True))
                    i += 1
                continue
            out.append(Occurrence(i, i + 1, tok, opt, None))
            i += 1
            continue
        if tok.startswith("-") and "=" in tok:
            name, _, val = tok.partition("=")
            opt = find_option(name)
            if opt is not None:
                out.append(Occurrence(i, i + 1, name, opt, val if opt.takes_value else None, inline=True))
                i += 1
                continue
        out.append(tok)
        i += 1
    return out


def occurrences(args: Sequence[str], name: str | ServerOption) -> list[Occurrence]:
    """Every occurrence of one option (any of its spellings, negative forms included), in order."""
    opt = option_named(name)
    return [t for t in scan(args) if isinstance(t, Occurrence) and t.option == opt]


def values(args: Sequence[str], name: str | ServerOption) -> list[str]:
    """The values the server's handler sees, in order (for a repeatable option all of them count)."""
    return [o.value for o in occurrences(args, name) if o.value is not None]


def value(args: Sequence[str], name: str | ServerOption) -> str | None:
    """The value in effect for a last-wins option; None when absent. Not for repeatable options."""
    vals = values(args, name)
    return vals[-1] if vals else None


def present(args: Sequence[str], name: str | ServerOption) -> bool | None:
    """For a flag: True/False by the last occurrence (a negative spelling gives False); None if absent."""
    occ = occurrences(args, name)
    if not occ:
        return None
    return not occ[-1].negative


def without(args: Sequence[str], *names: str | ServerOption) -> list[str]:
    """A copy of `args` with every occurrence of the named options (and their values) removed."""
    drop = {option_named(n) for n in names}
    out: list[str] = []
    for t in scan(args):
        if isinstance(t, Occurrence):
            if t.option in drop:
                continue
            out.extend(str(a) for a in args[t.index:t.end])
        else:
            out.append(t)
    return out


def is_option(token: str) -> bool:
    """True when `token` is a registered spelling (after llama.cpp's `_` to `-` rule)."""
    return find_option(normalize_spelling(token)) is not None
