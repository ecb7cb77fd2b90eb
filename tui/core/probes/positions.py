"""Acceptance by draft position: how often the 1st, 2nd, 3rd... drafted token of a draft is accepted.

What llama-server b11434 counts (tools/server/server-context.cpp, `update_slots` after verifying a
draft, and `metrics_on_prediction`):

* a *verification step* is one draft of at least one token checked by the target model
  (`llamacpp:spec_decode_num_drafts_total`). A partial acceptance that restores a checkpoint and
  replays the accepted prefix still counts once: the first pass returns before counting, the replay
  counts the same prefix;
* verification accepts the longest agreeing *prefix* of the draft; with `n` of its tokens accepted,
  the slot adds one to positions `0 .. n-1` of its per-position vector (sized to the speculative
  n-max, `common_speculative_n_max`). So the count at position `i` (0-based on the server, shown
  1-based here) is **the number of drafts whose first i+1 tokens were all accepted**: it never grows
  with the position, and the counts add up to `spec_decode_num_accepted_tokens_total`;
* the slot's vector is added to `/metrics`' `llamacpp:spec_decode_num_accepted_tokens_per_pos_total
  {position="i"}` when the request's slot is reset (before the next request), the same moment as the
  other speculative counters, so `/metrics` scraped before and after a request gives that request's
  exact counts. The series is absent until the first speculative request ends;
* how many drafts *reached* a position is not counted: a draft is shorter than n-max when
  `--spec-draft-p-min` stopped it (the draft head unsure) or near the end of a request (a draft never
  runs past `n_predict` or the context). Only the total, `spec_decode_num_draft_tokens_total`, is
  known; per position it is estimated here (`drafted`), and exact when every draft was full.

The server log's per-request "acc per pos = (...)" line is the same count divided by that request's
verification steps, rounded to 3 decimals, and printed only at trace verbosity (`SLT_TRC`), so the
probes read `/metrics` (mtp-tune launches with `--metrics`; a server attached without it has no
per-position figures, and the run says so through the `/metrics` warning).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tui.core.server.metrics import Metrics

#: The /metrics counter of accepted tokens per draft position (without the `llamacpp:` prefix).
PER_POSITION = "spec_decode_num_accepted_tokens_per_pos_total"
STEPS = "spec_decode_num_drafts_total"
DRAFTED = "spec_decode_num_draft_tokens_total"


def position_key(pos: int) -> str:
    """The key of position `pos` (0-based, as the server labels it) in a stored /metrics delta."""
    return f'{PER_POSITION}{{position="{pos}"}}'


def position_counters(m: Metrics) -> dict[str, float]:
    """The per-position counters of one scrape, keyed by `position_key` (none before the first draft)."""
    return {position_key(pos): float(v) for pos, v in m.accepted_per_position.items()}


@dataclass(frozen=True)
class DraftPositions:
    """Counts of one request or a run: `steps` drafts verified, `drafted` tokens drafted in all,
    `accepted[i]` the drafts whose first i+1 tokens were all accepted (see the module docstring)."""

    steps: int
    drafted: int
    accepted: tuple[int, ...]

    @property
    def n_max(self) -> int:
        """The draft n-max the server counted positions for."""
        return len(self.accepted)

    @property
    def shares(self) -> tuple[float, ...]:
        """Per position: the share of drafts whose first i+1 tokens were accepted (the log's `acc per pos`)."""
        return tuple(c / self.steps for c in self.accepted) if self.steps else ()

    @property
    def conditional(self) -> tuple[float | None, ...]:
        """Per position: accepted when every earlier position was (how fast acceptance decays)."""
        prev = [self.steps, *self.accepted[:-1]]
        return tuple(c / p if p else None for c, p in zip(self.accepted, prev))

    @property
    def drafted_exact(self) -> bool:
        """Every draft had all n-max tokens, so each position was drafted `steps` times exactly."""
        return self.drafted == self.steps * self.n_max

    @property
    def drafted_by_position(self) -> tuple[int, ...]:
        """Drafts that reached each position. Exact when `drafted_exact`; else the shortfall
        (steps x n-max - drafted) is taken from the last positions first, never below what was
        accepted there: a short draft lacks its tail (p-min stops it, or the request's end does)."""
        short = max(0, self.steps * self.n_max - self.drafted)
        out = [self.steps] * self.n_max
        for i in reversed(range(self.n_max)):
            cut = min(short, out[i] - self.accepted[i])
            out[i] -= cut
            short -= cut
        return tuple(out)

    def __add__(self, other: DraftPositions) -> DraftPositions:
        n = max(self.n_max, other.n_max)
        a, b = (p.accepted + (0,) * (n - p.n_max) for p in (self, other))
        return DraftPositions(self.steps + other.steps, self.drafted + other.drafted,
                              tuple(x + y for x, y in zip(a, b)))

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "drafted": self.drafted, "accepted": list(self.accepted),
                "shares": [round(s, 4) for s in self.shares]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> DraftPositions | None:
        """The stored form back; None for a missing or malformed one (an older run has none)."""
        if not isinstance(d, Mapping):
            return None
        try:
            acc = tuple(int(x) for x in d.get("accepted") or ())
            pos = cls(int(d["steps"]), int(d["drafted"]), acc)
        except (KeyError, TypeError, ValueError):
            return None
        return pos if pos.steps > 0 and pos.accepted else None

    @classmethod
    def from_delta(cls, delta: Mapping[str, float] | None) -> DraftPositions | None:
        """One request's counts from its /metrics delta; None without drafts or per-position series."""
        if not delta or not delta.get(STEPS):
            return None
        acc: dict[int, int] = {}
        head = f'{PER_POSITION}{{position="'
        for k, v in delta.items():
            if k.startswith(head) and k.endswith('"}') and k[len(head):-2].isdigit():
                acc[int(k[len(head):-2])] = int(v)
        if not acc:
            return None
        return cls(int(delta[STEPS]), int(delta.get(DRAFTED, 0)), tuple(acc.get(i, 0) for i in range(max(acc) + 1)))


def total(parts: Iterable[DraftPositions | None]) -> DraftPositions | None:
    """The counts of several requests (or runs) together; None when none has any."""
    out: DraftPositions | None = None
    for p in parts:
        if p is not None:
            out = p if out is None else out + p
    return out


def shares_text(pos: DraftPositions | None) -> str:
    """`1: 82 %  2: 51 %  3: 12 %`, or `-` without figures."""
    if pos is None or not pos.steps:
        return "-"
    return "  ".join(f"{i + 1}: {s:.0%}".replace("%", " %") for i, s in enumerate(pos.shares))
