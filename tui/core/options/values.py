"""Text <-> typed field values, with one wording for a value that is not of the field's type.

Why strict: a field that silently kept "abc" reached the planner (a traceback) or the server
("stoi"). `parse_value` returns the declared type or raises `BadValue` naming the field, and the
validator reuses the same checks for values that arrive typed wrong from code or files.
"""

from __future__ import annotations

import math
import re

from tui.core.options.fields import FieldSpec
from tui.core.options.problems import label
from tui.core.options.spec import FALSEY, TRUTHY, ValueRule

__all__ = [
    "INT32_MAX", "INT32_MIN", "BadValue", "as_float", "as_int", "format_float", "format_value", "int32_problem",
    "parse_value", "range_problem",
]

#: llama-server reads whole-number options with `std::stoi` (common/arg.cpp:796, 859; -ngl at 2800):
#: outside a 32-bit int it throws `out_of_range` and refuses to start (`ctx_size = 99999999999999999999`).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

_LIST_SPLIT = re.compile(r"[,/]+")


class BadValue(ValueError):
    """Text that is not a value of its field; the message names the field and says what fits."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def as_int(value: object) -> int | None | str:
    """An int, None, or the text that is not a whole number."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        return str(value)


def as_float(value: object) -> float | None | str:
    """A finite float, None, or the text that is not a number."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else str(value)
    try:
        v = float(str(value).strip())
    except ValueError:
        return str(value)
    return v if math.isfinite(v) else str(value)


def not_int(field: str, text: str) -> str:
    return f"{label(field)}: {text!r} is not a whole number; enter digits only."


def not_number(field: str, text: str) -> str:
    return f"{label(field)}: {text!r} is not a number; use e.g. 0.75."


def range_problem(name: str, r: ValueRule | None, v: float, entry: int | None = None) -> str | None:
    """The refusal, naming `name`, for a value outside the rule's accepted range (None when inside)."""
    if r is not None and r.type == "int" and not INT32_MIN <= v <= INT32_MAX:
        return int32_problem(name, v, entry)
    if r is None or r.contains(v):
        return None
    shown = f"{v:g}" if isinstance(v, float) else str(v)
    where = f"entry {entry} ({shown})" if entry is not None else shown
    low = r.minimum is not None and v < r.minimum
    side = f"below {_fmt(r, r.minimum)}" if low else f"above {_fmt(r, r.maximum)}"
    if r.minimum is not None and r.maximum is not None:
        must = f"it must be between {_fmt(r, r.minimum)} and {_fmt(r, r.maximum)}"
    elif r.minimum is not None:
        must = f"it must be {_fmt(r, r.minimum)} or more"
    else:
        must = f"it must be {_fmt(r, r.maximum)} or less"
    why = f"; {r.why}" if r.why else ""
    return f"{name}: {where} is {side}; {must} ({r.range_text()}{why})."


def int32_problem(name: str, v: float, entry: int | None = None) -> str | None:
    """The refusal of a whole number llama-server cannot read (see INT32_MAX); None when it can."""
    if INT32_MIN <= v <= INT32_MAX:
        return None
    where = f"entry {entry} ({v})" if entry is not None else str(v)
    return (f"{name}: {where} is out of range; llama-server reads it as a 32-bit whole number "
            f"({INT32_MIN}..{INT32_MAX}) and refuses to start.")


def _fmt(r: ValueRule, x: float | None) -> str:
    assert x is not None
    return f"{x:g}" if r.type in ("float", "list_float") else str(int(x))


def format_float(x: float) -> str:
    """Shortest text that reads back as the same float (`1.0` -> `1`, `0.1` -> `0.1`)."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x) if isinstance(x, float) else str(x)


def format_value(spec: FieldSpec, value: object) -> str | None:
    """The option value text for a field, or None when nothing is emitted (unset/empty/False).

    Flags return "" when set (emit the flag alone).
    """
    k = spec.kind
    if value is None:
        return None
    if k in ("flag", "negflag"):
        return "" if value is True or (isinstance(value, str) and value in TRUTHY) else None
    if k == "onoff":
        if isinstance(value, bool):
            return "on" if value else "off"
        return str(value)
    if k == "spec":
        return ",".join(str(t) for t in value) if value else None  # type: ignore[union-attr]
    if k in ("list_int", "list_str"):
        return ",".join(str(x) for x in value) if value else None  # type: ignore[union-attr]
    if k == "list_float":
        return ",".join(format_float(x) if isinstance(x, float) else str(x) for x in value) if value else None  # type: ignore[union-attr]
    if k == "float":
        return format_float(value) if isinstance(value, float) else str(value)
    if k == "str" and value == "":
        return None
    return str(value)


def parse_value(spec: FieldSpec, raw: str) -> object:
    """Text -> the field's declared type, as llama-server reads it; `BadValue` when it is not one."""
    k = spec.kind
    text = raw.strip()
    f = spec.field
    if k == "int":
        v = as_int(text)
        if isinstance(v, str):
            raise BadValue(f, not_int(f, raw))
        return v
    if k == "float":
        fv = as_float(text)
        if isinstance(fv, str):
            raise BadValue(f, not_number(f, raw))
        return fv
    if k == "onoff":
        if text in TRUTHY:
            return True
        if text in FALSEY:
            return False
        raise BadValue(f, f"{label(f)}: {raw!r} is not on or off.")
    if k == "choice" and f == "flash_attn":
        return "on" if text in TRUTHY else "off" if text in FALSEY else "auto" if text in ("auto", "-1") else raw
    if k == "ngl":
        if text in ("auto", "all"):
            return text
        if isinstance(as_int(text), str):
            raise BadValue(f, f"{label(f)}: {raw!r} is not auto, all or a whole number of layers.")
        return text
    if k == "spec":
        return [t for t in raw.split(",")] if raw else []
    if k in ("list_int", "list_float"):
        out: list[int | float] = []
        for i, part in enumerate(p for p in _LIST_SPLIT.split(text) if p != ""):
            one = as_int(part) if k == "list_int" else as_float(part)
            if isinstance(one, str):
                what = "a whole number" if k == "list_int" else "a number"
                raise BadValue(f, f"{label(f)}: entry {i + 1} ({part!r}) is not {what}.")
            assert one is not None
            out.append(one)
        return out
    if k == "list_str":
        return [p for p in raw.split(",") if p]
    if k in ("flag", "negflag"):
        return text not in FALSEY
    return raw
