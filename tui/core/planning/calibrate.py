"""Calibrating the estimate on one model: llama.cpp's dry runs at the design points, fitted and cached.

`calibrate()` measures the model at planning.calibration.DESIGN (exact mode's dry run, host only on
the CPU backend, `--fit off`: about a second each, 17 runs for an MTP model), fits each graph's terms
and caches the result beside exact mode's entries (cache_dir()/exact/calibration/), keyed like them
by the model's header hash and the llama-server binary, so a new build or another file invalidates it.
The cache itself (its paths, the loader, `attach`, which hangs a calibration on a GGUFMeta: how every
later plan of that model, any settings, any caller, finds it) is `planning.cache`, which runs nothing.
Runs on the caller's thread and blocks: the TUI calls it from a worker, the CLI as part of `plan --exact`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from tui.core.options.argv import settings_from_argv
from tui.core.planning import calibrated_compute
from tui.core.planning import calibration as cal
from tui.core.planning.cache import KIND, binary_id, calibration_path, default_root, load_calibration, save_calibration
from tui.core.planning.devices import DeviceSpec
from tui.core.planning.exact import exact_plan
from tui.core.planning.gguf_meta import GGUFMeta
from tui.core.planning.resolve import resolve
from tui.core.planning.sparse import header_hash

#: every calibration run: host only (no offload device), fit off, no repack (weights never touched);
#: the split runs drop "-dev none" (their devices are stand-ins)
COMMON = ("-dev", "none", "-fit", "off", "-nr")


def calibrate(meta: GGUFMeta, server_bin: str | Path, *, root: Path | None = None, use_cache: bool = True,
              cancel: threading.Event | None = None, progress: Callable[[str], None] | None = None,
              timeout_s: float = 60.0) -> cal.Calibration | str:
    """Measure the model at the design points and fit it; the Calibration, or one sentence why not.
    Each dry run goes through exact mode (its sparse copy, its cache of single runs)."""
    t0 = time.monotonic()
    server_bin = Path(server_bin)
    root = Path(root) if root else default_root()
    if not meta.path:
        return "calibration needs a local model file (or the header copy of a remote one)."
    path = calibration_path(root, meta, server_bin)
    if use_cache and (hit := load_calibration(path)) is not None:
        return hit
    hp = meta.hparams
    design = [p for p in cal.DESIGN if not p.mtp or hp.n_nextn > 0]
    pts: dict[str, list[tuple[cal.DesignPoint, cal.Features, float]]] = {g: [] for g in cal.GRAPHS}
    notes: list[str] = []
    runs = 0
    for i, p in enumerate(design):
        if cancel is not None and cancel.is_set():
            return "cancelled"
        if progress is not None:
            progress(f"calibrating {i + 1}/{len(design)}")
        argv = ["-m", str(meta.path), *cal.design_args(p, hp.n_ctx_train), *COMMON]
        settings = settings_from_argv(argv).settings
        ex = exact_plan(settings, [], server_bin, meta=meta, cancel=cancel, timeout_s=timeout_s, root=root)
        runs += 0 if ex.cached else ex.runs
        if ex.status == "cancelled":
            return "cancelled"
        if not ex.available or ex.plan is None:
            notes.append(f"{p.name}: {ex.reason}")
            continue
        r = resolve(settings, hp)
        host = ex.plan.device("Host")
        if host is None:
            continue
        tgt = "target_mtp" if p.mtp else "target"
        pts[tgt].append((p, cal.features(hp, r, tgt), host.components["compute"] * 2**20))
        if p.mtp and host.components["draft_compute"] > 0:
            pts["draft"].append((p, cal.features(hp, r, "draft"), host.components["draft_compute"] * 2**20))
    graphs = {g: cal.fit_graph(v, mask_in_ffn=g != "draft") for g, v in pts.items() if v}
    if "target" not in graphs or graphs["target"].ffn is None:
        return "calibration measured nothing: " + ("; ".join(notes[:2]) or "no dry run succeeded")
    res = cal.Calibration(KIND, header_hash(meta), binary_id(server_bin), graphs, time.monotonic() - t0, runs, notes)
    rpc_bin = server_bin.parent / "ggml-rpc-server"
    if rpc_bin.is_file():  # the split terms, on CPU-backed stand-ins (without them the structural constants stay)
        split = split_terms(meta, server_bin, rpc_bin, res, root, cancel, progress, timeout_s, offset=len(design))
        if isinstance(split, str):
            return split
        res.split, res.runs = split[0], res.runs + split[1]
    else:
        res.notes.append(f"no {rpc_bin.name} beside the server: the split terms stay structural")
    res.seconds = time.monotonic() - t0
    if use_cache:
        save_calibration(path, res)
    return res


def split_terms(meta: GGUFMeta, server_bin: Path, rpc_bin: Path, res: cal.Calibration, root: Path,
                cancel: threading.Event | None, progress: Callable[[str], None] | None, timeout_s: float,
                offset: int = 0) -> tuple[dict[str, float], int] | str:
    """Each device role's unit count (calibrated_compute.roles), from dry runs at SPLIT_DESIGN on
    simulated devices played by loopback stand-ins; ({role: units}, runs) or "cancelled"."""
    from tui.core.planning.plan import plan

    hp = meta.hparams
    size = 8192.0  # fit is off: any size loads as given; small enough for a stand-in on any machine
    found: dict[str, list[float]] = {}
    runs = 0
    design = [p for p in cal.SPLIT_DESIGN if not p.mtp or hp.n_nextn > 0]
    for i, p in enumerate(design):
        if cancel is not None and cancel.is_set():
            return "cancelled"
        if progress is not None:
            progress(f"calibrating {offset + i + 1}/{offset + len(design)}")
        devs = [DeviceSpec(f"CUDA{j}", "stand-in", size, size) for j in range(p.devices)]
        argv = ["-m", str(meta.path), *cal.design_args(p, hp.n_ctx_train, hp.n_layer_all), *COMMON[2:]]
        settings = settings_from_argv(argv).settings
        ex = exact_plan(settings, devs, server_bin, meta=meta, stand_in=True, rpc_bin=rpc_bin, cancel=cancel,
                        timeout_s=timeout_s, root=root)
        runs += 0 if ex.cached else ex.runs
        if ex.status == "cancelled":
            return "cancelled"
        if not ex.available or ex.plan is None:
            res.notes.append(f"{p.name}: {ex.reason}")
            continue
        shape = plan(meta, settings, devs, apply_fit=False)  # the layer placement and pipeline of these settings
        rs = calibrated_compute.roles(meta, shape.resolved, shape.layer_device, shape.layer_device[hp.n_layer_all],
                                      4 if shape.pipeline_parallel else 1, res)
        for key, comp, role, base, unit in rs or []:
            d = ex.plan.device(key)
            if d is not None and unit > 0:
                found.setdefault(role, []).append((d.components[comp] * 2**20 - base) / unit)
    return {role: sum(v) / len(v) for role, v in found.items()}, runs

