"""Settings + devices -> PlanView through the core planner; the GGUF header is read once per file.

Devices come from the one device list (`tui.core.planning.devices.device_set`) over the newest
telemetry snapshot, or, before the first sample, over the simulated profile; `--rpc` servers are asked
through one caching reader, and the newest plan's DeviceSet is kept (`last_device_set`) for the
validator's count (`device_count`) and the bars' notes. Runs in a worker thread: reading a big file's
header takes a while.

Exact mode (`exact_request`, `exact_view`): the same settings and devices handed to llama.cpp's own
dry run (`tui.core.planning.exact`), simulated GPUs played by loopback RPC stand-ins; its result
becomes a PlanView of the same shape with each device marked "exact (llama.cpp)" or "estimate".
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tui.core.gpu.rpc import RpcReadings
from tui.core.gpu.types import GpuSnapshot
from tui.core.options.settings import Settings
from tui.core.planning.devices import HOST, DeviceSet, current_snapshot, device_set
from tui.core.planning.errors import PlanError
from tui.core.planning.gguf_meta import GGUFError
from tui.ui.options import AppOptions
from tui.ui.cockpit.views import CALIBRATED_LABEL, ESTIMATE_LABEL, EXACT_LABEL, DevicePlan, PlanView
from tui.ui.cockpit.remote import known_local, source, to_local

_META: dict[tuple[str, int, int, str], Any] = {}
_META_LOCK = threading.Lock()


def _meta_key(p: Path) -> tuple[str, int, int, str] | None:
    """A file as read: its path, size and mtime, and exact mode's cache directory (the calibration
    hung on the metadata comes from there)."""
    try:
        st = p.stat()
    except OSError:
        return None
    return (str(p.resolve()), st.st_size, st.st_mtime_ns, os.environ.get("MTP_TUNE_EXACT_DIR", ""))


def model_meta(path: str, server_bin: Path | None = None) -> Any:
    """The GGUF metadata of `path`, cached by `_meta_key`. Raises GGUFError. A newly read
    model gets its cached calibration by `server_bin` attached (nothing is run)."""
    # lazy: the GGUF reader and its cache (hashlib) load on the plan worker, not before the first frame
    from tui.core.planning.gguf_reader import read_gguf

    p = Path(path).expanduser()
    key = _meta_key(p)
    if key is None:
        return read_gguf(p)  # raises the core's message for a missing file
    with _META_LOCK:
        cached = _META.get(key)
    if cached is None:
        # lazy: the GGUF reader and its cache (hashlib) load on the plan worker, not before the first frame
        from tui.core.planning.cache import attach_cached

        cached = read_gguf(p)
        attach_cached(cached, server_bin)  # before anyone else sees it
        with _META_LOCK:
            _META.clear()  # one model at a time is on screen
            _META[key] = cached
    return cached


def loaded_meta(path: str) -> Any:
    """The metadata of `path` when already read (None otherwise; reads nothing: the UI thread's)."""
    key = _meta_key(Path(path).expanduser())
    with _META_LOCK:
        return _META.get(key) if key is not None else None


#: `--rpc` servers' memory, asked at most every 10 s (a server busy with a llama-server keeps its last reading).
_RPC = RpcReadings()
_LAST: list[DeviceSet] = []  # the DeviceSet of the newest plan (one entry; a list to swap it under the lock)


def plan_is_quick(settings: Settings) -> bool:
    """Is a plan of `settings` about a millisecond, fine on the UI thread? Yes once the model's header
    is read, unless `--rpc` servers are to be asked for their memory (network: a worker's job)."""
    local = known_local(settings)  # a remote model: quick once its header copy is read
    path = local.model if local is not None else None
    if not path or settings.rpc:
        return False
    key = _meta_key(Path(path).expanduser())
    with _META_LOCK:
        return key is not None and key in _META


def devices_for(snapshot: GpuSnapshot | None, options: AppOptions, rpc: Sequence[str] = (), *,
                keep: bool = False) -> DeviceSet:
    """The one device list (`planning.devices.device_set`) for the screen; before the first telemetry
    sample, the simulated profile's devices. `--rpc` servers are asked through `_RPC` (network: a
    worker's job when `rpc` is given); one that never answered is left out and named. `keep`: this
    is the plan on screen, kept for `last_device_set`."""
    if snapshot is None and options.simulate and options.hardware is not None:
        snapshot = current_snapshot(options.hardware)
    ds = device_set(snapshot, rpc, rpc_reader=_RPC.read)
    if keep:
        with _META_LOCK:
            _LAST[:] = [ds]
    return ds


def last_device_set() -> DeviceSet | None:
    """The DeviceSet the newest plan was made on (its `unreachable` servers, its `count`), or None."""
    with _META_LOCK:
        return _LAST[0] if _LAST else None


def device_count(settings: Settings, snapshot: GpuSnapshot | None, options: AppOptions) -> int | None:
    """The validator's device count for `settings`, on the UI thread (no server is asked here): the
    local devices of the one device list plus the `--rpc` servers, less those the newest plan found
    unreachable (one not asked yet counts, as llama-server would count it). None before any telemetry
    and for no device at all."""
    if snapshot is None and not (options.simulate and options.hardware is not None):
        return None
    last = last_device_set()
    gone = set(last.unreachable) if last is not None else set()
    rpc = [ep for ep in dict.fromkeys(e.strip() for e in settings.rpc if e.strip()) if ep not in gone]
    return (devices_for(snapshot, options).count + len(rpc)) or None  # none at all: CPU only, rules off


def with_rpc_notes(view: PlanView, ds: DeviceSet) -> PlanView:
    """Each RPC device says where its size comes from; a server that did not answer is named under the bars."""
    if not (ds.readings or ds.unreachable) or view.error:
        return view
    readings = {r.endpoint: r for r in ds.readings}
    devices = []
    for d in view.devices:
        reading = readings.get(d.key[len("RPC0["):-1]) if d.kind == "rpc" else None
        devices.append(replace(d, note=reading.note()) if reading is not None else d)
    return replace(view, devices=tuple(devices), warnings=tuple(dict.fromkeys([*view.warnings, *ds.notes()])))


def core_plan(settings: Settings, snapshot: GpuSnapshot | None, options: AppOptions, *,
              cpu_only: bool = False, devices: DeviceSet | None = None) -> Any:
    """The core Plan (raises PlanError / GGUFError with a user message); `devices`: the DeviceSet
    to plan on (default: `devices_for` the settings' `--rpc`, kept as the newest)."""
    # lazy: the planner loads on the plan worker, not before the first frame
    from tui.core.planning.plan import plan

    if not settings.model:
        raise ValueError("no model yet: type the path of a GGUF file in the model field to see the plan")
    meta = model_meta(settings.model, options.server_bin)
    ds = devices or devices_for(snapshot, options, () if cpu_only else settings.rpc, keep=not cpu_only)
    devices = [] if cpu_only else list(ds.devices)
    return plan(meta, settings, devices, host_total_mib=ds.host_total_mib, host_free_mib=ds.host_free_mib)


def _view(d: Any, source: str = ESTIMATE_LABEL, band: tuple[tuple[str, float], ...] = ()) -> DevicePlan:
    c = d.components
    total = d.total_mib if d.total_mib is not None else d.needed_mib
    free = d.free_mib if d.free_mib is not None else total
    return DevicePlan(
        name=d.name or d.key, total_mib=total, free_mib=free, weights_mib=c["weights"], kv_mib=c["kv"],
        draft_kv_mib=c["draft_kv"], recurrent_mib=c["recurrent"], compute_mib=c["compute"],
        draft_compute_mib=c["draft_compute"], output_mib=c["output"], margin_mib=d.margin_mib,
        needed_mib=d.needed_mib, headroom_mib=d.headroom_mib if d.headroom_mib is not None else 0.0, risk=d.risk,
        source=source, key=d.key, error_band=band if source != EXACT_LABEL else (),
    )


def _plan_view(p: Any, seq: int, labels: dict[str, str] | None = None, extra_warnings: tuple[str, ...] = (),
               exact: str = "off", gpu_band: bool = True) -> PlanView:
    """A core Plan as the bars draw it (the host is the device at risk when nothing is offloaded);
    a calibrated estimate (the model's own compute terms) says so. The error band was measured on the
    CPU backend (host, CPU-backed RPC stand-ins): `gpu_band` False (real GPUs) shows it on none of them."""
    cal = bool(getattr(p, "calibrated", False))  # a test's stand-in plan may not say
    est = CALIBRATED_LABEL if cal else ESTIMATE_LABEL
    labels = {k: est if v == ESTIMATE_LABEL else v for k, v in (labels or {}).items()}
    band = tuple(sorted(getattr(p, "error_band", {}).items()))  # the estimate's (calibrated or not)
    devices = tuple(_view(d, labels.get(d.key, est), band if gpu_band or d.remote else ()) for d in p.devices
                    if d.key != HOST)
    host = next((_view(d, labels.get(d.key, est), band) for d in p.devices if d.key == HOST), None)
    if not devices and host is not None:
        devices, host = (host,), None  # CPU only: the host is the device at risk
    fit_note = p.fit.message if p.fit.active and p.fit.action not in ("none", "off") else ""
    context = str(getattr(p, "context_note", ""))  # a test's stand-in plan may not say
    warnings = tuple(dict.fromkeys([*p.warnings, *([context + "."] if context else []), *extra_warnings]))
    return PlanView(devices=devices, host=host, warnings=warnings, fit_note=fit_note, seq=seq, exact=exact,
                    calibrated=cal, context_note=context)


def plan_view(settings: Settings, snapshot: GpuSnapshot | None, options: AppOptions, seq: int) -> PlanView:
    """Never raises: a planning problem becomes `PlanView.error`, one paragraph for the user."""
    if options.attach_url and not settings.model and not settings.hf_repo:
        return PlanView(error="attached: give the model file in the model field to plan its memory", seq=seq)
    ds = None
    try:
        settings = to_local(settings)  # -hf/-mu: planned from the header alone (read once, then cached)
        ds = devices_for(snapshot, options, settings.rpc, keep=True) if settings.model else None
        p = core_plan(settings, snapshot, options, devices=ds)
    except (PlanError, GGUFError, ValueError) as exc:
        return PlanView(error=str(exc), seq=seq)
    except Exception as exc:  # noqa: BLE001 - a planner bug must not take the screen down
        return PlanView(error=f"the planner failed on these settings ({type(exc).__name__}: {exc})", seq=seq)
    view = _plan_view(p, seq, gpu_band=bool(options.simulate))
    return with_rpc_notes(view, ds) if ds is not None else view


# ---- exact mode --------------------------------------------------------------------------------


def exact_unavailable_reason(settings: Settings, options: AppOptions) -> str | None:
    """Why no dry run can be asked for these settings (one sentence), or None when one can."""
    if options.attach_url:
        return "mtp-tune is attached to a server it did not start, so it has no llama-server binary of its own to dry-run."
    if options.server_bin is None:
        return "no llama-server found (run `mtp-tune doctor`); exact mode needs one."
    if not settings.model:
        if source(settings) is None:
            return "exact mode needs a model: a file (-m), a Hugging Face repo (-hf) or a URL (-mu)."
    return None


def exact_request(settings: Settings, snapshot: GpuSnapshot | None, options: AppOptions,
                  *, cpu_only: bool = False, devices: DeviceSet | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of `exact_plan` for the settings and devices on screen (a worker thread: it reads
    the header; `devices`: the DeviceSet, default `devices_for` the settings). Simulated GPUs are
    played by loopback ggml-rpc-server stand-ins."""
    ds = devices or devices_for(snapshot, options, () if cpu_only else settings.rpc)
    devices = [] if cpu_only else list(ds.devices)
    kwargs: dict[str, Any] = {"stand_in": bool(options.simulate and any(not d.remote for d in devices)),
                              "host_total_mib": ds.host_total_mib, "host_free_mib": ds.host_free_mib}
    try:
        kwargs["meta"] = model_meta(settings.model or "", options.server_bin)
    except Exception:  # noqa: BLE001 - exact_plan reads it again and says why it cannot
        pass
    if ds.unreachable:  # the dry run connects only to the servers the plan is made on
        settings = replace(settings, rpc=ds.rpc_endpoints)
    return (settings, devices, options.server_bin), kwargs


def exact_view(res: Any, seq: int = 0) -> PlanView | None:
    """An ExactResult as a PlanView: llama.cpp's figures marked per device, or (exact="unavailable")
    no devices and the one sentence why. None for a cancelled run (nothing to show)."""
    if res.status == "cancelled":
        return None
    if not res.available:
        return PlanView(seq=seq, exact="unavailable", exact_reason=res.reason or "llama.cpp's dry run gave no figures.")
    labels = {d.key: res.label(d.key) for d in res.plan.devices}
    why = tuple(f"{k}: {ESTIMATE_LABEL}, {s.why}" for k, s in res.sources.items() if not s.exact and s.why)
    view = _plan_view(res.plan, seq, labels, (*res.warnings, *why), exact="exact")
    if res.fit is not None and res.fit.changed:
        view = replace(view, fit_note=f"{view.fit_note or res.fit.message} (llama.cpp's --fit: {' '.join(res.fit.flags())})")
    return view


class ExactPlans:
    """Exact plans for the settings on screen, off the UI thread: one `ExactRunner` (debounced, the
    newest request wins, a stale dry run is stopped) started on the first request.

    `plan_fn` is `exact_plan` unless a test injects a counting one; `on_view(rid, view)` is called on
    the runner's thread (the App only posts a message from it)."""

    def __init__(self, options: AppOptions, plan_fn: Any = None) -> None:
        self.options = options
        self._plan_fn = plan_fn
        self._runner: Any = None
        self._on_view: Any = None
        self._lock = threading.Lock()
        self._last: tuple[Settings, Any] | None = None  # the newest exact result and its settings
        self._asked: tuple[Settings, GpuSnapshot | None] | None = None  # the newest request's arguments
        self._run_devices: DeviceSet | None = None

    def last_for(self, settings: Settings) -> Any:
        """The newest available ExactResult when it was for `settings` (what a launch then ran), else None."""
        with self._lock:
            last = self._last
        return last[1] if last is not None and last[0] == settings else None

    def on_view(self, callback: Any) -> None:
        self._on_view = callback

    def _deliver(self, rid: int, res: Any) -> None:
        view = exact_view(res)
        ds = self._run_devices  # the request just run (this runner thread runs one at a time)
        if view is not None and view.exact == "exact" and ds is not None:
            view = with_rpc_notes(view, ds)
        cb = self._on_view
        if view is not None and cb is not None:
            cb(rid, view)

    def devices_key(self, settings: Settings, snapshot: GpuSnapshot | None) -> tuple[Any, ...]:
        """What an exact plan depends on besides the settings: the local devices and their free
        memory (cheap, on the UI thread: the snapshot is taken, and `--rpc` servers are not asked;
        their endpoints are in the settings)."""
        return tuple((d.key, d.total_mib, d.free_mib) for d in devices_for(snapshot, self.options).devices)

    def request(self, settings: Settings, snapshot: GpuSnapshot | None,
                server_alive: bool = False) -> tuple[int | None, str]:
        """Ask for the exact plan of `settings`: (request id, "") or (None, why not in one sentence).
        Returns at once: the header is read and the dry run made on the runner's thread.
        `server_alive`: our llama-server is running; on real GPUs a dry run beside it would see the
        memory it holds (fit would decide differently), so exact waits until it stops."""
        if not self.options.exact or self.options.fixed is not None:
            return None, ""
        why = exact_unavailable_reason(settings, self.options)
        if why is None and server_alive and not self.options.simulate and snapshot is not None and any(
                not d.simulated for d in snapshot.devices):
            why = ("llama-server is running on these GPUs, and a dry run beside it would measure around the memory "
                   "it holds; exact figures come back once it stops.")
        if why is not None:
            self.cancel()
            return None, why
        with self._lock:
            if self._runner is None:
                # lazy: the exact planner (llama.cpp's dry run, httpx) loads on its worker
                from tui.core.planning.exact import exact_plan
                from tui.core.planning.exact_runner import ExactRunner

                fn = self._plan_fn or exact_plan
                self._runner = ExactRunner(self._deliver, debounce_s=self.options.exact_debounce_s,
                                           plan_fn=lambda settings, snapshot, *, cancel: self._run(fn, settings, snapshot,
                                                                                                     cancel))
            runner = self._runner
            self._asked = (settings, snapshot)
        return runner.submit(settings, snapshot), ""

    def touch(self) -> int | None:
        """Ask again for the newest request, restarting its debounce (a keystroke that made the
        settings invalid is still typing): the new request id, or None when there is none."""
        with self._lock:
            runner, asked = self._runner, self._asked
        return runner.submit(*asked) if runner is not None and asked is not None else None

    def _run(self, fn: Any, settings: Settings, snapshot: GpuSnapshot | None, cancel: threading.Event) -> Any:
        asked = settings
        try:
            local = to_local(settings)  # a remote model's header copy (read here if the estimate has not yet)
        except ValueError as exc:  # RemoteError is one
            # lazy: the exact planner (llama.cpp's dry run, httpx) loads on its worker
            from tui.core.planning.exact import unavailable

            return unavailable(str(exc))
        self._run_devices = ds = devices_for(snapshot, self.options, settings.rpc)
        args, kwargs = exact_request(local, snapshot, self.options, devices=ds)
        res = fn(*args, cancel=cancel, **kwargs)
        if getattr(res, "available", False):
            with self._lock:
                self._last = (asked, res)
        return res

    def cancel(self) -> None:
        """Stop the dry run in flight and drop the pending one (nothing is delivered for either)."""
        with self._lock:
            runner = self._runner
        if runner is not None:
            runner.cancel()

    def close(self) -> None:
        with self._lock:
            runner, self._runner = self._runner, None
        if runner is not None:
            runner.close(timeout=1.0)  # a dry run still stopping dies with us (parent-death signal)
