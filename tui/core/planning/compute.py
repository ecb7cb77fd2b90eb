"""Compute buffers: what ggml's graph allocator reserves at its peak, placed per device.

Non-hybrid architectures: the structural model of graph.py (block peaks from the graph's shapes).
The Gated-DeltaNet hybrids keep per-token widths measured on the real server (CPU build;
bench/bench_planner_accuracy.py) and scaled to other shapes by a fitted proxy. The KQ mask is exact.
"""

from __future__ import annotations

import math
import re

from tui.core.planning import calibrated_compute, graph
from tui.core.planning.devices import HOST, DeviceSpec
from tui.core.planning.gguf_meta import GGUFMeta, HParams
from tui.core.planning.hparams import HYBRID_GDN_ARCHS
from tui.core.planning.resolve import Resolved
from tui.core.planning.result import MiB, DevicePlan

# Compute buffers are what ggml's graph allocator reserves at its peak, so they are modelled as
#   target: mask x copies + max(T x 4 B x P_t, floor)        (the KQ mask is live through the trunk)
#   draft:  max(T x 4 B x P_dA, T x 4 B x P_dB + mask x copies) (the one MTP attention frees the mask)
# with per-token widths P measured on the real server (CPU backend, bench/bench_planner_accuracy.py)
# for reference shapes, and scaled to other shapes by a linear proxy fitted on shape variants.
# CUDA adds pool scratch and host staging that llama.cpp itself lists as "unaccounted".

#: (family, features, P_t, P_dA, P_dB) in floats per ubatch token; features as in _features().
REFERENCES: tuple[tuple[str, dict[str, float], float, float, float], ...] = (
    # Qwen3.6-35B-A3B (shape-only file, vocab 248320): 80.02 / 65.02 MiB at -ub 512 -c 4096
    ("moe", {"embd": 2048, "q": 4096, "uembd": 16384, "uff": 4096, "ff": 512}, 38922.0, 33290.0, 26634.0),
    # an 8-layer qwen35moe at 1/4 width (n_embd 512, 16 experts, 4 used)
    ("moe", {"embd": 512, "q": 512, "uembd": 2048, "uff": 512, "ff": 128}, 6154.0, 5130.0, 3082.0),
    ("moe", {"embd": 1024, "q": 512, "uembd": 4096, "uff": 512, "ff": 128}, 10250.0, 8202.0, 6154.0),
    ("moe", {"embd": 512, "q": 1024, "uembd": 2048, "uff": 512, "ff": 128}, 6666.0, 7178.0, 5130.0),
    ("moe", {"embd": 512, "q": 512, "uembd": 4096, "uff": 1024, "ff": 128}, 9738.0, 8714.0, 6666.0),
    ("moe", {"embd": 512, "q": 512, "uembd": 2048, "uff": 2048, "ff": 128}, 8714.0, 8714.0, 6666.0),
    # tiny_model presets (qwen35, qwen35moe with a shared expert wider than the routed ones)
    ("dense", {"embd": 128, "q": 128, "uembd": 0, "uff": 0, "ff": 256}, 1420.8, 1930.0, 778.0),
    ("dense", {"embd": 256, "q": 128, "uembd": 0, "uff": 0, "ff": 256}, 1548.8, 1930.0, 1034.0),
    ("dense", {"embd": 128, "q": 128, "uembd": 0, "uff": 0, "ff": 1024}, 3724.8, 4234.0, 778.0),
    ("dense", {"embd": 128, "q": 256, "uembd": 0, "uff": 0, "ff": 256}, 1676.8, 1930.0, 1290.0),
    ("dense", {"embd": 512, "q": 512, "uembd": 0, "uff": 0, "ff": 1536}, 7180.0, 5642.0, 2826.0),
)
#: hybrid target floor: recurrent-state copies per slot (units of n_embd_s x 4 B) plus ssm_inner_size-wide
#: tensors per ubatch token, from the shape-only Qwen3.6-35B-A3B's dry runs at -ub 64-512 with 1-8 slots
#: (b11434: 12.1 MiB at -ub 64 with 1 slot, 47.8 at -ub 128 with 8, 92.8 at -ub 512 with 8)
#: with MTP the floor also holds the outputs' logits 1.6 times (the same dry runs at 1-33 outputs)
FLOOR = {"state_per_seq": 2.04, "inner_per_token": 7.5, "mtp_logits": 1.6}
#: with the experts in host memory (-cmoe, -ncmoe, -ot exps=CPU) the MoE activations move to the host
#: (shape-only Qwen3.6-35B-A3B over two RPC devices with -cmoe)
EXPERTS_ON_HOST = {"host_t": 0.9, "dev_t": 0.9, "dev_d_attn": 0.8}
#: extra inputs per split, in units of T x n_embd x 4 B, with 4 scheduler copies (scaled by copies / 4)
SPLIT_UNITS = {"first": 10.0, "other": 1.5, "output_only": 5.0, "host": 10.0, "draft_dev": 10.0, "draft_host": 5.0}


