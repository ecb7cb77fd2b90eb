"""Two stored settings compared as llama-server reads them, each difference in its own spelling.

Why here, on the option table: a run stored with `batch_size` unset and one stored with `batch_size
2048` ran the same server (2048 is b11434's default), and a Python diff of the two JSON objects called
that a change ("batch_size 2048 -> None") and counted it against a one-change A/B. Defaults come from
the one table (`rules` via `fields.FIELDS`), values are written as `format_value` writes them on a
command line, and the flag is the spelling `settings_to_argv` emits, so a difference reads
`--spec-type (not given) -> draft-mtp`, never `spec_type [] -> ['draft-mtp']`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

from tui.core.options.fields import FIELD_BY_NAME, FieldSpec
from tui.core.options.settings import Settings, effective_spec_types
from tui.core.options.values import format_value

__all__ = ["NOT_GIVEN", "SettingChange", "setting_text", "settings_changes"]

#: A side that does not give an option the table records no default for (no model, no spec type).
NOT_GIVEN = "(not given)"
_FLAG_KINDS = ("flag", "negflag")
_LIST_KINDS = ("list_int", "list_float", "list_str")


@dataclass(frozen=True)
class SettingChange:
    """One option whose effective value differs between two runs, in llama-server's spelling.

    `key`: the stored settings key (`ubatch_size`; `extra_args` for the free-form arguments);
    `flag`: the option as written on a command line (`--ubatch-size`); `a`/`b`: each side's value as
    llama-server reads it: the value given (`512`, `draft-mtp`, `given` for a flag), `(default 2048)`
    when not given, `(not given)` when the option has no default.
    """

    key: str
    flag: str
    a: str
    b: str

    def __str__(self) -> str:
        """`--spec-type (not given) -> draft-mtp` (plain text, as the CLI prints it)."""
        return f"{self.flag} {self.a} -> {self.b}"


def _given(spec: FieldSpec, value: Any) -> str | None:
    """The value text a stored field puts on the command line, or None when it is not given."""
    if spec.kind == "spec":
        value = effective_spec_types([str(t) for t in value or []])  # a `none` anywhere switches all off
    if spec.kind in _FLAG_KINDS:
        return "given" if format_value(spec, value) is not None else None
    if isinstance(value, (list, tuple)) and spec.kind not in _LIST_KINDS and spec.kind != "spec":
        return None if not value else ",".join(map(str, value))  # a damaged or foreign value, shown as it is
    return format_value(spec, list(value) if isinstance(value, tuple) else value)


def _default(spec: FieldSpec) -> str | None:
    """The value llama-server uses when the option is not given, as `_given` would write it."""
    if spec.kind in _FLAG_KINDS:
        # A flag field's default is the Settings default (`no_mmproj` is the negative of --mmproj-auto).
        return "given" if getattr(Settings(), spec.field) else None
    default = spec.rule.default
    if default is None:
        return None
    if spec.kind in _LIST_KINDS and not isinstance(default, (list, tuple)):
        default = [default]  # `-fitt 1024` is one value for every device
    return _given(spec, default)


def setting_text(key: str, value: Any) -> tuple[str, str | None]:
    """`key`'s stored value as llama-server acts on it: (what a user reads, the value compared).

    The compared value is None when the option is not given and has no default; a stored value equal to
    the default compares equal to leaving it out."""
    spec = FIELD_BY_NAME.get(key)
    if spec is None:
        if key == "extra_args":
            text = shlex.join(str(a) for a in value or [])
            return text or "(none)", text or None
        return (NOT_GIVEN, None) if value in (None, "", [], ()) else (_plain(value), _plain(value))
    given = _given(spec, value)
    if given is not None:
        return given, given
    default = _default(spec)
    if default is None:
        return NOT_GIVEN, None
    return ("(not given)" if spec.kind in _FLAG_KINDS else f"(default {default})"), default


def _plain(value: Any) -> str:
    """A key this mtp-tune has no option for (a newer mtp-tune's): its value without Python syntax."""
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _flag(key: str) -> str:
    spec = FIELD_BY_NAME.get(key)
    if spec is not None:
        return spec.flag
    return "extra arguments" if key == "extra_args" else key


def settings_changes(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, *,
                     ignore: Set[str] = frozenset()) -> tuple[SettingChange, ...]:
    """The options whose effective values differ between stored settings `a` and `b`, defaults resolved
    (a value left out equals the same value typed out), in command-line order; keys in `ignore` skipped."""
    a, b = a or {}, b or {}
    order = {name: i for i, name in enumerate([*FIELD_BY_NAME, "extra_args"])}
    keys = sorted((set(a) | set(b)) - set(ignore), key=lambda k: (order.get(k, len(order)), k))
    out = []
    for key in keys:
        (shown_a, value_a), (shown_b, value_b) = setting_text(key, a.get(key)), setting_text(key, b.get(key))
        if value_a != value_b:
            out.append(SettingChange(key, _flag(key), shown_a, shown_b))
    return tuple(out)
