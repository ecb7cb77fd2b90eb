"""Compute buffers placed per device from a model's calibration (planning.calibration).

A device's buffer is one graph's calibrated buffer (`g`, the host-only figure at these settings) plus
the scheduler's copies of the KQ mask and the split inputs that cross to it, which llama.cpp sizes
in n_embd x T x 4-byte units (`u`). Measured on two CPU-backed stand-ins, every role keeps a fixed
number of units across ubatch, context and slots (two models of other architectures, 2-4 figures
each, within 0.1 MiB), so the roles' unit counts are calibrated per model with the graphs:

    pipeline (4 copies):  first device  g + 3 mask + k u       host  4 mask + k u
                          other devices g + 3 mask + k u       (the one holding the output its own k)
                          MTP device    g_d + 4 mask_d + k u   host  4 mask_d + k u
    one copy:             each device   g + k u  (the output's own k; host with layers, host without;
                          MTP device    g_d + k u   host  k u    one device holding every layer: its own)

`roles()` gives each (device, component, role, base, unit) of a placement; calibrate fits k per role
as (measured - base) / unit, and `place()` fills a plan with base + k x unit. A role the calibration
did not measure keeps the structural split constant. Placements with experts moved to the host
(-cmoe, -ncmoe, -ot) are not modelled here (compute.py keeps its structural terms for them).
"""

from __future__ import annotations

from typing import Any

from tui.core.planning import graph
from tui.core.planning.devices import HOST
from tui.core.planning.gguf_meta import GGUFMeta
from tui.core.planning.resolve import Resolved
from tui.core.planning.result import MiB, DevicePlan

#: a role's unit count before calibration measured it (compute.py's structural split constants)
DEFAULT_UNITS = {"pp_first": 10.0, "pp_mid": 1.5, "pp_last": 1.5, "pp_host": 10.0, "pp_draft_dev": 10.0,
                 "pp_draft_host": 5.0}


def modelled(meta: GGUFMeta, r: Resolved) -> bool:
    """Whether the calibrated placement covers these settings (no experts held on the host)."""
    return not (r.cpu_moe or r.n_cpu_moe or r.cpu_overrides)


def roles(meta: GGUFMeta, r: Resolved, layer_dev: list[str], out_dev: str, copies: int,
          cal: Any) -> list[tuple[str, str, str, float, float]] | None:
    """(device key, component, role, base bytes, unit bytes) for every buffer of this placement, or
    None when the calibration has no graph for these settings."""
    hp = meta.hparams
    g_t = cal.predict(hp, r, "target_mtp" if r.mtp else "target")
    if g_t is None:
        return None
    T = r.n_tokens
    u = float(T * hp.n_embd * 4)
    m = float(graph.masks(hp, r, T, hp.attention_layers()))
    trunk = list(dict.fromkeys(layer_dev[il] for il in range(hp.n_layer)))
    out: list[tuple[str, str, str, float, float]] = []
    pipe = copies > 1
    solo = "solo_" if not pipe and len(trunk) == 1 and trunk != [HOST] else ""  # one device holds every layer
    if trunk == [HOST] and out_dev == HOST:
        out.append((HOST, "compute", "host_only", g_t, 0.0))
    else:
        for i, k in enumerate(trunk):
            if k == HOST:
                out.append((k, "compute", "host_trunk", g_t, u))
            elif pipe:
                role = "pp_first" if i == 0 else ("pp_last" if k == out_dev else "pp_mid")
                out.append((k, "compute", role, g_t + (copies - 1) * m, u))
            else:
                out.append((k, "compute", solo + ("dev_out" if k == out_dev else "dev"), g_t, u))
        if out_dev not in trunk:
            out.append((out_dev, "compute", "output_only", float(min(T, r.n_outputs_max) * hp.n_vocab * 4), u))
        if HOST not in trunk:
            out.append((HOST, "compute", "pp_host" if pipe else solo + "host_none", copies * m if pipe else 0.0, u))
    if not r.mtp:
        return out
    g_d = cal.predict(hp, r, "draft")
    if g_d is None:
        return out
    md = float(graph.masks(hp, r, T, hp.kv_draft or hp.nextn_layers()))
    mtp_dev = layer_dev[hp.n_layer] if hp.n_nextn else out_dev
    if mtp_dev == HOST:
        out.append((HOST, "draft_compute", "draft_host_only", g_d, 0.0))
    elif pipe:
        out.append((mtp_dev, "draft_compute", "pp_draft_dev", g_d + copies * md, u))
        out.append((HOST, "draft_compute", "pp_draft_host", copies * md, u))
    else:
        out.append((mtp_dev, "draft_compute", solo + "draft_dev", g_d, u))
        out.append((HOST, "draft_compute", solo + "draft_host", 0.0, u))
    return out


def place(meta: GGUFMeta, r: Resolved, dp: dict[str, DevicePlan], layer_dev: list[str], out_dev: str,
          copies: int, cal: Any) -> bool:
    """Fill compute and draft compute from the calibration; False (nothing written) when it does not
    cover these settings."""
    if not modelled(meta, r):
        return False
    rs = roles(meta, r, layer_dev, out_dev, copies, cal)
    if rs is None:
        return False
    units = {**DEFAULT_UNITS, **cal.split}
    for key, comp, role, base, unit in rs:
        scale = copies / 4.0 if role.startswith("pp_") else 1.0
        dp[key].components[comp] += max(0.0, base + units.get(role, 0.0) * unit * scale) / MiB
    return True
