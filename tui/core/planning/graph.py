"""Compute buffers from the graph's structure: the live tensors at the peak of one ubatch.

ggml's graph allocator reserves the peak of what is live at once. For one ubatch of T tokens that is
the inputs (the KQ masks: n_kv x T, f16 with flash attention, f32 without; one per cache, the
sliding-window one at its own cell count) plus the largest of the per-block peaks below, each a sum of
the tensors llama.cpp's graph keeps alive together (floats per token, times T x 4 bytes):

- dense FFN: gate, up and the activation (3 x n_ff), plus 5 x n_embd of residual, norm and inputs;
- MoE FFN: the routed activations (n_used x n_ff_exp) and the weighted expert outputs
  (2 x n_used x n_embd) while they are summed, plus 2.5 x n_embd;
- attention with flash attention: q and its output plus 5 x n_embd (no score matrix; not the peak on
  any calibration shape, so this term is the least checked);
- attention without flash attention: the KQ scores (n_kv x T x n_head, f32) plus q, kqv and 5 x n_embd
  (MLA, absorbed: twice q and kqv over the latent width, plus the V up-projection);
- output: the logits (n_outputs x n_vocab) plus 2 x n_embd.

The term shapes are read off llama-graph.cpp (build_ffn, build_moe_ffn, build_attn_mha); the constant
n_embd counts (5, 2.5, 2) were calibrated on gemma3-1b, deepseek-v2-lite and glm45-air only (bench
calibration set; bench/calibrate_graph.py reproduces them from llama.cpp's dry runs, its points in
bench/data/graph_calibration.json) and are checked on held-out shapes by bench/bench_planner_heldout.py. The
MTP draft graph is the NextN block alone: its FFN without the trunk's n_embd terms, and its logits.
ggml-alloc reuses freed blocks best-fit, so peaks are not exactly additive: the terms are a model.
"""

from __future__ import annotations

from tui.core.planning.gguf_meta import HParams
from tui.core.planning.resolve import Resolved, pad

#: n_embd-sized tensors live beside each block's peak (calibration set, see the module doc)
EMBD_DENSE = 5.0
EMBD_MOE = 2.5
EMBD_ATTN = 5.0
EMBD_OUT = 2.0
#: the MTP draft graph is one block: its FFN peak keeps none of the trunk's n_embd-sized tensors
#: (glm45-air's draft: the routed experts alone, within 3 %)
EMBD_DRAFT_EXTRA = -EMBD_MOE


def swa_cells(hp: HParams, r: Resolved) -> int:
    """Cells per stream of the sliding-window cache (kv.cells without the stream factor)."""
    if r.swa_full or not hp.sliding_window:
        return r.n_ctx_seq
    return pad(min(r.n_ctx_seq, hp.sliding_window * (r.n_seq_max if r.kv_unified else 1) + r.n_ubatch), 256)


def widest_cells(hp: HParams, r: Resolved, layers: list[int]) -> int:
    """Cells per stream the widest of `layers` attends (a sliding-window layer: its window's)."""
    return max((swa_cells(hp, r) if hp.swa(il) else r.n_ctx_seq for il in layers), default=r.n_ctx_seq)


def masks(hp: HParams, r: Resolved, T: int, layers: list[int]) -> int:
    """Bytes of the KQ masks the graph over `layers` needs (one per cache kind it attends)."""
    per = 2 if r.flash_attn else 4
    kinds = {hp.swa(il) for il in layers} or {False}
    out = 0
    if False in kinds:
        out += r.n_ctx_seq * T * per
    if True in kinds:
        out += swa_cells(hp, r) * T * per
    return out


def _ffn(hp: HParams, dense: bool, moe: bool) -> float:
    """Floats per token at the FFN peak of a block (the larger of its dense and MoE parts)."""
    E = hp.n_embd
    best = 0.0
    ff = hp.dense_ff_max or hp.n_ff
    if dense and ff:
        best = 3.0 * ff + EMBD_DENSE * E
    if moe and hp.n_expert:
        ff_exp = hp.n_ff_exp or (hp.n_ff // max(1, hp.n_expert_used))
        best = max(best, hp.n_expert_used * (ff_exp + 2.0 * E) + EMBD_MOE * E)
    return best


def _attn(hp: HParams, r: Resolved, T: int, n_kv: int) -> float:
    """Bytes of the attention peak of one layer (flash attention keeps no score matrix)."""
    nh = max(hp.n_head, default=0)
    E = hp.n_embd
    if r.flash_attn:  # q and the attention output, no scores (never the peak on the calibration set)
        return (nh * hp.head_dim_k + nh * hp.head_dim_v + EMBD_ATTN * E) * T * 4
    kq = n_kv * T * nh * 4
    if hp.mla:
        lat = hp.head_dim_k  # kv_lora_rank + rope dims
        v_mla = hp.head_dim_v_mla or hp.head_dim_v
        per = 2.0 * nh * lat + 2.0 * nh * hp.n_lora_kv + nh * v_mla + EMBD_ATTN * E
    else:
        per = nh * hp.head_dim_k + nh * hp.head_dim_v + EMBD_ATTN * E
    return kq + per * T * 4


def dense_layers(hp: HParams) -> bool:
    """Whether any trunk layer has a dense FFN (its ffn_up tensor; no experts, or leading dense blocks)."""
    return bool(hp.dense_ff_max) or not hp.n_expert or hp.n_layer_dense_lead > 0


def target_peak(hp: HParams, r: Resolved, T: int, n_out: int) -> float:
    """Bytes at the target graph's peak, masks excluded (they are added per device by compute.py)."""
    attn_kv = r.n_ctx_seq
    ffn = _ffn(hp, dense_layers(hp), hp.n_expert > 0) * T * 4
    out = (n_out * hp.n_vocab + EMBD_OUT * hp.n_embd * T) * 4
    return max(ffn, _attn(hp, r, T, attn_kv), out)


def draft_peak(hp: HParams, r: Resolved, T: int, n_out: int) -> float:
    """Bytes at the MTP draft graph's peak (the NextN block: MoE if the model has experts)."""
    moe = hp.nextn_moe or (hp.n_expert > 0 and not hp.dense_ff_max)
    ffn = (_ffn(hp, not moe, moe) + EMBD_DRAFT_EXTRA * hp.n_embd) * T * 4
    out = (n_out * hp.n_vocab + EMBD_OUT * hp.n_embd * T) * 4
    return max(ffn, _attn(hp, r, T, widest_cells(hp, r, hp.kv_draft or hp.nextn_layers())), out)
