"""What a sweep is: axes over settings fields, the probe run for each configuration, the objective
and the limits, expanded into an ordered list of configurations.

Why a separate definition: the same object drives the CLI, the TUI and resume. Its `sweep_id` is a
hash of everything that changes a measurement (base settings, model file, axes, suite, repeats,
generation length), and of nothing else, so re-running with another objective or budget continues the
same sweep instead of measuring everything again.

The axes, objective and limits themselves are parsed in `axes.py`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from tui.core.options.argv import settings_to_argv
from tui.core.options.redact import without_secrets
from tui.core.options.settings import Settings, effective_spec_types, settings_json
from tui.core.options.validate import errors, validate
from tui.core.lab.candidate import Axis, Candidate, values_label
from tui.core.sweep.axes import (
    Limits,
    Objective,
    SweepDefinitionError,
    label_of,
    parse_axis,
    parse_objective,
)

#: Settings fields that only matter while a speculative type is enabled.
DRAFT_ONLY_FIELDS = ("spec_draft_n_max", "spec_draft_n_min", "spec_draft_p_min",
                     "cache_type_k_draft", "cache_type_v_draft")


# --------------------------------------------------------------------------- configurations


def normalize(settings: Settings) -> Settings:
    """The same configuration with the fields that cannot matter removed.

    With no speculative type enabled, no draft context exists, so the draft n-max/n-min/p-min and
    draft KV types change nothing; `spec-type none` and no spec-type are the same.
    """
    s = replace(settings, spec_type=list(settings.spec_type), extra_args=list(settings.extra_args))
    if not effective_spec_types(s.spec_type):
        s.spec_type = []
        for f in DRAFT_ONLY_FIELDS:
            setattr(s, f, None)
    return s


def settings_key(settings: Settings) -> str:
    """A stable hash of what a launch runs (argv without host, port and secrets: `-hft` or HF_TOKEN is
    the same launch)."""
    s = replace(settings, host="127.0.0.1", port=None, api_key=None)
    return _hash(without_secrets(settings_to_argv(s)))


def _hash(obj: Any, n: int = 12) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def _apply(settings: Settings, axis: Axis, value: Any) -> Settings:
    if axis.is_n_predict:
        return settings
    if axis.field.startswith("extra:"):
        flag = axis.field.split(":", 1)[1]
        return replace(settings, extra_args=[*settings.extra_args, flag, str(value)])
    v = list(value) if isinstance(value, list) else value
    return replace(settings, **{axis.field: v})


def _changed_fields(a: Settings, b: Settings) -> list[str]:
    return [f.name for f in fields(Settings) if getattr(a, f.name) != getattr(b, f.name)]


# --------------------------------------------------------------------------- the definition


@dataclass(frozen=True)
class SweepDefinition:
    """A whole sweep. `suite` is a probe suite name or file; `n_predict` None means the probe default."""

    base: Settings
    axes: tuple[Axis, ...] = ()
    suite: str = "tasks"
    repeat: int = 3
    n_predict: int | None = None
    objective: Objective = field(default_factory=Objective)
    limits: Limits = field(default_factory=Limits)
    try_anyway: bool = False
    fit_step_mib: int = 64
    name: str | None = None

    def __post_init__(self) -> None:
        names = [a.name for a in self.axes]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise SweepDefinitionError(f"--axis {dup} is given twice; put all its values in one --axis.")
        fields_ = [a.field for a in self.axes if not a.field.startswith("extra:")]
        dupf = next((f for f in fields_ if fields_.count(f) > 1), None)
        if dupf:
            both = [a.name for a in self.axes if a.field == dupf]
            raise SweepDefinitionError(f"--axis {' and --axis '.join(both)} set the same option; use one of them.")
        if self.repeat < 1:
            raise SweepDefinitionError(f"--repeat {self.repeat}: run each probe at least once (3 or more to see the noise).")
        if self.fit_step_mib < 1:
            raise SweepDefinitionError("the fit-target step must be at least 1 MiB.")

    # ---- identity -------------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """Everything that changes a measurement; `sweep_id` hashes this."""
        base = replace(self.base, host="127.0.0.1", port=None, api_key=None)
        return {
            "base_argv": settings_to_argv(base),
            "model": _file_identity(self.base.model),
            "axes": [[a.field, list(a.values)] for a in self.axes],
            "suite": _suite_identity(self.suite),
            "repeat": self.repeat,
            "n_predict": self.n_predict,
        }

    @cached_property
    def sweep_id(self) -> str:
        """Stable across runs of the same sweep: the resume key (objective and budget excluded)."""
        return _hash(self.identity(), 16)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.sweep_id,
            "name": self.name,
            "base": settings_json(self.base.redacted()),
            "axes": [a.to_json() for a in self.axes],
            "suite": self.suite,
            "repeat": self.repeat,
            "n_predict": self.n_predict,
            "objective": self.objective.to_json(),
            "budget_s": self.limits.budget_s,
            "try_anyway": self.try_anyway,
            "fit_step_mib": self.fit_step_mib,
        }

    # ---- expansion ------------------------------------------------------------------------

    def grid(self) -> list[Candidate]:
        """Every point of the grid in axis order (first axis slowest), validated and de-duplicated:
        each row a `Candidate` with its `index`, `values` (axis name, value), `n_predict`, and why it
        will not run if it won't (`invalid`, `duplicate_of`)."""
        out: list[Candidate] = []
        first_by_identity: dict[tuple[str, int | None], Candidate] = {}
        raw_settings: dict[str, Settings] = {}  # before normalisation, to explain duplicates
        names = {a.field: a.name for a in self.axes}
        value_lists = [list(zip(a.values, a.texts)) for a in self.axes]
        for index, combo in enumerate(itertools.product(*value_lists) if self.axes else [()]):
            s = replace(self.base, spec_type=list(self.base.spec_type), extra_args=list(self.base.extra_args),
                        fit_target=list(self.base.fit_target))
            n_predict = self.n_predict
            for axis, (value, _text) in zip(self.axes, combo):
                if axis.is_n_predict:
                    n_predict = int(value)
                else:
                    s = _apply(s, axis, value)
            values = tuple((a.name, v) for a, (v, _t) in zip(self.axes, combo))
            texts = tuple((a.name, t) for a, (_v, t) in zip(self.axes, combo))
            key = _hash([[a.field, v] for a, (v, _t) in zip(self.axes, combo)])
            eff = normalize(s)
            problems = errors(validate(eff))
            skip = "; ".join(p.message for p in problems) if problems else None
            lkey = settings_key(eff)
            cfg = Candidate(eff, key, lkey, values_label(texts) or "base", values, texts, index=index, n_predict=n_predict,
                            invalid=skip)
            if skip is None:
                ident = (lkey, n_predict)
                first = first_by_identity.get(ident)
                if first is not None:
                    differ = [names.get(f, label_of(f)) for f in _changed_fields(s, raw_settings[first.key])]
                    why = (", ".join(differ) + (" change nothing" if len(differ) > 1 else " changes nothing") +
                           " without a speculative type: run once") if differ else "the same configuration: run once"
                    cfg = replace(cfg, duplicate_of=first.key, duplicate_reason=why)
                else:
                    first_by_identity[ident] = cfg
            raw_settings[cfg.key] = s
            out.append(cfg)
        return out

    def configurations(self) -> list[Candidate]:
        """The grid in run order: configurations sharing a launch are adjacent (generation lengths
        ascending inside a launch), launches in grid order of their first configuration."""
        grid = self.grid()
        order: dict[str, int] = {}
        for c in grid:
            order.setdefault(c.launch_key, c.index)
        return sorted(grid, key=lambda c: (order[c.launch_key], c.n_predict or 0, c.index))

    def launch_count(self) -> int:
        """Distinct launches the runnable configurations need."""
        return len({c.launch_key for c in self.grid() if c.runnable})


