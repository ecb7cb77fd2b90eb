"""One pass of the accounting: layers to devices, then weights, caches and compute buffers per device."""

from __future__ import annotations

from tui.core.planning.compute import add_compute
from tui.core.planning.devices import HOST, DeviceSpec
from tui.core.planning.errors import PlanError
from tui.core.planning.gguf_meta import GGUFMeta
from tui.core.planning.kv import add_caches
from tui.core.planning.resolve import Resolved
from tui.core.planning.result import DevicePlan, FitOutcome, Plan
from tui.core.planning.weights import add_weights, device_of_layer, offload_devices
from tui.core.options.settings import Settings


def plan_once(meta: GGUFMeta, s: Settings, r: Resolved, devices: list[DeviceSpec],
              host_total: float | None, host_free: float | None) -> Plan:
    """The plan for exactly these resolved settings (no --fit adjustment)."""
    hp = meta.hparams
    warnings: list[str] = []
    if r.mtp and hp.n_nextn == 0:
        raise PlanError(
            f"--spec-type draft-mtp: {meta.path.name} has no MTP (NextN) layers ({hp.arch}.nextn_predict_layers "
            "is missing), so llama-server would fail with 'failed to create MTP context'. Use a GGUF converted "
            "with its MTP head, or drop draft-mtp."
        )
    if hp.mla or hp.arch == "deepseek4":  # llama_init_from_model refuses mixed K/V types for these
        for flags, tk, tv in (("-ctk/-ctv", r.type_k, r.type_v), ("-ctkd/-ctvd", r.type_k_draft, r.type_v_draft)):
            if tk != tv and (flags == "-ctk/-ctv" or r.mtp):
                raise PlanError(
                    f"{flags} {tk}/{tv}: {hp.arch} keeps one latent cache (MLA), and llama-server refuses different "
                    f"K and V cache types for it ('model does not support different K and V cache types'). "
                    f"Give both the same type, e.g. {flags.split('/')[0]} {tk} {flags.split('/')[1]} {tk}."
                )
    offload, splits = offload_devices(r, devices, warnings)
    keys = [d.key for d in offload]
    n_all = hp.n_layer_all
    layer_dev = [device_of_layer(il, r, n_all, splits, keys) for il in range(n_all + 1)]

    dplans = {d.key: DevicePlan(d.key, d.name, d.total_mib, d.free_mib, 0.0, remote=d.remote) for d in offload}
    host = DevicePlan(HOST, "host memory", host_total, host_free, 0.0)
    dplans[HOST] = host
    margins = list(r.fit_target_mib)
    for i, d in enumerate(offload):
        dplans[d.key].margin_mib = float(margins[i] if i < len(margins) else margins[-1])
    host.margin_mib = float(margins[0])
    for il in range(n_all):
        dplans[layer_dev[il]].layers.append(il)

    add_weights(meta, r, dplans, layer_dev)
    add_caches(hp, r, dplans, layer_dev)
    # pipeline parallelism: several devices, all layers, -sm layer, no overrides
    pipeline = (len(offload) > 1 and r.n_gpu_layers > n_all and r.split_mode == "layer"
                and r.offload_kqv and not r.has_overrides)
    calibrated = add_compute(meta, r, dplans, layer_dev, layer_dev[n_all], 4 if pipeline else 1, offload)

    order = keys + [HOST]
    return Plan(meta, s, r, [dplans[k] for k in order], FitOutcome(r.fit, "none", ""), warnings, layer_dev, pipeline,
                calibrated)
