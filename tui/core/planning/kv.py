"""KV cache, MTP draft KV, recurrent state and output buffers: closed forms, exact to the byte.

KV: attention layers only (hybrid models), per-layer KV heads, n_ctx padded to 256, unified or per
slot; the MTP draft KV on the NextN layers with `-ctkd/-ctvd` (default f16, not `-ctk`). Recurrent
state: rows = max(1, np) x (1 + n_rs_seq). Output: logits for n_seq_max rows, in host memory.
"""

from __future__ import annotations

from tui.core.planning.devices import HOST
from tui.core.planning.gguf_meta import HParams
from tui.core.planning.resolve import KV_BPE, Resolved
from tui.core.planning.result import MiB, DevicePlan

#: element block of the unquantised KV types (the quantised ones use blocks of 32)
_KV_BLOCK = {"f32": 1, "f16": 1, "bf16": 1}


def row_bytes(n: int, t: str) -> int:
    """ggml_row_size of n elements of a KV cache type."""
    blk = _KV_BLOCK.get(t, 32)
    if blk == 1:
        return int(n * KV_BPE[t])
    return (n // 32) * int(KV_BPE[t] * 32)


def add_caches(hp: HParams, r: Resolved, dplans: dict[str, DevicePlan], layer_dev: list[str]) -> None:
    """KV, draft KV and recurrent state on their layers' devices (the host with -nkvo); output on the host."""
    kv_dev = (lambda il: layer_dev[il]) if r.offload_kqv else (lambda il: HOST)
    cells = r.n_ctx_seq * r.n_stream
    hd_k, hd_v = hp.head_dim_k, hp.head_dim_v
    attn_layers = hp.attention_layers()
    vmax = 0 if r.flash_attn else max((hp.n_head_kv[il] for il in attn_layers), default=0)
    for il in attn_layers:
        heads = hp.n_head_kv[il]
        b = cells * (row_bytes(heads * hd_k, r.type_k) + row_bytes((heads if r.flash_attn else vmax) * hd_v, r.type_v))
        dplans[kv_dev(il)].components["kv"] += b / MiB
    if r.mtp:  # draft KV: NextN layers only, -ctkd/-ctvd
        for il in hp.nextn_layers():
            heads = hp.n_head_kv[il]
            b = cells * (row_bytes(heads * hd_k, r.type_k_draft) + row_bytes(heads * hd_v, r.type_v_draft))
            dplans[kv_dev(il)].components["draft_kv"] += b / MiB
    if hp.is_hybrid:
        rows = max(1, r.n_seq_max) * (1 + r.n_rs_seq)
        per_layer = 4 * (hp.n_embd_r + hp.n_embd_s) * rows
        for il in hp.recurrent_layers():
            dplans[kv_dev(il)].components["recurrent"] += per_layer / MiB
    out_bytes = hp.n_vocab * max(r.n_seq_max, 1) * 4  # logits for n_seq_max rows, target and draft
    dplans[HOST].components["output"] = out_bytes * (2 if r.mtp else 1) / MiB
