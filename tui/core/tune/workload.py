"""The workload a tune optimises for: the mean request shape (the objective) and the longest request
(what the context must hold).

Why the mean is exact: a request costs `in / PP + out / TG` seconds (`probes.compare.e2e_seconds`),
which is linear in the token counts, so a suite of requests costs `len * (mean_in / PP + mean_out /
TG)`; the mean shape ranks configurations exactly as the whole suite does. The context is sized from
the longest single request instead, so no request of the workload is ever cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tui.core.planning.largest_ctx import CTX_STEP
from tui.core.probes.compare import e2e_seconds
from tui.core.sweep.axes import Objective, SweepDefinitionError, parse_objective


@dataclass(frozen=True)
class Workload:
    """Mean prompt and output tokens per request, and the longest request (prompt + output)."""

    label: str
    in_tokens: float
    out_tokens: float
    longest: int

    def seconds(self, pp_tps: float | None, tg_tps: float | None) -> float | None:
        """End-to-end seconds of one mean request at these speeds (None when a needed speed is missing)."""
        return e2e_seconds(self.in_tokens, self.out_tokens, pp_tps, tg_tps)  # type: ignore[arg-type]

    @property
    def objective(self) -> Objective:
        """The same objective as a sweep's `workload:IN,OUT` (rounded to whole tokens)."""
        return Objective("workload", round(self.in_tokens), max(1, round(self.out_tokens)))

    def ctx_needed(self, min_ctx: int = 0) -> int:
        """The context that holds the longest request (and `min_ctx`), up to a whole 256-cell block."""
        need = max(int(min_ctx), int(self.longest), 1)
        return -(-need // CTX_STEP) * CTX_STEP

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "in_tokens": self.in_tokens, "out_tokens": self.out_tokens, "longest": self.longest}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Workload:
        return cls(str(d["label"]), float(d["in_tokens"]), float(d["out_tokens"]), int(d["longest"]))


def shape(in_tokens: int, out_tokens: int, label: str | None = None) -> Workload:
    """Every request the same: `in_tokens` in, `out_tokens` out."""
    if in_tokens < 0 or out_tokens < 1:
        raise ValueError(f"--workload {in_tokens}:{out_tokens}: give a prompt of 0 or more tokens and an output of 1 or more.")
    return Workload(label or f"{in_tokens}:{out_tokens}", float(in_tokens), float(out_tokens), in_tokens + out_tokens)


def from_requests(label: str, requests: Sequence[tuple[int, int]]) -> Workload:
    """A suite as (prompt tokens, output tokens) per request: its mean shape and its longest request."""
    if not requests:
        raise ValueError(f"workload {label}: no requests to size it from.")
    n = len(requests)
    return Workload(label, sum(i for i, _ in requests) / n, sum(o for _, o in requests) / n,
                    max(i + o for i, o in requests))


def parse_shape(text: str) -> Workload:
    """`IN:OUT` (token counts, `12k` allowed), read with the sweep's own `workload:IN,OUT` parser."""
    t = text.strip()
    if ":" not in t:
        raise ValueError(f"--workload {text!r}: write IN:OUT, e.g. 12k:800 for a 12000-token prompt and an 800-token answer.")
    try:
        obj = parse_objective("workload:" + t.replace(":", ",", 1))
    except SweepDefinitionError:
        raise ValueError(f"--workload {text!r}: write IN:OUT with whole token counts, e.g. 2000:500 or 12k:800.") from None
    return shape(obj.in_tokens, obj.out_tokens, t)


def beyond_training(n_ctx_train: int, requests: Sequence[tuple[str, int]]) -> str | None:
    """The refusal of the first request (what gave it, its tokens) longer than the model's training
    context, or None. Why refuse: llama-server runs such a context with a warning only, and past
    what the model was trained on its answers (and so speed and acceptance) no longer mean anything;
    the sweep and the tune would measure and recommend it. `n_ctx_train` 0 (unknown) checks nothing."""
    if n_ctx_train <= 0:
        return None
    for what, tokens in requests:
        if tokens > n_ctx_train:
            return (f"{what}: {tokens} tokens is longer than the model's training context ({n_ctx_train} tokens); "
                    "shorten it to fit.")
    return None

