"""The machine a tune runs on: `Machine`, the callables the search and its trials are given (the
tests pass fakes), and the real ones `TuneRun` makes of the existing pieces:

* `Measure`, the tuner's `measure` over the one prober (`lab.runner.default_prober`): `n` passes of the workload
  through the probe runner, one stored run per call (a warm-up only on a launch's first call), the
  complete passes returned as per-pass samples. A shape workload's prompt is cut with the running
  server's tokenizer on the first call and kept in the tune's journal, so a resumed tune and its A/B
  probe the very same text;
* `planner`: `lab.planning.plan_check(exact=True)`, llama.cpp's own dry run for every candidate that
  gets that far (simulated GPUs played by loopback stand-ins), the estimate where it cannot run;
* `GpuHygiene`, from NVML: what would make the next trial's numbers lie. Before every launch no
  server of the tune runs, so any process holding GPU memory is someone else's (another server, a
  notebook, a desktop session), and clocks held down by heat or a power brake slow the next
  measurement for a reason outside its configuration. Each finding is one sentence, kept with the
  trial (`Trial.warnings`) and listed in the report. Simulated GPUs have nothing to check.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tui.core.lab.journal import Journal
from tui.core.lab.knobs import SearchResult
from tui.core.lab.launcher import LaunchOutcome, Launcher, SupervisorLauncher
from tui.core.lab.runner import default_prober, samples_of
from tui.core.lab.planning import PlanCheck, plan_check
from tui.core.lab.trial import Samples
from tui.core.options.settings import Settings
from tui.core.probes.suites import Suite
from tui.core.tune.workload import Workload, WorkloadError, WorkloadSpec, cut_prompt, shape_suite

if TYPE_CHECKING:  # the request is built by run, which imports this module
    from tui.core.tune.run import TuneRequest

#: (the running launch, the workload, passes) -> that many passes of per-pass figures.
MeasureFn = Callable[[LaunchOutcome, Workload, int], Samples]
#: (settings, the launcher to launch through, cancel) -> the smallest fit-target that survives a first
#: decode: `lambda s, la, ev: lab.knobs.smallest_fit_target(s, launcher=la, cancel=ev)`.
FitSearch = Callable[[Settings, Launcher, threading.Event], SearchResult]


@dataclass
class Machine:
    """`launcher` launches (`lab.launcher.Launcher`); `measure` probes the running server; `plan` is
    a `lab.planning.PlanCheck`; `fit_search` is None without a GPU (nothing for --fit to do);
    `clock` is what the budget reads (a fake machine passes its own)."""

    launcher: Launcher
    measure: MeasureFn
    plan: PlanCheck | None = None
    fit_search: FitSearch | None = None
    clock: Callable[[], float] = time.monotonic
    on_launch: Callable[[Settings], None] | None = None  # told of each launch before it starts (progress)
    #: the machine's hygiene before a candidate's launch (no server of ours runs then): one sentence per
    #: problem that would make its numbers lie (another process on the GPU, throttled clocks).
    hygiene: Callable[[], list[str]] | None = None


class Measure:
    """The tuner's `measure`: `n` passes of the workload against the running server."""

    def __init__(self, spec: WorkloadSpec, launcher: SupervisorLauncher, state: Journal, store: Any, *, tune_id: str,
                 cancel: threading.Event, on_request: Callable[[int, int, str], None] | None = None) -> None:
        """`on_request(i, n, prompt)`: told as request i of n starts (a trial's progress: a measurement
        takes minutes, and the screen looked frozen without it)."""
        self.launcher, self.state, self.store, self.tune_id, self.cancel = launcher, state, store, tune_id, cancel
        self.on_request = on_request
        self.spec, self.prober = spec, default_prober(spec.exact_output, spec.concurrency)
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
                          memory=out.memory, plan=None, cancel=self.cancel, progress=self._progress,
                          sink=self.store, warmup=warm)
        return samples_of(run)


    def _progress(self, ev: Any) -> None:
        if self.on_request is not None and getattr(ev, "event", "") == "request_started":
            self.on_request(int(ev.done or 0) + 1, int(ev.total or 0), str(ev.prompt or ""))


def planner(req: TuneRequest) -> PlanCheck:
    """Exact mode for every candidate; a remote model's candidates planned on its header copy."""
    from tui.core.remote.source import local_settings

    read = {} if req.meta is None else {str(req.header_path()): req.meta, str(req.base.model): req.meta}
    check = plan_check(req.gpus, exact=True, server_bin=req.server_bin, headers=read)
    header = req.model.header if req.model is not None else None
    if header is None:
        return check
    return lambda settings: check(local_settings(settings, header))


def real_offload(devices: Any, gpus: str | None) -> bool:
    """True when `--fit` has real device memory to act on: RPC servers, or GPUs NVML sees."""
    devs = list(getattr(devices, "devices", ()))
    return any(d.remote for d in devs) or (gpus is None and any(not d.remote for d in devs))


class GpuHygiene:
    """The tuner's hygiene check on the GPUs NVML sees: other processes holding memory, and clocks held
    down by temperature or a power brake (`gpu.collect`). Called with no server of the tune running,
    so every process on a GPU is someone else's. `close` ends its NVML session."""

    def __init__(self, source: Any = None) -> None:
        from tui.core.gpu import Nvml

        self._own = source is None
        self.source = source if source is not None else Nvml(register_atexit=False)

    def __call__(self) -> list[str]:
        from tui.core.gpu.collect import clock_warnings, collect_snapshot, other_process_warnings

        snap = collect_snapshot(self.source, read_host=False)
        return other_process_warnings(snap.devices) + clock_warnings(snap.devices)

    def close(self) -> None:
        if self._own:
            self.source.shutdown()


def gpu_hygiene(devices: Any, gpus: str | None, source: Any = None) -> GpuHygiene | None:
    """A `GpuHygiene` for the GPUs NVML sees; None with simulated GPUs or none seen."""
    if gpus is not None or not any(not d.remote for d in getattr(devices, "devices", ())):
        return None
    return GpuHygiene(source)
