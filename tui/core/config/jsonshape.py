"""Checking that JSON read back from a local file (a state, a cache entry) has the shape its writer gave it.

Why: those files live on the user's disk, where an editor, a full disk, another version or a
hostile hand can change them. A loader that trusted them failed far from the file, with an
AttributeError or a TypeError deep in a tune. The writers' own dataclasses already say what every
field holds, so one checker reads those annotations (`fields`) or a written hint (`check`) and
raises `ShapeError` naming the first wrong value's place (`rows.k.settings`); each loader turns it
into its own one-sentence error naming the file and what to do.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any


class ShapeError(ValueError):
    """A JSON value of the wrong shape; the message names where it is and what was expected."""


def _kind(value: Any) -> str:
    return {type(None): "null", bool: "true/false", int: "a number", float: "a number", str: "a string",
            list: "a list", tuple: "a list", dict: "an object"}.get(type(value), type(value).__name__)


_NAMES: dict[Any, str] = {None: "null", type(None): "null", bool: "true/false", int: "a whole number",
                          float: "a number", str: "a string"}


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _describe(hint: Any) -> str:
    if isinstance(hint, dict):
        return "an object"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return " or ".join(_describe(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        return "a list"
    if origin in (dict, Mapping) or hint is dict or dataclasses.is_dataclass(hint) or typing.is_typeddict(hint):
        return "an object"
    return _NAMES.get(hint) or str(getattr(hint, "__name__", hint))


def check(value: Any, hint: Any, where: str) -> None:
    """Raise ShapeError unless `value` (parsed JSON) fits `hint`: Any, None, bool, int, float (an int
    fits; so do NaN and the infinities, which Python's json writes), str, Literal, unions, list/tuple
    (tuple[X, Y]: that many), dict/Mapping with string keys, a dataclass (`fields`), a TypedDict (its
    required keys present, every key it names of its type), or a dict of hints (a record: each key's
    value, null when missing, fits its hint)."""
    if hint is Any or hint is object:
        return
    if isinstance(hint, dict):  # a record written out, {key: hint}: a missing key reads as null
        if not isinstance(value, dict):
            raise ShapeError(f"{where} is {_kind(value)}, not an object")
        for k, h in hint.items():
            check(value.get(k), h, f"{where}.{k}")
        return
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        for arg in args:
            try:
                check(value, arg, where)
                return
            except ShapeError:
                continue
        raise ShapeError(f"{where} is {_kind(value)}, not {_describe(hint)}")
    if origin is typing.Literal:
        if value not in args or type(value) is not type(next(a for a in args if a == value)):
            raise ShapeError(f"{where} is {value!r:.40}, not one of {', '.join(map(repr, args))}")
        return
    if hint is None or hint is type(None):
        ok = value is None
    elif hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif hint is str:
        ok = isinstance(value, str)
    elif origin in (list, tuple, Sequence) or hint in (list, tuple):
        _sequence(value, origin or hint, args, where)
        return
    elif origin in (dict, Mapping) or hint is dict:
        if not isinstance(value, dict):
            raise ShapeError(f"{where} is {_kind(value)}, not an object")
        for k, v in value.items():
            if not isinstance(k, str):
                raise ShapeError(f"{where} has a key that is not a string")
            if args:
                check(v, args[1], f"{where}.{k}")
        return
    elif dataclasses.is_dataclass(hint) and isinstance(hint, type):
        fields(hint, value, where)
        return
    elif typing.is_typeddict(hint):
        if not isinstance(value, dict):
            raise ShapeError(f"{where} is {_kind(value)}, not an object")
        for k, h in _hints(hint).items():
            if k in value:
                check(value[k], h, f"{where}.{k}")
            elif k in hint.__required_keys__:
                raise ShapeError(f"{where} has no {k}")
        return
    else:
        ok = isinstance(value, hint) if isinstance(hint, type) else True
    if not ok:
        raise ShapeError(f"{where} is {_kind(value)}, not {_describe(hint)}")


def _sequence(value: Any, origin: Any, args: tuple[Any, ...], where: str) -> None:
    if not isinstance(value, (list, tuple)):
        raise ShapeError(f"{where} is {_kind(value)}, not a list")
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            raise ShapeError(f"{where} has {len(value)} items, not {len(args)}")
        for i, (v, a) in enumerate(zip(value, args)):
            check(v, a, f"{where}[{i}]")
        return
    if args:
        for i, v in enumerate(value):
            check(v, args[0], f"{where}[{i}]")


def fields(cls: type, d: Any, where: str, *, required: Sequence[str] = ()) -> dict[str, Any]:
    """The keys of the JSON object `d` that are fields of the dataclass `cls`, each checked against
    its annotation (unknown keys dropped: an older or newer writer's extras); ShapeError when `d` is
    no object, a field does not fit, or one of `required` is missing."""
    if not isinstance(d, dict):
        raise ShapeError(f"{where} is {_kind(d)}, not an object")
    hints = _hints(cls)
    for name in required:
        if name not in d:
            raise ShapeError(f"{where} has no {name}")
    out = {k: v for k, v in d.items() if k in hints and k in {f.name for f in dataclasses.fields(cls)}}
    for k, v in out.items():
        check(v, hints[k], f"{where}.{k}" if where else k)
    return out
