"""What the App is built from (Posting's `make_posting` idea): one options object for the CLI, the
tests and the screenshot script, so tests construct exactly what users run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tui.core.gpu.profiles import HwProfile
from tui.core.options.settings import Settings
from tui.ui.cockpit.views import PlanView, ProbeState, ServerStatus
from tui.ui.runs.views import CompareRow, RunRow


@dataclass(frozen=True)
class FixedScreen:
    """Fixed content for snapshot tests and screenshots: no sampler, no timers, no workers."""

    snapshot: object | None = None  # a GpuSnapshot
    plan: PlanView | None = None
    server: ServerStatus = field(default_factory=ServerStatus)
    probes: ProbeState = field(default_factory=ProbeState)
    runs: tuple[RunRow, ...] = ()
    comparison: tuple[CompareRow, ...] = ()
    compared: tuple[int | str, ...] = ()


@dataclass(frozen=True)
class AppOptions:
    """Everything `make_app` needs. `simulate` with `hardware=None` means a CPU-only host."""

    settings: Settings = field(default_factory=Settings)
    server_bin: Path | None = None
    hardware: HwProfile | None = None
    simulate: bool = False
    attach_url: str | None = None
    demo: bool = False
    theme: str | None = None
    autolaunch: bool = False
    sample_interval_s: float = 1.0
    fixed: FixedScreen | None = None
    title: str = "mtp-tune"
    server_log_dir: Path | None = None
    ready_timeout_s: float = 180.0
    probe_suite: str | None = None
    probe_repeat: int = 3
    probe_n_predict: int = 512
    #: Off for snapshots and screenshots, so a frame never depends on when it was taken.
    cursor_blink: bool = True
    #: Replace the instant estimate with llama.cpp's dry-run figures once the settings settle.
    exact: bool = True
    exact_debounce_s: float = 0.4