def _file_identity(path: str | None) -> Any:
    if not path:
        return None
    p = Path(path).expanduser()
    try:
        st = p.stat()
        return [str(p.resolve()), st.st_size]
    except OSError:
        return [str(p), None]


def _suite_identity(suite: str) -> Any:
    p = Path(suite).expanduser()
    if p.is_file():
        try:
            return [p.name, hashlib.sha256(p.read_bytes()).hexdigest()[:16]]
        except OSError:
            return [str(p), None]
    return suite


def build_definition(
    base: Settings,
    axes: Sequence[str] | Iterable[Axis],
    *,
    suite: str = "tasks",
    repeat: int = 3,
    n_predict: int | None = None,
    objective: str | Objective = "tg",
    budget_min: float | None = None,
    try_anyway: bool = False,
    fit_step_mib: int = 64,
    name: str | None = None,
) -> SweepDefinition:
    """Build a definition from CLI-style text (`ub=256,512`, `workload:12k,800`, minutes of budget)."""
    parsed = tuple(a if isinstance(a, Axis) else parse_axis(a) for a in axes)
    obj = objective if isinstance(objective, Objective) else parse_objective(objective)
    if budget_min is not None and budget_min <= 0:
        raise SweepDefinitionError(f"--budget {budget_min:g}: give a positive number of minutes.")
    limits = Limits(budget_s=None if budget_min is None else float(budget_min) * 60.0)
    if base.model:
        base = replace(base, model=os.fspath(Path(base.model).expanduser()))
    return SweepDefinition(base, parsed, suite, repeat, n_predict, obj, limits, try_anyway, fit_step_mib, name)
