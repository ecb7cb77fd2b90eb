"""The text a sweep is defined with, parsed: axes over settings fields, the objective and the limits.

Axis names are llama-server's option names without dashes (`ubatch-size`, `ub`, `ctkd`,
`spec-draft-n-max`, `ctx-size`, ...), plus `n-predict` (the probes' generation length, which needs
no restart) and `mtp` (`on`/`off`, a shorthand for `spec-type=draft-mtp,none`). Values are parsed
with the option model's own rules, so a bad value is refused with the axis named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from tui.core.lab.candidate import Axis
from tui.core.options import FALSEY, FIELD_BY_NAME, TRUTHY, FieldSpec, field_for_option, find_option
from tui.core.options.settings import Settings
from tui.core.options.validate import value_errors
from tui.core.options.values import BadValue, int32_problem, parse_value

#: Axis names that set the probes' generation length instead of a server option.
N_PREDICT_NAMES = frozenset({"n-predict", "n_predict", "predict", "n", "max-tokens", "gen-len"})
#: Settings fields a sweep axis may not vary (they are the sweep's identity or its plumbing).
FORBIDDEN_AXES = frozenset({"model", "hf_repo", "host", "port", "api_key", "metrics"})

ObjectiveKind = Literal["tg", "pp", "workload"]


class SweepDefinitionError(ValueError):
    """An axis, objective or limit that cannot be understood; the message names it and says what to do."""


# --------------------------------------------------------------------------- axes


def _field_spec_for(name: str) -> tuple[str, FieldSpec | None, str | None]:
    """(label, FieldSpec or None, flag for extra_args) for an axis name in llama-server spelling."""
    bare = name.strip().lstrip("-")
    candidates = [f"--{bare}", f"-{bare}", f"--{bare.replace('_', '-')}"]
    # A Settings field name (`ubatch_size`) is accepted too.
    if bare in FIELD_BY_NAME:
        spec = FIELD_BY_NAME[bare]
        return spec.label, spec, None
    for c in candidates:
        opt = find_option(c)
        if opt is None:
            continue
        spec = field_for_option(opt)
        if spec is not None:
            return spec.label, spec, None
        if not opt.takes_value:
            raise SweepDefinitionError(
                f"--axis {name}: {opt.canonical} is a switch without a value; sweep an option that takes values."
            )
        return opt.canonical.lstrip("-"), None, opt.canonical
    raise SweepDefinitionError(
        f"--axis {name}: {name!r} is not a llama-server option. Use the option's long or short name without "
        "dashes (ubatch-size or ub, cache-type-k-draft or ctkd, spec-type, spec-draft-n-max, ctx-size), "
        "n-predict for the generation length, or mtp=on,off."
    )


def parse_axis(text: str) -> Axis:
    """`NAME=V1,V2,...` -> Axis. Values of list options (fit-target, tensor-split) use `/` inside one value."""
    name, eq, rest = text.partition("=")
    name = name.strip()
    if not eq or not name:
        raise SweepDefinitionError(f"--axis {text!r}: write NAME=V1,V2,... (for example ubatch-size=256,512).")
    texts = tuple(v.strip() for v in rest.split(",") if v.strip())
    if not texts:
        raise SweepDefinitionError(f"--axis {text!r}: no values after '='; give at least one, e.g. {name}=256,512.")
    if len(set(texts)) != len(texts):
        dup = next(t for t in texts if texts.count(t) > 1)
        raise SweepDefinitionError(f"--axis {name}: value {dup!r} is given twice; list each value once.")
    bare = name.lstrip("-")
    if bare in N_PREDICT_NAMES:
        vals: list[Any] = []
        for t in texts:
            try:
                v = _parse_count(t)
            except ValueError:
                raise SweepDefinitionError(f"--axis {name}: {t!r} is not a whole number of tokens (e.g. 128,512 or 1k).") from None
            if v < 1:
                raise SweepDefinitionError(f"--axis {name}: {t} tokens: a generation length must be at least 1.")
            if (too_big := int32_problem(f"--axis {name}", v)) is not None:
                raise SweepDefinitionError(too_big)
            vals.append(v)
        return Axis("n-predict", ("n_predict",), tuple(vals), texts)
    if bare == "mtp":
        vals = []
        for t in texts:
            if t.lower() in TRUTHY:
                vals.append(["draft-mtp"])
            elif t.lower() in FALSEY or t.lower() == "none":
                vals.append([])
            else:
                raise SweepDefinitionError(f"--axis mtp: {t!r} is not on or off.")
        return Axis("mtp", ("spec_type",), tuple(vals), texts)
    label, spec, extra_flag = _field_spec_for(name)
    if spec is None:
        assert extra_flag is not None
        for t in texts:
            _refuse_never_launching(name, Settings(extra_args=[extra_flag, t]))
        return Axis(bare, (f"extra:{extra_flag}",), texts, texts)
    if spec.field in FORBIDDEN_AXES:
        raise SweepDefinitionError(
            f"--axis {name}: {label} cannot be swept ({'run one sweep per model' if spec.field in ('model', 'hf_repo') else 'mtp-tune sets it for every launch'})."
        )
    vals = []
    for t in texts:
        if spec.kind == "spec":  # `none`, `draft-mtp`, or several types joined by `+` (commas separate values)
            vals.append(t.replace("+", " ").split())
        elif spec.kind in ("flag", "negflag"):
            if t.lower() in TRUTHY:
                vals.append(True)
            elif t.lower() in FALSEY:
                vals.append(False)
            else:
                raise SweepDefinitionError(f"--axis {name}: {t!r} is not on or off.")
        else:
            try:
                vals.append(parse_value(spec, t))
            except BadValue as exc:
                raise SweepDefinitionError(f"--axis {name}: {exc}") from None
        _refuse_never_launching(name, replace(Settings(), **{spec.field: vals[-1]}))
    return Axis(bare, (spec.field,), tuple(vals), texts)


def _refuse_never_launching(name: str, alone: Settings) -> None:
    """Refuse an axis value that fails on its own (ubatch 0, a negative ctx-size, n-max < 0, a number
    beyond 32 bits): every point of the grid holding it would be skipped, so the sweep is refused
    with the form's own message (`validate.value_errors`) before anything launches."""
    bad = value_errors(alone)
    if bad:
        raise SweepDefinitionError(f"--axis {name}: {bad[0].message}")


