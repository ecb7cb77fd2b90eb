"""The probe runner as a sweep collaborator: the protocol a sweep calls, and the real one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from tui.core.options.settings import Settings
from tui.core.probes.suites import Suite
from tui.core.sweep.definition import settings_json


class Prober(Protocol):
    """Runs the probe suite against a ready server (`probes.runner.run_probe_sync` fits via `default_prober`)."""

    def __call__(self, url: str, suite: Suite, *, repeat: int, n_predict: int | None, label: str,
                 settings: Settings, memory: dict[str, Any] | None, plan: dict[str, Any] | None,
                 cancel: threading.Event, progress: Callable[[Any], None], sink: Any = None) -> Any:
        """Returns a run with `status` (ok | failed | cancelled), `summary` (probes.records.summarize_run),
        `warnings`, `error`, `run_id` and `requests`, like probes.run_types.ProbeRun."""
        ...


def default_prober() -> Prober:
    """The real probe runner, run on its own event loop in the sweep's thread."""
    from tui.core.probes.run_types import RunConfig, RunContext
    from tui.core.probes.runner import run_probe_sync

    def probe(url: str, suite: Suite, *, repeat: int, n_predict: int | None, label: str, settings: Settings,
              memory: dict[str, Any] | None, plan: dict[str, Any] | None, cancel: threading.Event,
              progress: Callable[[Any], None], sink: Any = None) -> Any:
        cfg = RunConfig(repeat=repeat) if n_predict is None else RunConfig(repeat=repeat, n_predict=n_predict)
        from tui.core.probes.hygiene import check_memory_report

        ctx = RunContext(url=url, label=label, model=settings.model, settings=settings_json(settings.redacted(), only_set=False),
                         configured_parallel=settings.parallel, plan=plan, memory=memory,
                         extra_warnings=check_memory_report(memory))
        return run_probe_sync(url, suite, cfg, api_key=settings.api_key, context=ctx, sink=sink, progress=progress,
                              cancel=cancel)

    return probe  # type: ignore[return-value]
