"""The planner's one error type."""

from __future__ import annotations


class PlanError(ValueError):
    """Impossible settings for this model; the message names the flag and what to do."""