def _parse_count(text: str) -> int:
    """`800`, `12k`, `1.5k`, `2m` -> tokens."""
    t = text.strip().lower().replace("_", "")
    mult = 1
    if t.endswith("k"):
        mult, t = 1000, t[:-1]
    elif t.endswith("m"):
        mult, t = 1_000_000, t[:-1]
    v = float(t)
    if not v.is_integer() and mult == 1:
        raise ValueError(text)
    return int(round(v * mult))


# --------------------------------------------------------------------------- objective and limits


@dataclass(frozen=True)
class Objective:
    """What "best" means: highest TG, highest PP, or lowest end-to-end time of a workload.

    The workload time is `in_tokens / PP + out_tokens / TG` seconds: one prompt of `in_tokens`
    processed, then `out_tokens` generated.
    """

    kind: ObjectiveKind = "tg"
    in_tokens: int = 0
    out_tokens: int = 0

    @property
    def higher_is_better(self) -> bool:
        return self.kind != "workload"

    @property
    def label(self) -> str:
        if self.kind == "workload":
            return f"workload {self.in_tokens} in, {self.out_tokens} out (s)"
        return f"{self.kind.upper()} t/s"

    def score(self, tg_tps: float | None, pp_tps: float | None) -> float | None:
        """The objective's value for one measurement (t/s, or seconds for a workload)."""
        if self.kind == "tg":
            return tg_tps
        if self.kind == "pp":
            return pp_tps
        from tui.core.probes.compare import e2e_seconds  # the same arithmetic as `mtp-tune compare`

        return e2e_seconds(self.in_tokens, self.out_tokens, pp_tps, tg_tps)

    def text(self) -> str:
        return f"workload:{self.in_tokens},{self.out_tokens}" if self.kind == "workload" else self.kind

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "in_tokens": self.in_tokens, "out_tokens": self.out_tokens}


def parse_objective(text: str) -> Objective:
    """`tg`, `pp` or `workload:IN,OUT` (token counts; `12k` allowed)."""
    t = text.strip().lower()
    if t in ("tg", "pp"):
        return Objective(t)  # type: ignore[arg-type]
    m = re.fullmatch(r"(?:workload|wl)[:=]\s*([\d.]+[km]?)\s*[,/x ]\s*([\d.]+[km]?)", t)
    if m:
        try:
            i, o = _parse_count(m.group(1)), _parse_count(m.group(2))
        except ValueError:
            i = o = -1
        if i >= 0 and o >= 1:
            return Objective("workload", i, o)
    raise SweepDefinitionError(
        f"--objective {text!r}: use tg (generation speed), pp (prompt speed) or workload:IN,OUT, "
        "e.g. workload:12k,800 for a 12000-token prompt and an 800-token answer."
    )


@dataclass(frozen=True)
class Limits:
    """When to stop: `budget_s` of wall time for the whole sweep (None: no limit)."""

    budget_s: float | None = None


def label_of(field_name: str) -> str:
    spec = FIELD_BY_NAME.get(field_name)
    return spec.label if spec else field_name.replace("_", "-")
