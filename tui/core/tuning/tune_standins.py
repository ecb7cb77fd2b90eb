"""A tune of simulated GPUs launched for real: every candidate on memory-capped loopback stand-ins.

With `--gpus SPEC` alone the candidates are planned against the simulated GPUs but run on this
machine's CPU backend, which never runs out of their memory, so no --fit-target can be searched.
With `--stand-ins`, one ggml-rpc-server per simulated GPU is started for the whole tune, its address
space capped at that GPU's free memory (`planning.standin`), and every launch goes to them (`--rpc`)
with the fit-target translated to what the stand-in reports: fit-target_i = host RAM - simulated
free_i + margin_i (`standin.fit_targets`). An allocation past the simulated free memory then fails for
real, at load or at the first decode, and the tune's fit-target search walks the user's margin
(what `--fit-target` would be on the real GPU) by real out-of-memory failures.

What it is not: the stand-ins compute with the CPU backend, so speeds are this CPU's and compute
buffers are the CPU backend's sizes (`standin.caveats`); the figures are the real GPU's in shape.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from tui.core.options.settings import Settings
from tui.core.sweep.backend import LaunchOutcome, SupervisorBackend
from tui.core.tuning.searches import DEFAULT_FIT_TARGET_MIB


class StandInBackend(SupervisorBackend):
    """The tune's backend with every launch sent to `stand_ins` (a started, capped `StandIns`)."""

    def __init__(self, binary: str | Path, stand_ins: Any, **kw: Any) -> None:
        super().__init__(binary, **kw)
        self.stand_ins = stand_ins

    def translate(self, settings: Settings) -> Settings:
        """`settings` as launched on the stand-ins: their endpoints first in --rpc, the fit-target
        per stand-in from the user's margins (one value for all, as the search gives)."""
        from tui.core.planning.standin import fit_targets

        margins = [int(v) for v in settings.fit_target] or [DEFAULT_FIT_TARGET_MIB]
        eps = [e for e in self.stand_ins.endpoints.split(",") if e]
        others = [e for e in settings.rpc if e not in eps]
        targets = fit_targets(self.stand_ins.simulated, margins) + [margins[-1]] * len(others)
        return replace(settings, rpc=[*eps, *others], fit_target=targets)

    def launch(self, settings: Settings, cancel: threading.Event) -> LaunchOutcome:
        return super().launch(self.translate(settings), cancel)


def stand_ins_problem(gpus: str | None, devices: Any = None) -> str | None:
    """Why `--stand-ins` cannot run (None when it can): it plays simulated GPUs, so `--gpus` must name
    some, and `devices` (a `DeviceSet`, when known) must hold one that is not an RPC server."""
    local = None if devices is None else any(not d.remote for d in devices.devices)
    if gpus in (None, "cpu") or local is False:
        return "--stand-ins plays simulated GPUs: give them with --gpus SPEC (e.g. --gpus rtx3060-laptop-6g)."
    return None


def stand_in_note(simulated: Any) -> str:
    names = ", ".join(f"{d.key} ({d.name}, {d.free_mib:.0f} MiB free)" for d in simulated)
    return (f"every candidate ran on loopback ggml-rpc-server stand-ins capped at the simulated GPUs' free memory: "
            f"{names}. Out-of-memory failures and the smallest --fit-target (the margin to give on the real GPU) "
            "are real; speeds are this CPU's and compute buffers the CPU backend's, so the table is the GPU's in shape.")
