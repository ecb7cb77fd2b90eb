"""The one prober: every experiment measures a ready server through the probe runner here.

Why one: the sweep (`default_prober`) and the tune (`make_prober`, with `ignore_eos` and an optional
warm-up) each wrapped `probes.runner.run_probe_sync`. A run is `repeat` passes of a suite, recorded
in the results store (`sink`) with the settings, memory report and plan it ran with.

`samples_of` reads a run's complete passes as per-pass samples, the tune's racing figures.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from tui.core.options.settings import Settings, settings_json
from tui.core.probes.hygiene import check_memory_report
from tui.core.probes.run_types import RunConfig, RunContext
from tui.core.probes.suites import Suite
from tui.core.lab.trial import Samples


class Prober(Protocol):
    """Runs the probe suite against a ready server (`default_prober` is the real one)."""

    def __call__(self, url: str, suite: Suite, *, repeat: int, n_predict: int | None, label: str,
                 settings: Settings, memory: dict[str, Any] | None, plan: dict[str, Any] | None,
                 cancel: threading.Event, progress: Callable[[Any], None], sink: Any = None) -> Any:
        """Returns a run with `status` (ok | failed | cancelled), `summary` (probes.records.summarize_run),
        `warnings`, `error`, `run_id` and `requests`, like probes.run_types.ProbeRun."""
        ...


def default_prober(ignore_eos: bool = False) -> Prober:
    """The real probe runner, on its own event loop in the experiment's thread. `ignore_eos`: every
    request generates its full length (a tune's exact-output workload); `warmup=False` on a call
    skips the warm-up (a launch's later passes need none)."""
    from tui.core.probes.runner import run_probe_sync  # the runner pulls in asyncio and httpx: lazy

    def probe(url: str, suite: Suite, *, repeat: int, n_predict: int | None, label: str, settings: Settings,
              memory: dict[str, Any] | None, plan: dict[str, Any] | None, cancel: threading.Event,
              progress: Callable[[Any], None], sink: Any = None, warmup: bool = True) -> Any:
        cfg = RunConfig(repeat=repeat, ignore_eos=ignore_eos, warmup=warmup,
                        **({"n_predict": n_predict} if n_predict is not None else {}))
        ctx = RunContext(url=url, label=label, model=settings.model, plan=plan, memory=memory,
                         settings=settings_json(settings.redacted(), only_set=False),
                         configured_parallel=settings.parallel, extra_warnings=check_memory_report(memory))
        return run_probe_sync(url, suite, cfg, api_key=settings.api_key, context=ctx, sink=sink, progress=progress,
                              cancel=cancel)

    return probe  # type: ignore[return-value]


def samples_of(run: Any) -> Samples:
    """A probe run's complete passes as per-pass samples (`error` when it failed)."""
    s = Samples.of_passes([p for p in (run.summary or {}).get("passes") or [] if p.get("complete", True)])
    if run.status == "failed":
        s.error = run.error or "the probe failed"
    return s
