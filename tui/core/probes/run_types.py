"""What a probe run takes, reports and returns: its options, what the caller knows, progress events, the outcome.

Plain data (and the `RunSink` protocol the results store fits), so a UI, the CLI and the sweep can
build and read runs without the runner (`runner`) that performs them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from tui.core.probes import hygiene
from tui.core.probes.hygiene import ProbeWarning
from tui.core.probes.records import RequestRecord


class RunSink(Protocol):
    """Where a run is recorded as it goes (`tui.core.results.store.Store` fits)."""

    def begin_run(self, **fields: Any) -> int: ...

    def update_run(self, run_id: int, **fields: Any) -> None: ...

    def add_request(self, run_id: int, rec: dict[str, Any]) -> None: ...

    def finish_run(
        self, run_id: int, status: str, *, summary: dict[str, Any] | None = ...,
        warnings: Sequence[dict[str, Any]] = ..., error: str | None = ...,
    ) -> None: ...


@dataclass
class RunConfig:
    """Probe options. `n_predict` applies to prompts that don't set their own (the long prompt does).

    `concurrency`: requests in flight at once (`concurrency` module); the server needs that many slots.
    Kept in the run's stored config (`config_json`), so a store written before it reads as 1."""

    repeat: int = 3
    n_predict: int = 512
    seed: int = 42
    temperature: float = 0.0
    warmup: bool = True
    ignore_eos: bool = False  # True forces exactly n_predict tokens (less realistic text, exact lengths)
    min_generation: int = hygiene.MIN_GENERATION
    concurrency: int = 1

    def __post_init__(self) -> None:
        if self.repeat < 1:
            raise ValueError(f"repeat must be at least 1, not {self.repeat}")
        if self.n_predict < 1:
            raise ValueError(f"n_predict must be at least 1, not {self.n_predict}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {self.concurrency}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunContext:
    """What the caller knows about the setup, stored with the run (all optional in attach mode)."""

    url: str
    label: str | None = None
    model: str | None = None
    settings: dict[str, Any] | None = None
    configured_parallel: int | None = None
    server: dict[str, Any] = field(default_factory=dict)  # version, capabilities...
    hardware: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    #: Called before the first and after the last request: GPU contamination, host spill.
    environment_check: Callable[[], list[ProbeWarning]] | None = None
    extra_warnings: list[ProbeWarning] = field(default_factory=list)
    #: Asks the server's handle what it runs with (a RunningSettings); with `label_of`, the stored
    #: label and MTP flag are set from it after the warm-up (an attached server's n-max shows then).
    running: Callable[[], Any] | None = None
    label_of: Callable[[Any], str] | None = None
    settings_of: Callable[[Any], dict[str, Any]] | None = None


@dataclass(frozen=True)
class ProbeProgress:
    """A progress event for the UI. `event`: started | request_started | first_token | request_done |
    pass_done (concurrency N > 1: a pass's concurrent phase ended whole; `metrics_delta` is its
    /metrics delta, the figures its requests have none of) | finished. `done`/`total` count recorded
    requests."""

    event: str
    done: int
    total: int
    run_id: int | None = None
    prompt: str | None = None
    repeat: int | None = None
    record: RequestRecord | None = None
    metrics_delta: dict[str, float] | None = None
    status: str | None = None
    message: str = ""


ProgressFn = Callable[[ProbeProgress], None]


@dataclass
class ProbeRun:
    """The outcome of a run, as stored."""

    run_id: int | None
    status: str  # ok | failed | cancelled
    suite: str
    config: RunConfig
    requests: list[RequestRecord]
    summary: dict[str, Any]
    warnings: list[ProbeWarning]
    error: str | None = None
    server: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0
    finished_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "error": self.error,
            "suite": self.suite,
            "config": self.config.to_json(),
            "server": self.server,
            "summary": self.summary,
            "requests": [r.to_json() for r in self.requests],
            "warnings": [w.to_json() for w in self.warnings],
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }
