"""One searched or swept dimension (`Axis`), the same type for a sweep's grid and a tune's space.

Why one: the sweep (`--axis ub=256,512`: one field, the values as the user wrote them) and the tune
(a space of axes that may set several fields at once, walked from a start in order) each had their
own `Axis`. A sweep axis is the case with one field, no start and no order; a tune axis carries no
texts. `to_json` keeps the sweep definition's shape (`field`, `texts`), which its id hashes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
