"""The one typed door to a server, and what the server really runs with.

`ServerHandle` is what the TUI backend and the probes talk to, whether mtp-tune started the server
(`Supervisor`) or only watches it (`Attachment`). `RunningSettings` is how a handle reports the
settings in effect: the Settings a supervisor launched, or what an attached server says in `/props`,
`/slots` and `/metrics`. A stored run is labelled from these, never from a form the server never saw.

What llama-server b11434 tells about itself: `/props` gives `model_path`, `total_slots`,
`build_info` and `default_generation_settings.n_ctx` (its `speculative.types` is always "none");
`/slots` gives per slot `n_ctx` and `speculative` (true when a draft is attached); the draft's n-max
is never reported directly, but once a speculative request ran, `/metrics` has one
`llamacpp:spec_decode_num_accepted_tokens_per_pos` series per draft position (common_speculative_n_max).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from tui.core.options.lookup import default
from tui.core.options.settings import Settings
from tui.core.server.events import LogListener, ServerState, StateListener
from tui.core.server.failures import Failure

DEFAULT_N_MAX = int(default("--spec-draft-n-max"))  # type: ignore[call-overload]  # the option table's, b11434


@dataclass(frozen=True)
class RunningSettings:
    """The settings a server runs with; None marks what the server does not tell (unknown)."""

    source: Literal["launched", "server"]
    model: str | None = None
    ctx: int | None = None
    slots: int | None = None
    mtp: bool | None = None
    n_max: int | None = None
    build: str | None = None
    settings: Settings | None = None  # the full launched settings (source "launched" only)

    @classmethod
    def from_settings(cls, s: Settings) -> "RunningSettings":
        """What a launch runs with: the Settings its supervisor carries (its argv is built from them)."""
        mtp = s.mtp_enabled
        return cls("launched", model=s.model, ctx=s.ctx_size, slots=s.parallel, mtp=mtp,
                   n_max=(s.spec_draft_n_max or DEFAULT_N_MAX) if mtp else None, settings=s)

    @classmethod
    def from_server(cls, props: Mapping[str, Any] | None, slots: Sequence[Mapping[str, Any]] | None,
                    accepted_per_pos: Mapping[int, float] | None = None) -> "RunningSettings":
        """What an attached server says: `/props`, `/slots` and the per-position `/metrics` series."""
        props = props or {}
        gs = props.get("default_generation_settings") or {}
        ctx = gs.get("n_ctx") if isinstance(gs, Mapping) else None
        mtp: bool | None = None
        if slots:
            mtp = any(bool(s.get("speculative")) for s in slots)
            ctx = ctx if isinstance(ctx, int) else slots[0].get("n_ctx")
        n_max = len(accepted_per_pos) if mtp and accepted_per_pos else None
        total = props.get("total_slots")
        model = props.get("model_path")
        build = props.get("build_info")
        return cls("server", model=model if isinstance(model, str) and model else None,
                   ctx=ctx if isinstance(ctx, int) else None, slots=total if isinstance(total, int) else None,
                   mtp=mtp, n_max=n_max, build=build if isinstance(build, str) else None)

    def apply(self, form: Settings) -> Settings:
        """`form` with what the server is known to run overlaid (unknown values keep the form's)."""
        if self.settings is not None:
            return self.settings
        s = form
        if self.model:
            s = replace(s, model=self.model)
        if self.ctx is not None:
            s = replace(s, ctx_size=self.ctx)
        if self.slots is not None:
            s = replace(s, parallel=self.slots)
        if self.mtp is not None:
            s = replace(s, spec_type=["draft-mtp"] if self.mtp else [],
                        spec_draft_n_max=self.n_max if self.mtp else None)
        return s

    def label(self) -> str:
        """A short name for the configuration: `MTP n3`, `MTP n?` (n-max unknown), `no MTP`, `MTP?`."""
        if self.mtp is None:
            return "MTP?"
        if not self.mtp:
            return "no MTP"
        return f"MTP n{self.n_max if self.n_max is not None else '?'}"

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "model": self.model, "ctx": self.ctx, "slots": self.slots,
                "mtp": self.mtp, "n_max": self.n_max, "build": self.build}


@runtime_checkable
class ServerHandle(Protocol):
    """A server mtp-tune talks to: one it runs (Supervisor) or one it watches (Attachment)."""

    @property
    def state(self) -> ServerState: ...

    @property
    def base_url(self) -> str | None: ...

    @property
    def api_key(self) -> str | None: ...

    @property
    def failure(self) -> Failure | None: ...

    @property
    def log_path(self) -> Path | None: ...

    @property
    def pid(self) -> int | None: ...

    def tail(self, n: int | None = None) -> list[str]: ...

    def memory_snapshot(self) -> dict[str, Any] | None: ...

    def add_state_listener(self, fn: StateListener) -> Callable[[], None]: ...

    def add_log_listener(self, fn: LogListener) -> Callable[[], None]: ...

    def wait_ready(self, timeout: float | None = None) -> ServerState: ...

    def wait_for(self, states: Iterable[ServerState], timeout: float) -> ServerState: ...

    def running_settings(self) -> RunningSettings | None: ...

    def release(self) -> None:
        """Let go of the server: a supervisor stops it, an attachment stops watching."""
        ...
