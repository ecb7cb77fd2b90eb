"""KV cache, MTP draft KV, recurrent state and output buffers: closed forms, exact to the byte.

Per layer, as llama_kv_cache allocates: K is `n_embd_k_gqa(il)` wide, V `n_embd_v_gqa(il)` (the widest
layer's when V is transposed, i.e. without flash attention), none with MLA; cells are n_ctx padded to
256, one stream per slot unless unified. Sliding-window layers (llama_kv_cache_iswa) keep
`pad(min(n_ctx_seq, n_swa x (np if unified else 1) + n_ubatch), 256)` cells unless --swa-full. DSA adds a
one-head indexer K cache. The MTP draft KV is the NextN block(s) with `-ctkd/-ctvd`. Recurrent state:
rows = max(1, np) x (1 + n_rs_seq) of (n_embd_r + n_embd_s) floats per recurrent layer. Output: logits
for n_seq_max rows, in host memory.
"""

from __future__ import annotations

from tui.core.planning.devices import HOST
from tui.core.planning.gguf_meta import HParams
from tui.core.planning.resolve import KV_BPE, Resolved, pad
from tui.core.planning.result import MiB, DevicePlan

#: element block of the unquantised KV types (the quantised ones use blocks of 32)
_KV_BLOCK = {"f32": 1, "f16": 1, "bf16": 1}


def row_bytes(n: int, t: str) -> int:
    """ggml_row_size of n elements of a KV cache type."""
    blk = _KV_BLOCK.get(t, 32)
    if blk == 1:
        return int(n * KV_BPE[t])
    return (n // 32) * int(KV_BPE[t] * 32)


def cells(hp: HParams, r: Resolved, il: int) -> int:
    """Cells of layer il's cache over all streams (llama_kv_cache_iswa's SWA size for SWA layers)."""
    base = r.n_ctx_seq
    if hp.swa(il) and hp.sliding_window and not r.swa_full:
        base = pad(min(base, hp.sliding_window * (r.n_seq_max if r.kv_unified else 1) + r.n_ubatch), 256)
    return base * r.n_stream


def layer_kv_bytes(hp: HParams, r: Resolved, il: int, type_k: str, type_v: str) -> int:
    n = cells(hp, r, il)
    k = row_bytes(hp.n_embd_k_gqa(il), type_k)
    if hp.mla:
        return n * k
    v_width = hp.n_embd_v_gqa(il) if r.flash_attn else hp.n_embd_v_gqa_max()
    return n * (k + row_bytes(v_width, type_v))


def add_caches(hp: HParams, r: Resolved, dplans: dict[str, DevicePlan], layer_dev: list[str]) -> None:
    """KV, draft KV and recurrent state on their layers' devices (the host with -nkvo); output on the host."""
    kv_dev = (lambda il: layer_dev[il]) if r.offload_kqv else (lambda il: HOST)
    for il in hp.attention_layers():
        dplans[kv_dev(il)].components["kv"] += layer_kv_bytes(hp, r, il, r.type_k, r.type_v) / MiB
    for il in hp.idx_main:  # DSA indexer keys: one head, the K type, every cell
        dplans[kv_dev(il)].components["kv"] += r.n_ctx_seq * r.n_stream * row_bytes(hp.indexer_head_size, r.type_k) / MiB
    if r.mtp:  # draft KV: the NextN layers only, -ctkd/-ctvd
        for il in hp.kv_draft or hp.nextn_layers():
            dplans[kv_dev(il)].components["draft_kv"] += layer_kv_bytes(hp, r, il, r.type_k_draft, r.type_v_draft) / MiB
    if hp.is_hybrid:
        rows = max(1, r.n_seq_max) * (1 + r.n_rs_seq)
        per_layer = 4 * (hp.n_embd_r + hp.n_embd_s) * rows
        for il in hp.recurrent_layers():
            dplans[kv_dev(il)].components["recurrent"] += per_layer / MiB
    out_bytes = hp.n_vocab * max(r.n_seq_max, 1) * 4  # logits for n_seq_max rows, target and draft
    dplans[HOST].components["output"] = out_bytes * (2 if r.mtp else 1) / MiB
