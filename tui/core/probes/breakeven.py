"""Where MTP starts (or stops) paying: the output length at which both sides take equally long.

A request of n_in prompt tokens and L output tokens takes n_in / PP + L / TG seconds. MTP usually
costs a little PP (the draft head runs over the prompt too) and gains TG, so

    t_on(L) - t_off(L) = n_in * (1/PP_on - 1/PP_off) - L * (1/TG_off - 1/TG_on)
                       =            PP loss          - L *          TG gain

and MTP wins for every L above PP loss / TG gain. The other cases matter as much for the answer:
MTP can win everywhere (no PP loss), nowhere (it loses TG too), or only below a length (it helps
PP but hurts TG, e.g. a different ubatch on the other side).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

#: `above`: MTP wins for outputs longer than `tokens`; `below`: shorter; `always` / `never`: at any
#: length; `unknown`: a speed is missing.
Wins = Literal["above", "below", "always", "never", "unknown"]


@dataclass(frozen=True)
class BreakEven:
    """The break-even output length for one prompt length."""

    prompt_tokens: int
    tokens: float | None  # where both take equally long (None unless `wins` is above/below)
    wins: Wins

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, subject: str = "MTP") -> str:
        """The break-even in words; `subject` is what wins on B's side (an A/B of two builds says "B")."""
        n = self.prompt_tokens
        if self.wins == "above":
            return f"{subject} wins for outputs longer than {self.tokens:.0f} tokens (with {n}-token prompts)."
        if self.wins == "below":
            return f"{subject} wins only for outputs shorter than {self.tokens:.0f} tokens (with {n}-token prompts)."
        if self.wins == "always":
            return f"{subject} wins at every output length (with {n}-token prompts): it loses no prompt speed."
        if self.wins == "never":
            return f"{subject} loses at every output length (with {n}-token prompts): it does not gain generation speed."
        return "break-even unknown: PP or TG is missing on one side."


def break_even(prompt_tokens: int, pp_off: float | None, tg_off: float | None, pp_on: float | None,
               tg_on: float | None) -> BreakEven:
    """The output length where MTP on and off take equally long, and on which side MTP wins."""
    if not (tg_off and tg_on) or (prompt_tokens and not (pp_off and pp_on)):
        return BreakEven(prompt_tokens, None, "unknown")
    pp_loss = prompt_tokens * (1 / pp_on - 1 / pp_off) if prompt_tokens else 0.0  # type: ignore[operator]
    tg_gain = 1 / tg_off - 1 / tg_on
    if tg_gain > 0:
        return BreakEven(prompt_tokens, pp_loss / tg_gain, "above") if pp_loss > 0 else BreakEven(prompt_tokens, None, "always")
    if tg_gain < 0:
        return BreakEven(prompt_tokens, pp_loss / tg_gain, "below") if pp_loss < 0 else BreakEven(prompt_tokens, None, "never")
    if pp_loss < 0:
        return BreakEven(prompt_tokens, None, "always")
    return BreakEven(prompt_tokens, None, "never")


def crossing(be: BreakEven) -> float | None:
    """The break-even length when there is one (what `WorkloadView.break_even_output` shows)."""
    return be.tokens if be.wins in ("above", "below") and be.tokens and be.tokens > 0 else None
