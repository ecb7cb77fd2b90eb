"""One finding about a setting: which field, how bad, and what to do; and the field's user-facing name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tui.core.options.fields import FIELD_BY_NAME

__all__ = ["Problem", "Severity", "errors", "label"]

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    """One finding: `field` is the Settings field (or `extra_args`), so a form can mark it; `option`
    is the spelling an unknown option was written with, so the importer's and the validator's word
    on the same one can be told apart from two different findings (`validate.combine`)."""

    field: str
    severity: Severity
    message: str
    option: str | None = None

    def __str__(self) -> str:
        return f"{self.severity}: {self.message}"


def label(field: str) -> str:
    """The option name users know for a Settings field (`ctx_size` -> `ctx-size`)."""
    spec = FIELD_BY_NAME.get(field)
    return spec.label if spec else field.replace("_", "-")


def errors(problems: list[Problem]) -> list[Problem]:
    """Only the problems that stop a launch or an export."""
    return [p for p in problems if p.severity == "error"]
