"""Settings + devices -> PlanView through the core planner; the GGUF header is read once per file.

Devices come from the one device list (`tui.core.planning.devices.planner_devices`) over the newest
telemetry snapshot, or, before the first sample, over the simulated profile. Runs in a worker thread: reading a big file's header takes a while.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tui.core.gpu.types import GpuSnapshot
from tui.core.options.settings import Settings
from tui.ui.options import AppOptions
from tui.ui.view import DevicePlan, PlanView

_META: dict[tuple[str, int, int], Any] = {}
_META_LOCK = threading.Lock()


def model_meta(path: str) -> Any:
    """The GGUF metadata of `path`, cached by (path, size, mtime). Raises GGUFError."""
    from tui.core.planning.gguf_reader import read_gguf

    p = Path(path).expanduser()
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    except OSError:
        return read_gguf(p)  # raises the core's message for a missing file
    with _META_LOCK:
        cached = _META.get(key)
    if cached is None:
        cached = read_gguf(p)
        with _META_LOCK:
            _META.clear()  # one model at a time is on screen
            _META[key] = cached
    return cached


def device_specs(snapshot: GpuSnapshot | None, options: AppOptions, rpc: list[str] | None = None) -> list[Any]:
    """The offload targets through the one device list (`planning.devices.planner_devices`); before
    the first telemetry sample, the simulated profile's devices."""
    from tui.core.planning.devices import current_snapshot, planner_devices

    if snapshot is None and options.simulate and options.hardware is not None:
        snapshot = current_snapshot(options.hardware)
    return planner_devices(snapshot, rpc or ())


def core_plan(settings: Settings, snapshot: GpuSnapshot | None, options: AppOptions, *,
              cpu_only: bool = False) -> Any:
    """The core Plan (raises PlanError / GGUFError with a user message)."""
    from tui.core.planning.plan import plan

    if not settings.model:
        raise ValueError("no model yet: type the path of a GGUF file in the model field to see the plan")
    from tui.core.planning.devices import host_memory

    meta = model_meta(settings.model)
    total, free = host_memory(snapshot)
    devices = [] if cpu_only else device_specs(snapshot, options, list(settings.rpc))
    return plan(meta, settings, devices, host_total_mib=total, host_free_mib=free)


def _view(d: Any) -> DevicePlan:
    c = d.components
    total = d.total_mib if d.total_mib is not None else d.needed_mib
    free = d.free_mib if d.free_mib is not None else total
    return DevicePlan(
        name=d.name or d.key, total_mib=total, free_mib=free, weights_mib=c["weights"], kv_mib=c["kv"],
        draft_kv_mib=c["draft_kv"], recurrent_mib=c["recurrent"], compute_mib=c["compute"],
        draft_compute_mib=c["draft_compute"], output_mib=c["output"], margin_mib=d.margin_mib,
        needed_mib=d.needed_mib, headroom_mib=d.headroom_mib if d.headroom_mib is not None else 0.0, risk=d.risk,
    )


def plan_view(settings: Settings, snapshot: GpuSnapshot | None, options: AppOptions, seq: int) -> PlanView:
    """Never raises: a planning problem becomes `PlanView.error`, one paragraph for the user."""
    from tui.core.planning.gguf_meta import GGUFError
    from tui.core.planning.devices import HOST
    from tui.core.planning.errors import PlanError

    if options.attach_url and not settings.model:
        return PlanView(error="attached: give the model file in the model field to plan its memory", seq=seq)
    if not settings.model and settings.hf_repo:
        return PlanView(error="the planner reads a local GGUF file; -hf models are downloaded by llama-server "
                              "at launch (give the downloaded file's path to plan)", seq=seq)
    try:
        p = core_plan(settings, snapshot, options)
    except (PlanError, GGUFError, ValueError) as exc:
        return PlanView(error=str(exc), seq=seq)
    except Exception as exc:  # noqa: BLE001 - a planner bug must not take the screen down
        return PlanView(error=f"the planner failed on these settings ({type(exc).__name__}: {exc})", seq=seq)
    devices = tuple(_view(d) for d in p.devices if d.key != HOST)
    host = next((_view(d) for d in p.devices if d.key == HOST), None)
    if not devices and host is not None:
        devices, host = (host,), None  # CPU only: the host is the device at risk
    fit_note = p.fit.message if p.fit.active and p.fit.action not in ("none", "off") else ""
    return PlanView(devices=devices, host=host, warnings=tuple(dict.fromkeys(p.warnings)), fit_note=fit_note, seq=seq)
