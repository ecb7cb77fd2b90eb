"""The expected outcome of `--fit on` (common/fit.cpp's common_fit_params), replayed on plans."""

from __future__ import annotations

from dataclasses import replace

from tui.core.planning.accounting import plan_once
from tui.core.planning.devices import HOST, DeviceSpec
from tui.core.planning.gguf_meta import GGUFMeta
from tui.core.planning.resolve import Resolved, resolve
from tui.core.planning.result import FitOutcome, Plan, layers_on_devices
from tui.core.options.settings import Settings


def _fits(p: Plan) -> bool:
    return all((d.headroom_mib is None) or d.headroom_mib >= d.margin_mib for d in p.devices if d.key != HOST or len(p.devices) == 1)


def apply_fit(meta: GGUFMeta, s: Settings, base: Resolved, devices: list[DeviceSpec],
               host_total: float | None, host_free: float | None, first: Plan) -> Plan:
    """common_fit_params: change nothing if it fits; else shrink an unset context (linear
    interpolation down to --fit-ctx, rounded to 256 x streams); else move layers/experts when -ngl is
    auto and no -ts/-ot/-cmoe/-ncmoe; else give up and load as given."""
    if _fits(first):
        first.fit = FitOutcome(True, "none", "fits with the --fit-target margin: --fit changes nothing.")
        return first
    hp = meta.hparams
    cur = first
    nd = len(devices)
    if base.ctx_auto and _budget(first) - _used(first) < 0:
        lo_ctx = base.fit_ctx * base.n_stream
        lo = plan_once(meta, s, resolve(s, hp, ctx_override=lo_ctx), devices, host_total, host_free)
        used_hi, used_lo = _used(first), _used(lo)
        target = _budget(first)
        if nd > 1:
            # llama.cpp is more conservative across devices: whole layers/tensors waste ~0.5 per device
            model = sum(d.components["weights"] for d in first.devices if d.key != HOST)
            per_layer = model / max(1, min(base.n_gpu_layers, hp.n_layer_all + 1))
            target -= (nd + 1) * per_layer / (6 if hp.n_expert else 2)
        if target > used_lo and used_hi > used_lo:
            n = lo_ctx + int((first.resolved.n_ctx - lo_ctx) * (target - used_lo) / (used_hi - used_lo))
            align = 256 * base.n_stream
            n = max(n - n % align, lo_ctx)
            cur = plan_once(meta, s, resolve(s, hp, ctx_override=n), devices, host_total, host_free)
            if nd <= 1 or _fits(cur):
                cur.fit = FitOutcome(True, "reduce-ctx", f"--fit is expected to reduce the context to {n} tokens.", n_ctx=n)
                return cur
        else:
            cur = lo
    movable = (base.ngl_auto and not base.tensor_split and not base.has_overrides
               and base.split_mode not in ("row", "tensor") and devices)
    if not movable:
        why = ("no offload device" if not devices else
               "-ngl was set" if not base.ngl_auto else "-ts/-ot/-cmoe/-ncmoe were given" if (base.tensor_split or base.has_overrides)
               else f"-sm {base.split_mode}")
        cur.fit = FitOutcome(True, "give-up", f"--fit cannot make this fit ({why}); llama-server loads as given and is expected to run out of memory.")
        return cur
    n_all = hp.n_layer_all
    if hp.n_expert > 0:
        # MoE: overflow expert tensors to the host, front layers first
        for n_moe in range(1, hp.n_layer + 1):
            s2 = replace(s, n_cpu_moe=n_moe, ctx_size=s.ctx_size or cur.resolved.n_ctx)
            p2 = plan_once(meta, s2, replace(resolve(s2, hp), ngl_auto=True), devices, host_total, host_free)
            if _fits(p2):
                p2.fit = FitOutcome(True, "move-layers", f"--fit is expected to keep the experts of the first {n_moe} layers in host memory.",
                                    n_ctx=p2.resolved.n_ctx, n_cpu_moe=n_moe)
                p2.settings = s
                return p2
    for ngl in range(n_all, -1, -1):
        s2 = replace(s, n_gpu_layers=str(ngl), ctx_size=s.ctx_size or cur.resolved.n_ctx)
        p2 = plan_once(meta, s2, resolve(s2, hp), devices, host_total, host_free)
        if _fits(p2):
            where = layers_on_devices(ngl, n_all + 1, nd)
            p2.fit = FitOutcome(True, "move-layers", f"--fit is expected to set -ngl {ngl}: it {where}.",
                                n_ctx=p2.resolved.n_ctx, n_gpu_layers=ngl)
            p2.settings = s
            return p2
    cur.fit = FitOutcome(True, "give-up", "--fit cannot make this fit even with every layer in host RAM; llama-server is expected to fail.")
    return cur


def _used(p: Plan) -> float:
    devs = [d for d in p.devices if d.key != HOST] or p.devices
    return sum(d.needed_mib for d in devs)


def _budget(p: Plan) -> float:
    devs = [d for d in p.devices if d.key != HOST] or p.devices
    return sum((d.free_mib or 0) - d.margin_mib for d in devs)
