"""The tune's measurement over the real server (see `tune_run`); launches are counted by the tuner's
`lab.launcher.CountingLauncher`.

`Measure` is the tuner's `measure` callable: `n` passes of the workload through the probe runner,
one stored run per call (a warm-up only on a launch's first call), the complete passes returned as
per-pass samples. A shape workload's prompt is cut with the running server's tokenizer on the first
call and kept in the tune's state, so a resumed tune and its A/B probe the very same text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tui.core.lab.launcher import LaunchOutcome, SupervisorLauncher
from tui.core.options.settings import Settings
from tui.core.probes.hygiene import check_memory_report
from tui.core.probes.run_types import RunConfig, RunContext
from tui.core.probes.suites import Suite
from tui.core.sweep.definition import settings_json
from tui.core.lab.journal import Journal
from tui.core.lab.trial import Samples
from tui.core.tuning.tune_workload import WorkloadError, WorkloadSpec, cut_prompt, shape_suite
from tui.core.tuning.workload import Workload


def make_prober(ignore_eos: bool) -> Callable[..., Any]:
    """The sweep's prober (`sweep.probing.default_prober`) with the workload's `ignore_eos` and an
    optional warm-up (the second rung of one launch needs none)."""
    from tui.core.probes.runner import run_probe_sync

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

    return probe


def samples_of(run: Any) -> Samples:
    """A probe run's complete passes as per-pass samples (`error` when it failed)."""
    passes = [p for p in (run.summary or {}).get("passes") or [] if p.get("complete", True)]
    s = Samples([p.get("pp_tps") for p in passes], [p.get("tg_tps") for p in passes],
                [p.get("acceptance") for p in passes])
    if run.status == "failed":
        s.error = run.error or "the probe failed"
    return s


class Measure:
    """The tuner's `measure`: `n` passes of the workload against the running server."""

    def __init__(self, spec: WorkloadSpec, launcher: SupervisorLauncher, state: Journal, store: Any, *, tune_id: str,
                 cancel: threading.Event) -> None:
        self.launcher, self.state, self.store, self.tune_id, self.cancel = launcher, state, store, tune_id, cancel
        self.spec, self.prober = spec, make_prober(spec.exact_output)
        self.text = state.tune.prompt if spec.shape is not None else None
        self._last: LaunchOutcome | None = None
        if self.text is not None:
            launcher.first_decode_prompt = self.text

    def suite(self, url: str | None, api_key: str | None) -> Suite:
        if self.spec.suite is not None:
            return self.spec.suite
        assert self.spec.shape is not None
        if self.text is None:
            if url is None:
                raise WorkloadError("no running server to cut the workload's prompt with")
            self.text = cut_prompt(url, round(self.spec.shape.in_tokens), api_key=api_key)
            self.state.tune.prompt = self.text
            self.launcher.first_decode_prompt = self.text  # later launches decode the workload's own prompt first
        return shape_suite(self.spec.shape, self.text)

    def __call__(self, out: LaunchOutcome, workload: Workload, n: int) -> Samples:
        rs = self.launcher.running_settings()
        settings = rs.settings if rs is not None and rs.settings is not None else Settings()
        try:
            suite = self.suite(out.url, settings.api_key)
        except WorkloadError as e:
            return Samples(error=str(e))
        warm, self._last = out is not self._last, out
        label = f"tune {self.tune_id[5:13]} {rs.label() if rs is not None else ''}".rstrip()
        run = self.prober(out.url or "", suite, repeat=n, n_predict=None, label=label, settings=settings,
                          memory=out.memory, plan=None, cancel=self.cancel, progress=lambda p: None,
                          sink=self.store, warmup=warm)
        return samples_of(run)