def _features(hp: HParams) -> tuple[str, dict[str, float]]:
    moe = hp.n_expert > 0
    q = float(max(hp.n_head, default=0) * hp.head_dim_k)
    uff = float(hp.n_expert_used * hp.n_ff_exp) if moe else 0.0
    ff = float((hp.n_ff_shexp or hp.n_ff) if moe else hp.n_ff)
    f = {"embd": float(hp.n_embd), "q": q, "uembd": float(hp.n_expert_used * hp.n_embd) if moe else 0.0, "uff": uff, "ff": ff,
         "kv": float(max(hp.n_head_kv, default=0) * hp.head_dim_k)}
    family = "moe" if moe and uff >= ff else "dense"
    return family, f


def _proxy(family: str, f: dict[str, float]) -> float:
    """Linear per-token width fitted on shape variants (floats per token)."""
    if family == "moe":
        return 2.667 * f["embd"] + f["q"] + 1.333 * f["uembd"] + 1.667 * f["uff"] + 693.0
    return f["embd"] + 3.0 * f["ff"] + 2.0 * f["q"] + 4.0 * f.get("kv", 0.0) + 12.8


def _widths(hp: HParams) -> tuple[float, float, float]:
    """(P_t, P_dA, P_dB): the nearest reference of the same family, scaled by the proxy ratio."""
    family, f = _features(hp)
    refs = [r for r in REFERENCES if r[0] == family]
    p = _proxy(family, f)
    if not refs or not hp.known:
        return p, p, p * 0.6

    def dist(rf: dict[str, float]) -> float:
        return sum(abs(math.log((f[k] + 1.0) / (rf[k] + 1.0))) for k in ("embd", "q", "uembd", "uff", "ff"))

    _, rf, pt, pda, pdb = min(refs, key=lambda r: dist(r[1]))
    ratio = p / _proxy(family, {**rf, "kv": f.get("kv", 0.0)})
    return pt * ratio, pda * ratio, pdb * ratio


