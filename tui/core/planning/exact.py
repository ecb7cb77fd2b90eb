"""Exact mode: llama.cpp's own accounting behind every number of a plan.

`exact_plan()` runs the user's llama-server (the provisioned CPU build, or their own CUDA/ROCm build,
whose numbers are exact for their GPUs) through the product's Supervisor with the settings' argv,
`--fit on` (fit's own semantics; with the user's `--fit off`, -c and -ngl are pinned so fit changes
nothing), `--log-jsonl -lv 5`, and stops it as soon as fit has decided: llama.cpp has then measured
the settings with `no_alloc` (target and MTP context) and nothing is loaded for real. When fit
changed something, a second dry run measures its choice pinned (-c, -ngl, -ts, -ot). The
measurements fill the estimate's Plan shape (tui.core.planning.measured), so callers show either.

Cached on disk (cache_dir()/exact/) by the model header's hash, the argv that reaches the server
(minus options that do not change memory), the devices, and the binary (path, size, mtime). Bad
input never raises: the result is "unavailable" with one sentence why (the estimate stays). Runs
on the caller's thread and blocks (a UI runs it in a worker); `cancel` (a threading.Event) stops it.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tui.core.config.paths import private_dir
from tui.core.config.jsonshape import check
from tui.core.options.lookup import default
from tui.core.options.reader import without
from tui.core.options.settings import Settings
from tui.core.planning.breakdown import DryRunLog
from tui.core.planning.cache import binary_id, default_root
from tui.core.planning.dryrun import dry_run_args, run_dry, why_unavailable
from tui.core.planning.devices import HOST, DeviceSpec
from tui.core.planning.errors import PlanError
from tui.core.planning.fitchoice import FitChoice, choice_from_trace
from tui.core.planning.gguf_meta import GGUFError, GGUFMeta
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.measured import DeviceSource, apply_measurements
from tui.core.planning.plan import plan
from tui.core.planning.result import FitOutcome, Plan
from tui.core.planning.rpcguard import RpcGuard
from tui.core.planning.sparse import header_hash, needs_sparse, prune_sparse, remove_sparse, sparse_copy, sparse_path
from tui.core.planning.standin import StandInError, StandIns, caveats, fit_targets

CACHE_VERSION = 3  # 3: host weights from llama.cpp's placement, its buffers kept apart
DEFAULT_TIMEOUT_S = 60.0
#: real devices' free memory enters the cache key in steps of this many MiB
FREE_BUCKET_MIB = 512


@dataclass
class ExactResult:
    """The outcome of exact mode: a Plan (the estimate's shape) or one sentence why not."""

    status: str  # "exact" | "unavailable" | "cancelled"
    reason: str = ""
    plan: Plan | None = None
    fit: FitChoice | None = None
    sources: dict[str, DeviceSource] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cached: bool = False
    runs: int = 0
    sparse_copy: bool = False  # measured on a header-only sparse copy of the model file

    @property
    def available(self) -> bool:
        return self.status == "exact" and self.plan is not None

    def label(self, key: str) -> str:
        """"exact (llama.cpp)" or "estimate" for one device of the plan."""
        s = self.sources.get(key)
        return s.label if (s is not None and self.available) else "estimate"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status, "reason": self.reason, "seconds": round(self.seconds, 3), "cached": self.cached,
            "runs": self.runs, "sparse_copy": self.sparse_copy, "fit": self.fit.to_dict() if self.fit else None,
            "sources": {k: s.to_dict() for k, s in self.sources.items()}, "warnings": list(self.warnings),
            "plan": self.plan.to_dict() if self.plan else None,
        }


def unavailable(reason: str, seconds: float = 0.0) -> ExactResult:
    return ExactResult("unavailable", reason, seconds=seconds)


# ---- the cache ---------------------------------------------------------------------------------


