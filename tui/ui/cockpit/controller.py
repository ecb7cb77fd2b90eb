"""The cockpit's controller: its one door to the core, and the doors of the features it opens.

It owns the backend (telemetry, the server, probes, the store) and the main screen's controllers:
plan (settings -> validation -> estimate and exact figures), server (launch, restart, stop), probes,
calibration, quality (what the K/V types on screen cost), and the lab (experiments); and the controllers of the screens it opens: runs (over the
backend's one results store) and profiles. The App builds it and hands it to the `MainScreen`, which
attaches itself as the host their workers run on and post to.
"""

from __future__ import annotations

from collections.abc import Callable

from tui.core.gpu.types import GpuSnapshot
from tui.core.options.settings import Settings
from tui.ui.cockpit.backend import Backend
from tui.ui.cockpit import remote
from tui.ui.cockpit.calibration import CalibrationController
from tui.ui.cockpit.plan import PlanController
from tui.ui.cockpit.planning import devices_for
from tui.ui.cockpit.probes import ProbeController
from tui.ui.cockpit.quality import QualityController
from tui.ui.cockpit.quality_memory import QualityMemoryView, memory_view
from tui.ui.cockpit.reconciling import nvml_by_device
from tui.ui.cockpit.server import ServerController
from tui.ui.host import Relay
from tui.ui.lab.controller import LabController
from tui.ui.options import AppOptions
from tui.ui.profiles.controller import ProfilesController
from tui.ui.runs.controller import RunsController
from tui.ui.variants.controller import VariantsController


class CockpitController:
    """Everything the main screen shows and starts, one object per concern."""

    def __init__(self, options: AppOptions, backend: Backend) -> None:
        self.options, self.backend = options, backend
        self.host = Relay()
        self.server = ServerController(backend, options, self.host)
        self.plan = PlanController(backend, options, self.host, self.server)
        self.calibration = CalibrationController(options, self.host)
        self.quality = QualityController(options.server_bin, self.host, fixed=options.fixed is not None)
        self.probes = ProbeController(backend, self.host, fixed=options.fixed is not None)
        self.lab = LabController(backend, options, self.host, self.server, self.plan)
        self.runs = RunsController(backend.store)
        self.profiles = ProfilesController()

    def nvml_by_device(self, snapshot: GpuSnapshot | None) -> dict[str, float] | None:
        """NVML's memory per device for the reconciliation screen (None: no NVML figures)."""
        return nvml_by_device(snapshot)

    def full_log(self) -> tuple[list[str], str | None]:
        return self.backend.full_log()

    def variants(self, settings: Settings, snapshot: GpuSnapshot | None) -> VariantsController:
        """The variants picker's controller for the form's hf-repo (its `why_not` says when it cannot)."""
        return VariantsController(settings, lambda: devices_for(snapshot, self.options, settings.rpc),
                                  remote.remember)

    def quality_memory(self, settings: Settings, snapshot: GpuSnapshot | None
                       ) -> QualityMemoryView | Callable[[], QualityMemoryView]:
        """The quality-vs-memory view's maker for the settings on screen (a worker runs it), or, in a
        fixed preview, the view that says nothing is planned there."""
        if self.options.fixed is not None:
            return QualityMemoryView("Quality vs memory", error="this is a fixed preview; nothing is planned")
        return lambda: memory_view(settings, snapshot, self.options)

    def shutdown(self) -> None:
        """Quitting: cancel the probe run, the quality measurement and the lab's action (bounded wait
        for its server)."""
        self.probes.cancel_event.set()
        self.calibration.shutdown()
        self.quality.shutdown()
        self.lab.shutdown()
