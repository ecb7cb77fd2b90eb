"""The tune's measurement over the real server (see `tune_run`); launches are counted by the tuner's
`lab.launcher.CountingLauncher`.

`Measure` is the tuner's `measure` callable over the one prober (`lab.measure`): `n` passes of the workload through the probe runner,
one stored run per call (a warm-up only on a launch's first call), the complete passes returned as
per-pass samples. A shape workload's prompt is cut with the running server's tokenizer on the first
call and kept in the tune's state, so a resumed tune and its A/B probe the very same text.
"""

from __future__ import annotations

import threading
from typing import Any

from tui.core.lab.launcher import LaunchOutcome, SupervisorLauncher
from tui.core.lab.measure import default_prober, samples_of
from tui.core.options.settings import Settings
from tui.core.probes.suites import Suite
from tui.core.lab.journal import Journal
from tui.core.lab.trial import Samples
from tui.core.tune.workload_spec import WorkloadError, WorkloadSpec, cut_prompt, shape_suite
from tui.core.tune.workload import Workload


class Measure:
    """The tuner's `measure`: `n` passes of the workload against the running server."""

    def __init__(self, spec: WorkloadSpec, launcher: SupervisorLauncher, state: Journal, store: Any, *, tune_id: str,
                 cancel: threading.Event) -> None:
        self.launcher, self.state, self.store, self.tune_id, self.cancel = launcher, state, store, tune_id, cancel
        self.spec, self.prober = spec, default_prober(spec.exact_output)
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