def cache_key(digest: str, args: Sequence[str], devices: Sequence[DeviceSpec], server_bin: Path, stand_in: bool) -> str:
    # the model path is not part of the key (the header hash is): drop -m and its value
    rest = without(list(args), "-m", "--model")
    # a real GPU's free memory is read by llama.cpp itself and drifts by MiBs between readings: key it
    # coarsely; a simulated device's free memory is the simulation itself
    devs = [[d.key, d.total_mib, d.free_mib if (stand_in and not d.remote) else round(d.free_mib / FREE_BUCKET_MIB), d.remote]
            for d in devices]
    payload = json.dumps([CACHE_VERSION, digest, rest, devs, binary_id(server_bin), stand_in], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def _save(root: Path, key: str, res: ExactResult) -> None:
    if res.plan is None:
        return
    data = {"components": {d.key: d.components for d in res.plan.devices}, "fit": res.fit.to_dict() if res.fit else None,
            "sources": {k: s.to_dict() for k, s in res.sources.items()}, "warnings": res.warnings,
            "seconds": res.seconds, "runs": res.runs}
    path = root / f"{key}.json"
    try:
        private_dir(path.parent)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written is only slower


#: an entry as `_save` writes it, checked when read (a file on the user's disk: damaged, it is a miss)
_ENTRY = {"components": dict[str, dict[str, float]], "fit": FitChoice | None, "warnings": list[str], "seconds": float,
          "runs": int, "sources": dict[str, {"source": str, "why": str, "by_formula": list[str],  # type: ignore[dict-item]
                                             "weights_buffers_mib": dict[str, float]}]}


def _load(root: Path, key: str) -> dict[str, Any] | None:
    try:
        data = json.loads((root / f"{key}.json").read_text())
        check(data, _ENTRY, key)
    except (OSError, ValueError, RecursionError):  # ShapeError is a ValueError
        return None
    return data


# ---- the entry point ---------------------------------------------------------------------------


def exact_plan(settings: Settings, devices: Sequence[DeviceSpec] = (), server_bin: str | Path | None = None, *,
               meta: GGUFMeta | None = None, stand_in: bool = False, rpc_bin: str | Path | None = None,
               host_total_mib: float | None = None, host_free_mib: float | None = None,
               timeout_s: float = DEFAULT_TIMEOUT_S, cancel: threading.Event | None = None, use_cache: bool = True,
               env: Mapping[str, str] | None = None, sparse: bool | None = None,
               progress: Callable[[str], None] | None = None, root: Path | None = None) -> ExactResult:
    """The exact plan of `settings` on `devices` (the planner's device list), from llama.cpp itself.

    `stand_in=True`: the non-remote devices are simulated; each is played by a loopback
    ggml-rpc-server (`rpc_bin`, default: next to the server) with the fit target that makes fit see
    its free memory. `sparse`: measure a header-only sparse copy (default: always; a split model's every part).
    `progress` is called (on this thread) with a short phrase as each dry run starts. `root` holds the
    cache, the sparse copies and the dry-run logs (default: cache_dir()/exact)."""
    t0 = time.monotonic()
    root = Path(root) if root is not None else default_root()
    if server_bin is None:  # the server mtp-tune would launch: $MTP_TUNE_LLAMA_SERVER, PATH, the cached build
        from tui.core.server import provision
        try:
            found = provision.find_server()
        except provision.ProvisionError as e:
            return unavailable(str(e))
        if found is None:
            return unavailable("no llama-server found (run `mtp-tune doctor`); exact mode needs one.")
        server_bin = found.path
    server_bin = Path(server_bin)
    if not server_bin.is_file():
        return unavailable(f"llama-server {server_bin} does not exist.")
    if not settings.model:
        return unavailable("exact mode needs a local model file (-m); a -hf model is only planned by estimate.")
    try:
        meta = meta or read_gguf(settings.model)
        digest = header_hash(meta)
    except (GGUFError, OSError) as e:
        return unavailable(str(e).split("\n")[0])
    except (ValueError, MemoryError, UnicodeError) as e:  # a damaged header the reader did not name
        return unavailable(f"{settings.model}: the GGUF header could not be read ({type(e).__name__}: {e}).")
    devices = list(devices)
    local = [d for d in devices if not d.remote] if stand_in else []
    remote_eps = [d.key[5:-1] for d in devices if d.remote and d.key.startswith("RPC0[")]
    warnings: list[str] = []
    margins = list(settings.fit_target) or [int(default("--fit-target"))]  # type: ignore[call-overload]
    try:
        fit_targets(local, margins[len(remote_eps):] or margins)
    except StandInError as e:
        return unavailable(str(e))
    model_path = Path(settings.model)
    use_sparse = sparse if sparse is not None else needs_sparse(meta)
    key_args = dry_run_args(settings, "MODEL", rpc=remote_eps, fit_targets=[], n_ctx_train=meta.hparams.n_ctx_train)
    key = cache_key(digest, key_args, devices, server_bin, stand_in)
    if use_cache and (hit := _load(root, key)) is not None:
        res = _from_cache(hit, meta, settings, devices, host_total_mib, host_free_mib)
        if res is not None:
            res.seconds = time.monotonic() - t0
            return res
    if cancel is not None and cancel.is_set():
        return ExactResult("cancelled", "cancelled before the dry run started")
    rpc_path = Path(rpc_bin) if rpc_bin else server_bin.parent / "ggml-rpc-server"
    if local and not rpc_path.is_file():
        return unavailable(f"simulated devices need ggml-rpc-server stand-ins, and {rpc_path} does not exist.")
    if local:
        warnings += caveats(local)
    created = False
    entry = sparse_path(root, digest, meta)  # a file, or a split model's folder of parts
    if use_sparse:  # the dry run reads this copy, never the user's file: a late stop reads zeros of the cache
        created = not entry.exists()
        try:
            model_path = sparse_copy(meta, root, digest)
        except OSError as e:
            return unavailable(f"could not write the header-only copy of the model ({e}).")
    job = _Job(settings, meta, model_path, devices, server_bin, remote_eps, _all_targets(margins, len(remote_eps)),
               local, rpc_path, margins[len(remote_eps):] or margins, host_total_mib, host_free_mib, timeout_s,
               cancel, env, progress, root / "logs")
    res = unavailable("the dry run was interrupted.")
    try:
        res = _measure(job)
    except (RuntimeError, OSError) as e:  # a stand-in that would not start, a binary that would not run
        res = unavailable(f"the dry run could not start: {e}", time.monotonic() - t0)
        return res
    finally:
        if created and not res.available:  # a copy made for a run that measured nothing is not kept
            remove_sparse(entry)
        elif created:
            prune_sparse(root, keep=entry)
    res.warnings = warnings + res.warnings
    res.seconds = time.monotonic() - t0
    res.sparse_copy = use_sparse
    if res.available and use_cache:
        _save(root, key, res)
    return res


def _all_targets(margins: list[int], n: int) -> list[int]:
    return [margins[i] if i < len(margins) else margins[-1] for i in range(n)]


@dataclass
class _Job:
    """One exact-plan computation: what to run, against which devices, within which limits."""

    settings: Settings
    meta: GGUFMeta
    model_path: Path
    devices: list[DeviceSpec]
    server_bin: Path
    remote: list[str]  # the user's --rpc endpoints
    remote_targets: list[int]  # --fit-target for those
    local: list[DeviceSpec]  # the simulated devices stand-ins play ([]: none)
    rpc_bin: Path
    margins: list[int]  # the user's margins for the simulated devices
    host_total: float | None
    host_free: float | None
    timeout_s: float
    cancel: threading.Event | None
    env: Mapping[str, str] | None
    progress: Callable[[str], None] | None
    log_dir: Path
    deadline: float = 0.0
    keymap: dict[str, str] = field(default_factory=dict)  # the last run's stand-in buffer names -> device keys
    run_keys: list[str] = field(default_factory=list)  # the last run's offload devices, as llama.cpp names them

    def run(self, pin: FitChoice | None = None) -> tuple[DryRunLog, str]:
        """One dry run (fit's choice `pin`ned, in device keys). Stand-ins are fresh for every run: a
        ggml-rpc-server serves one client at a time and may still be busy with, or have died of, the
        stopped previous one. A run an RPC server refused is tried again, up to three times."""
        for attempt in range(3):
            with StandIns(self.rpc_bin, self.local, self.margins) if self.local else nullcontext() as si, \
                    RpcGuard(self.remote + (si.endpoints.split(",") if si is not None else [])) as guard:
                # every RPC device, the user's and the stand-ins, is reached through a guard: a late
                # stop never sends a weight anywhere (tui.core.planning.rpcguard)
                rpc = guard.endpoints
                standin = dict(zip(si.keys, [d.key for d in self.local])) if si is not None else {}
                self.keymap = {g: standin.get(u, u) for g, u in guard.names.items()}
                self.run_keys = [f"RPC0[{ep}]" for ep in rpc] + [d.key for d in self.devices if not d.remote and not self.local]
                args = dry_run_args(self.settings, self.model_path, rpc=rpc,
                                    pin=pin.renamed({v: k for k, v in self.keymap.items()}) if pin else None,
                                    fit_targets=self.remote_targets + (si.targets if si is not None else []),
                                    n_ctx_train=self.meta.hparams.n_ctx_train)
                log, outcome = run_dry(self.server_bin, args, timeout_s=max(1.0, self.deadline - time.monotonic()),
                                       cancel=self.cancel, env=self.env, log_dir=self.log_dir, progress=self.progress,
                                       finish_on_cancel=bool(self.remote), held=guard.held)
                if guard.unreachable:
                    log.errors.insert(0, f"Failed to connect to {guard.unreachable}")
            if not (log.errors and log.errors[0].startswith("Failed to connect")) or time.monotonic() > self.deadline:
                break
            if (self.cancel or threading.Event()).wait(0.25 * (attempt + 1)):  # back off; a cancel ends it at once
                break
        return log, outcome


def _measure(job: _Job) -> ExactResult:
    """The dry run; a second one pinned to fit's choice when fit changed something."""
    settings, hp, devices, local = job.settings, job.meta.hparams, job.devices, job.local
    job.deadline = time.monotonic() + job.timeout_s
    log, outcome = job.run()
    runs = 1
    if outcome == "cancelled":
        return ExactResult("cancelled", "cancelled", runs=runs)
    why = why_unavailable(log, outcome, job.timeout_s)
    if why:
        return ExactResult("unavailable", why, runs=runs)
    n_offload = len(log.step1()[0].devices())  # type: ignore[union-attr]
    # overflow targets named as the user's devices, not the stand-ins (whose ports change per run)
    choice = choice_from_trace(log, settings, hp, n_offload, job.run_keys).renamed(job.keymap)
    # stand-ins all report the same memory, so llama.cpp's default split would be even: give it the
    # simulated devices' split (llama.cpp splits by free memory) unless fit or the user chose one
    uneven = len(local) > 1 and len({d.free_mib for d in local}) > 1 and not settings.tensor_split
    if choice.changed or (uneven and not choice.tensor_split):
        pin = choice if choice.changed else replace(choice, tensor_split=[d.free_mib for d in devices])
        if job.progress is not None:
            job.progress("measuring what --fit chose")
        log, outcome = job.run(pin)
        runs += 1
        if outcome == "cancelled":
            return ExactResult("cancelled", "cancelled", runs=runs)
        why = why_unavailable(log, outcome, job.timeout_s)
        if why:
            return ExactResult("unavailable", "measuring what --fit chose: " + why, runs=runs)
        if not choice.changed:
            choice = replace(choice, tensor_split=list(pin.tensor_split))
    target, draft = log.step1()
    try:
        est = plan(job.meta, choice.apply(settings), devices, job.host_total, job.host_free, apply_fit=False)
    except PlanError as e:
        return ExactResult("unavailable", f"the plan shape for fit's choice could not be built: {e}", runs=runs)
    est.fit = FitOutcome(settings.fit is not False, choice.action, choice.message, n_ctx=choice.n_ctx,
                         n_gpu_layers=choice.n_gpu_layers)
    planned = sum(1 for d in est.devices if d.key != HOST)
    if target is not None and len(target.devices()) != planned:
        return ExactResult("unavailable", f"this llama-server offloads to {len(target.devices())} device(s) where the plan "
                           f"has {planned} (a CPU build cannot measure GPUs: simulate them with stand-ins, or use the "
                           "build that runs on them).", runs=runs)
    mtp = est.resolved.mtp
    sources = apply_measurements(est, target, draft, job.keymap, mtp)  # type: ignore[arg-type]
    warnings = []
    if mtp and draft is None:
        warnings.append("llama.cpp did not measure the MTP context; draft KV and draft compute are estimates.")
    return ExactResult("exact", "", est, choice, sources, warnings, runs=runs)


def _from_cache(data: dict[str, Any], meta: GGUFMeta, settings: Settings, devices: list[DeviceSpec],
                host_total: float | None, host_free: float | None) -> ExactResult | None:
    try:
        choice = FitChoice.from_dict(data["fit"])
        est = plan(meta, choice.apply(settings), devices, host_total, host_free, apply_fit=False)
        est.fit = FitOutcome(settings.fit is not False, choice.action, choice.message, n_ctx=choice.n_ctx,
                             n_gpu_layers=choice.n_gpu_layers)
        for d in est.devices:
            comps = data["components"].get(d.key)
            if comps:
                d.components.update({k: float(v) for k, v in comps.items() if k in d.components})
        sources = {k: DeviceSource(k, v["source"] != "estimate", v.get("why", ""), list(v.get("by_formula", [])),
                                   {b: float(x) for b, x in v.get("weights_buffers_mib", {}).items()})
                   for k, v in data.get("sources", {}).items()}
    except (KeyError, TypeError, ValueError, PlanError):
        return None
    return ExactResult("exact", "", est, choice, sources, list(data.get("warnings", [])), cached=True,
                       runs=int(data.get("runs", 0)))
