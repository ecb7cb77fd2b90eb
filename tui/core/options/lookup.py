"""Lookups over the option table: by spelling, by preset key, and an option's default and range."""

from __future__ import annotations

from functools import cache

from tui.core.options.spec import ServerOption, ValueRule, normalize_spelling
from tui.core.options.table import SERVER_OPTIONS

__all__ = [
    "all_ini_keys",
    "all_spellings",
    "default",
    "find_option",
    "option_for_env",
    "option_for_ini_key",
    "rule",
]


@cache
def _by_spelling() -> dict[str, ServerOption]:
    return {s: opt for opt in SERVER_OPTIONS if not opt.preset_only for s in opt.spellings}


@cache
def _by_ini_key() -> dict[str, ServerOption]:
    out: dict[str, ServerOption] = {}
    for opt in SERVER_OPTIONS:
        for key in opt.ini_keys:
            out[key] = opt
    return out


@cache
def _by_env() -> dict[str, tuple[ServerOption, bool]]:
    return {n: (opt, n != opt.env) for opt in SERVER_OPTIONS if not opt.preset_only for n in opt.env_names}


def find_option(spelling: str) -> ServerOption | None:
    """The CLI option for a spelling like `-c`, `--ctx-size` or `--ctx_size`; None if unknown."""
    return _by_spelling().get(normalize_spelling(spelling))


def option_for_env(name: str) -> tuple[ServerOption, bool] | None:
    """The option an env variable sets, and whether it is the `LLAMA_ARG_NO_*` twin."""
    return _by_env().get(name)


def option_for_ini_key(key: str) -> ServerOption | None:
    """The option a preset key maps to, matched literally as the preset parser does."""
    return _by_ini_key().get(key)


def all_ini_keys() -> frozenset[str]:
    """Every key a b11434 preset section may hold (plus `version`)."""
    return frozenset(_by_ini_key()) | {"version"}


def all_spellings() -> frozenset[str]:
    """Every CLI spelling b11434 registers (including removed ones that only throw)."""
    return frozenset(_by_spelling())


def rule(spelling: str) -> ValueRule:
    """The value rule of an option (KeyError when the table records none for it)."""
    opt = find_option(spelling)
    if opt is None or opt.rule is None:
        raise KeyError(f"{spelling}: the option table records no value rule for it")
    return opt.rule


def default(spelling: str) -> object:
    """llama-server b11434's default for an option, e.g. `default("--ubatch-size") == 512`."""
    return rule(spelling).default
