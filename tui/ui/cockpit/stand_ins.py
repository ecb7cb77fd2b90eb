"""The user's own launch on capped stand-ins of the simulated GPUs: loopback ggml-rpc servers that
can allocate each simulated device's free memory and no more, so an out-of-memory the plan predicts
happens for real (a plain launch runs on this machine and cannot run out of the simulated memory).

One set at a time, started for a launch and stopped with the server (or the app)."""

from __future__ import annotations

from typing import Any

from tui.core.gpu.types import GpuSnapshot
from tui.core.options.settings import Settings
from tui.ui.cockpit import planning
from tui.ui.options import AppOptions


class StandInLaunches:
    """The stand-ins the running server was launched on (none until `open`)."""

    def __init__(self, options: AppOptions) -> None:
        self.options = options
        self._si: Any = None  # a started `planning.standin.StandIns`

    def problem(self) -> str | None:
        """Why a launch cannot go to capped stand-ins here (None: it can)."""
        # lazy: the provisioning module (build cache paths) loads with the first stand-in launch
        from tui.core.server.provision import rpc_server_for

        if not self.options.simulate or self.options.hardware is None or not self.options.hardware.devices:
            return "stand-ins play simulated GPUs; these are not simulated"
        if self.options.server_bin is None or rpc_server_for(self.options.server_bin) is None:
            return "no ggml-rpc-server beside llama-server (mtp-tune doctor --build makes one)"
        return None

    @property
    def active(self) -> bool:
        return self._si is not None

    def open(self, settings: Settings, snapshot: GpuSnapshot | None) -> Settings:
        """Start stand-ins for the simulated GPUs and return `settings` as launched on them."""
        from tui.core.planning.standin import StandIns, on_stand_ins  # lazy, as above
        from tui.core.server.provision import rpc_server_for

        self.close()
        rpc_bin = rpc_server_for(self.options.server_bin) if self.options.server_bin else None
        simulated = [d for d in planning.devices_for(snapshot, self.options).devices if not d.remote]
        if rpc_bin is None or not simulated:
            raise RuntimeError(self.problem() or "no simulated GPU to stand in for")
        self._si = StandIns(rpc_bin, simulated, capped=True).__enter__()
        return on_stand_ins(settings, self._si)

    def close(self) -> None:
        si, self._si = self._si, None
        if si is not None:
            si.__exit__(None, None, None)

    def as_simulated(self, memory: dict[str, Any] | None) -> dict[str, Any] | None:
        """A memory report with stand-in i's buffers named as simulated CUDA i (the bars' device)."""
        if self._si is None or not memory or not memory.get("devices"):
            return memory
        names = {key: f"CUDA{i}" for i, key in enumerate(self._si.keys)}
        return {**memory, "devices": {names.get(k, k): v for k, v in memory["devices"].items()}}
