"""What llama-server answers, as data, and how its replies are read.

`CompletionResult` keeps the server's `timings` untouched and adds what only the client sees (time to
first token, wall time); `draft_n`/`draft_n_accepted` are absent (not 0) when nothing was drafted.
The readers take apart SSE streams (`/completion` ends with a `stop: true` chunk and no `[DONE]`,
chat streams with `[DONE]`) and the text of completion and chat objects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Health:
    status_code: int
    status: str  # "ok", "loading", "error", ...
    body: Any

    @property
    def ok(self) -> bool:
        return self.status_code == 200

    @property
    def loading(self) -> bool:
        return self.status_code == 503


@dataclass
class CompletionResult:
    """One completion. `timings` is the server's object as sent; `response` the final JSON object."""

    text: str
    timings: dict[str, Any]
    ttft_s: float | None  # client side: request sent -> first generated text (streaming only)
    wall_s: float  # client side: request sent -> response complete
    response: dict[str, Any]
    stream: bool
    chunks: int = 0
    usage: dict[str, Any] | None = None

    @property
    def draft_n(self) -> int:
        """Draft tokens proposed (0 when the server omitted the key because none were drafted)."""
        return int(self.timings.get("draft_n", 0))

    @property
    def draft_n_accepted(self) -> int:
        return int(self.timings.get("draft_n_accepted", 0))

    @property
    def acceptance(self) -> float | None:
        """Accepted / drafted, or None when nothing was drafted."""
        return self.draft_n_accepted / self.draft_n if self.draft_n else None

    @property
    def generation_settings(self) -> dict[str, Any] | None:
        gs = self.response.get("generation_settings")
        return gs if isinstance(gs, dict) else None

    @property
    def predicted_per_second(self) -> float | None:
        v = self.timings.get("predicted_per_second")
        return float(v) if v is not None else None


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The `data:` payloads of an SSE stream (comments such as the `:` keep-alive pings skipped)."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
    if data:
        yield "\n".join(data)


def completion_text(d: dict[str, Any]) -> str:
    """The text of a `/completion` object."""
    return str(d.get("content") or "")


def _first_choice(d: dict[str, Any], part: str) -> dict[str, Any]:
    choices = d.get("choices") or []
    return (choices[0].get(part) or {}) if choices else {}


def chat_text(d: dict[str, Any]) -> str:
    """The text of a chat completion object."""
    return str(_first_choice(d, "message").get("content") or "")


def chat_delta(d: dict[str, Any]) -> str:
    """The text of one chat stream chunk (reasoning included)."""
    delta = _first_choice(d, "delta")
    return str(delta.get("content") or "") + str(delta.get("reasoning_content") or "")