def add_compute(meta: GGUFMeta, r: Resolved, dp: dict[str, DevicePlan], layer_dev: list[str], out_dev: str,
                copies: int, offload: list[DeviceSpec]) -> bool:
    """Fill compute and draft compute per device; True when the model's calibration set them (never
    on a real GPU: it measured the CPU backend)."""
    hp = meta.hparams
    cal_ok = meta.calibration is not None and not any(d.real_gpu for d in offload)  # measured on the CPU backend
    if cal_ok and calibrated_compute.place(meta, r, dp, layer_dev, out_dev, copies, meta.calibration):
        return True  # the model's own terms, measured by llama.cpp, for every device of this placement
    T = r.n_tokens
    n_kv = r.n_ctx_seq  # cells one stream attends to; the mask is n_kv x T over all streams
    structural = uses_graph_model(hp)
    n_out = min(T, r.n_outputs_max)
    unit = T * hp.n_embd * 4
    n_out_d = min(T, max(1, r.n_seq_max))
    if structural:
        mask = graph.masks(hp, r, T, hp.attention_layers()) * copies
        act_t = graph.target_peak(hp, r, T, n_out)
        act_d = graph.masks(hp, r, T, hp.kv_draft or hp.nextn_layers()) * copies + graph.draft_peak(hp, r, T, n_out_d)
        pdb = act_d / (4.0 * T)
    else:
        mask = n_kv * T * (2 if r.flash_attn else 4) * copies
        if not r.flash_attn:  # KQ scores and softmax in f32
            mask += n_kv * T * max(hp.n_head, default=0) * 4
        pt, pda, pdb = _widths(hp)
        floor = 0.0
        if hp.is_hybrid:
            floor = (hp.n_embd_s * 4 * FLOOR["state_per_seq"] * max(1, r.n_seq_max)
                     + FLOOR["inner_per_token"] * hp.ssm_inner_size * 4 * T
                     + (FLOOR["mtp_logits"] * n_out * hp.n_vocab * 4 if r.mtp else 0.0))
        logits_t = n_out * hp.n_vocab * 4 + 2 * unit  # a large output count (ngram-mod) makes the logits the peak
        act_t = max(4.0 * T * pt, floor, logits_t)
        act_d = max(4.0 * T * pda, 4.0 * T * pdb + mask, n_out_d * hp.n_vocab * 4 + 2 * unit)
    cal = _calibrated(meta, r) if cal_ok else None
    if cal is not None:  # this model's own graphs, with the structural split terms (experts on the host)
        g_t, g_d = cal
        act_t = g_t - mask / copies
        if g_d is not None:
            mask_d = graph.masks(hp, r, T, hp.kv_draft or hp.nextn_layers())
            act_d = g_d + mask_d * (copies - 1)
            pdb = act_d / (4.0 * T)
    trunk = [layer_dev[il] for il in range(hp.n_layer)]
    trunk_devs = list(dict.fromkeys(trunk))
    scale = copies / 4.0 if copies > 1 else 0.0  # split inputs are duplicated per scheduler copy
    exps_host = _experts_on_host(meta, r) and HOST not in trunk_devs
    if trunk_devs == [HOST] and out_dev == HOST:
        dp[HOST].components["compute"] = (mask + act_t) / MiB
    else:
        dev_act = act_t * (EXPERTS_ON_HOST["dev_t"] if exps_host and r.cpu_moe else 1.0)
        for i, k in enumerate(trunk_devs):
            extra = SPLIT_UNITS["first" if i == 0 else "other"] * unit * scale
            dp[k].components["compute"] += (mask + dev_act + extra) / MiB
        if out_dev not in trunk_devs:
            dp[out_dev].components["compute"] += (SPLIT_UNITS["output_only"] * unit * scale + n_out * hp.n_vocab * 4) / MiB
        if HOST not in trunk_devs:
            host_b = (mask if copies > 1 else 0) + SPLIT_UNITS["host"] * unit * scale
            if exps_host:
                host_b += EXPERTS_ON_HOST["host_t"] * act_t
            dp[HOST].components["compute"] += host_b / MiB
    if not r.mtp:
        return cal is not None
    logits_d = n_out_d * hp.n_vocab * 4
    mtp_dev = layer_dev[hp.n_layer] if hp.n_nextn else out_dev
    if mtp_dev == HOST:
        dp[HOST].components["draft_compute"] += act_d / MiB
        return cal is not None
    dev_d = act_d
    moe_on_host = exps_host and (r.cpu_moe or r.n_cpu_moe > hp.n_layer)
    if moe_on_host:  # the MTP block's experts run on the host; its attention stays on the device
        dev_d = EXPERTS_ON_HOST["dev_d_attn"] * 4.0 * T * pdb + mask
    dp[mtp_dev].components["draft_compute"] += (dev_d + SPLIT_UNITS["draft_dev"] * unit * scale) / MiB
    if out_dev != mtp_dev:
        dp[out_dev].components["draft_compute"] += (SPLIT_UNITS["output_only"] * unit * scale + logits_d) / MiB
    host_d = (mask if copies > 1 else 0) + SPLIT_UNITS["draft_host"] * unit * scale
    if moe_on_host:
        host_d += act_d
    dp[HOST].components["draft_compute"] += host_d / MiB
    return cal is not None


def _calibrated(meta: GGUFMeta, r: Resolved) -> tuple[float, float | None] | None:
    """(target, draft) bytes of one device's graph buffers from the model's calibration, or None."""
    c = meta.calibration
    if c is None:
        return None
    g_t = c.predict(meta.hparams, r, "target_mtp" if r.mtp else "target")
    if g_t is None:
        return None
    return g_t, (c.predict(meta.hparams, r, "draft") if r.mtp else None)


def uses_graph_model(hp: HParams) -> bool:
    """The structural model (graph.py) for every architecture but the Gated-DeltaNet hybrids
    (qwen35/qwen35moe/qwen3next/qwen4exp), whose chunked recurrent graph the fitted widths were
    measured on. Mamba-2 hybrids (nemotron_h*) and unknown architectures get the structural model
    too: its terms come from the tensors' shapes, the widths from one family's measurements."""
    return hp.arch not in HYBRID_GDN_ARCHS


def _experts_on_host(meta: GGUFMeta, r: Resolved) -> bool:
    if r.cpu_moe or r.n_cpu_moe > 0:
        return meta.hparams.n_expert > 0
    return any(re.search(p, "blk.0.ffn_up_exps.weight") for p in r.cpu_overrides)
