"""The one candidate type: what every experiment hands the lab's trial loop (`runner.Lab.trial`).

Why one: the sweep's grid row, the tune's search point, the A/B's visit and a knob search's try were
four types with the same core (the settings launched, a key, the launch key, a label) and the loop
read the A/B's side and pass off them by duck typing. Now the loop, the events (`events.LabEvent`)
and every strategy read one typed object.

Why flat optional fields rather than a core plus an `extra` mapping: every strategy's extras are a
handful of typed scalars read by name (a sweep row's `n_predict`, a tune point's `memory_key`, an A/B
visit's `side`); a mapping would lose their types and bring back the lookups by name this type
replaces. A field a strategy does not use keeps its default. What a strategy computes (a row's
label from its axis texts, a point's memory keys) is computed where it builds its candidates
(`sweep.definition`, `tune.space`, `lab.ab`, `lab.knobs`).

Candidates compare by identity (`eq=False`): `Settings` is mutable, and two candidates are the
same configuration when their `key`s are equal, which is what every strategy compares.

`Axis` is one searched or swept dimension, the same type for a sweep's grid and a tune's space: the
sweep (`--axis ub=256,512`: one field, the values as the user wrote them) and the tune (a space of
axes that may set several fields at once, walked from a start in order) each had their own. A sweep
axis is the case with one field, no start and no order; a tune axis carries no texts. `to_json`
keeps the sweep definition's shape (`field`, `texts`), which its id hashes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tui.core.lab.knob import Knob
from tui.core.options.settings import Settings


@dataclass(frozen=True, eq=False)
class Candidate:
    """One candidate of an experiment.

    Every candidate: `settings` (what is launched), `key` (its id within the experiment: a sweep
    row's id, a tune's launch key, `off 0` for an A/B visit, `fit_target=2048` for a knob try),
    `launch_key` (candidates with equal launch keys share one server launch), `label` (progress
    lines and the results store).

    Optional, by strategy:
    * the grid (sweep) and the search (tune): `values` (axis name, value) in axis order (a tune's
      start with `("mtp", bool)`; a knob try's one `(knob, value)`);
    * the sweep: `texts` (axis name, value as written), `index` (grid position from 0), `n_predict` (generation length, None: the probe's
      default), `duplicate_of`/`duplicate_reason` (the row whose launch and probes it shares);
    * the sweep and the tune: `invalid`, why the one validator refuses it (never launched);
    * the tune: `memory_key` (the launch key without the fields that change no allocation),
      `memory_base` (the same with every axis blanked) and `memory_ranks` (memory axes' order);
    * the A/B: `side` ("off" | "on");
    * a knob search: `knob` (the knob its `values` sets).
    """

    settings: Settings
    key: str
    launch_key: str
    label: str
    values: tuple[tuple[str, Any], ...] = ()
    texts: tuple[tuple[str, str], ...] = ()
    index: int = 0
    n_predict: int | None = None
    invalid: str | None = None
    duplicate_of: str | None = None
    duplicate_reason: str | None = None
    memory_key: str = ""
    memory_base: str = ""
    memory_ranks: tuple[tuple[str, float], ...] = ()
    side: str | None = None
    knob: Knob | None = None

    @property
    def runnable(self) -> bool:
        """Neither refused by the validator nor sharing another row's launch and probes."""
        return self.invalid is None and self.duplicate_of is None

    @property
    def mtp(self) -> bool:
        return self.settings.mtp_enabled

    @property
    def ubatch(self) -> int:
        return int(self.settings.ubatch_size or 512)

    def value(self, axis: str, default: Any = None) -> Any:
        """The value of `axis` (or the knob), `default` when the candidate has none."""
        return dict(self.values).get(axis, default)


def value_text(v: Any, axis: str = "") -> str:
    """A value as labels, tables and reports write it: on/off for a switch (and for the `mtp` axis's
    spec-type list), a list joined by `+` (`none` for an empty `spec-type`, else `-`), `default` for none."""
    if isinstance(v, list):
        if axis == "mtp":
            return "on" if "draft-mtp" in v else "off"
        return "+".join(str(x) for x in v) if v else "none" if axis == "spec-type" else "-"
    return ("on" if v else "off") if isinstance(v, bool) else "default" if v is None else str(v)


def values_label(values: Iterable[tuple[str, Any]]) -> str:
    """The one label of a candidate's values, `mtp=on ubatch=512` (a sweep row's texts as written)."""
    return " ".join(f"{k}={value_text(v)}" for k, v in values)


@dataclass(frozen=True)
class Axis:
    """A dimension: the Settings fields it sets and its values.

    `fields` are Settings field names; a sweep axis has one, which may also be `n_predict` (the probe's
    generation length) or `extra:<flag>` (an option without a Settings field, passed in extra_args).
    `texts` are the values as the user wrote them (a sweep's table headers). A tune walks an `ordered`
    axis from `start` in sorted order and tries an unordered one as a set; `mtp_only` axes exist only
    with MTP on."""

    name: str  # as the user wrote it (`ub`, `ctkd`, `n-predict`, `mtp`) or the tune's axis name
    fields: tuple[str, ...]
    values: tuple[Any, ...]  # parsed values, JSON-serialisable
    texts: tuple[str, ...] = ()
    start: Any = None
    ordered: bool = False
    mtp_only: bool = False

    @property
    def field(self) -> str:
        """The one field of a sweep axis."""
        return self.fields[0]

    @property
    def is_n_predict(self) -> bool:
        return self.field == "n_predict"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "field": self.field, "values": list(self.values), "texts": list(self.texts)}
