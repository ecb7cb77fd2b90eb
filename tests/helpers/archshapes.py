"""Shape-only GGUFs (header + sparse data) of real models of several architectures, for the planner.

Each builder returns (keys, tensor table) with the tensor names and shapes that the architecture's
`load_arch_tensors` (llama.cpp b11434 src/models/*.cpp) creates. Dimensions follow the published
configs of the named models (from their HF config.json, as recalled; none is a copy of a real file).
llama-server loads them on the CPU backend with `-nr` (weights read as zeros, nothing read from disk),
so the planner can be checked against the real allocator on architectures this machine cannot run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from gguf import GGMLQuantizationType as QT

from tests.helpers.shapemodel import QWEN36_35B_A3B, write_shape_model, write_sparse_gguf

Table = list[tuple[str, tuple[int, ...], QT]]
F32, Q8, Q4K, Q6K = QT.F32, QT.Q8_0, QT.Q4_K, QT.Q6_K


def _gemma3(n_layer: int, E: int, nh: int, nkv: int, hd: int, ff: int, V: int, swa: int,
            qat: bool = False) -> tuple[dict[str, object], Table, int]:
    """Gemma 3: tied output, sliding window on 5 of every 6 layers. `qat`: every matrix Q4_0 (as Google's
    QAT q4_0 releases), which the CPU backend repacks."""
    a = "gemma3"
    keys: dict[str, object] = {
        f"{a}.context_length": 131072, f"{a}.embedding_length": E, f"{a}.block_count": n_layer,
        f"{a}.feed_forward_length": ff, f"{a}.attention.head_count": nh, f"{a}.attention.head_count_kv": nkv,
        f"{a}.attention.key_length": hd, f"{a}.attention.value_length": hd,
        f"{a}.attention.layer_norm_rms_epsilon": 1e-6, f"{a}.attention.sliding_window": swa,
        f"{a}.rope.freq_base": 1000000.0,
    }
    t: Table = [("token_embd.weight", (E, V), Q6K), ("output_norm.weight", (E,), F32)]  # tied output
    for i in range(n_layer):
        t += [(f"blk.{i}.attn_norm.weight", (E,), F32), (f"blk.{i}.attn_q.weight", (E, hd * nh), Q8),
              (f"blk.{i}.attn_k.weight", (E, hd * nkv), Q8), (f"blk.{i}.attn_v.weight", (E, hd * nkv), Q8),
              (f"blk.{i}.attn_output.weight", (hd * nh, E), Q8), (f"blk.{i}.post_attention_norm.weight", (E,), F32),
              (f"blk.{i}.attn_k_norm.weight", (hd,), F32), (f"blk.{i}.attn_q_norm.weight", (hd,), F32),
              (f"blk.{i}.ffn_norm.weight", (E,), F32), (f"blk.{i}.ffn_gate.weight", (E, ff), Q4K),
              (f"blk.{i}.ffn_up.weight", (E, ff), Q4K), (f"blk.{i}.ffn_down.weight", (ff, E), Q6K),
              (f"blk.{i}.post_ffw_norm.weight", (E,), F32)]
    if qat:
        t = [(n, sh, Q8 if n.startswith("token_embd") else QT.Q4_0 if len(sh) == 2 else q) for n, sh, q in t]
    return keys, t, V


def _qwen3(n_layer: int, E: int, nh: int, nkv: int, hd: int, ff: int, V: int) -> tuple[dict[str, object], Table, int]:
    """Qwen3 dense: plain GQA attention with q/k norms (no MTP; the planner's plain-transformer path)."""
    a = "qwen3"
    keys: dict[str, object] = {
        f"{a}.context_length": 40960, f"{a}.embedding_length": E, f"{a}.block_count": n_layer,
        f"{a}.feed_forward_length": ff, f"{a}.attention.head_count": nh, f"{a}.attention.head_count_kv": nkv,
        f"{a}.attention.key_length": hd, f"{a}.attention.value_length": hd,
        f"{a}.attention.layer_norm_rms_epsilon": 1e-6, f"{a}.rope.freq_base": 1000000.0,
    }
    t: Table = [("token_embd.weight", (E, V), Q4K), ("output_norm.weight", (E,), F32), ("output.weight", (E, V), Q6K)]
    for i in range(n_layer):
        t += [(f"blk.{i}.attn_norm.weight", (E,), F32), (f"blk.{i}.attn_q.weight", (E, hd * nh), Q8),
              (f"blk.{i}.attn_k.weight", (E, hd * nkv), Q8), (f"blk.{i}.attn_v.weight", (E, hd * nkv), Q8),
              (f"blk.{i}.attn_output.weight", (hd * nh, E), Q8), (f"blk.{i}.attn_k_norm.weight", (hd,), F32),
              (f"blk.{i}.attn_q_norm.weight", (hd,), F32), (f"blk.{i}.ffn_norm.weight", (E,), F32),
              *_dense_ffn(i, E, ff)]
    return keys, t, V


def _moe(i: int, E: int, n_exp: int, ff_exp: int, ff_sh: int, probs_b: bool = True) -> Table:
    t: Table = [(f"blk.{i}.ffn_gate_inp.weight", (E, n_exp), F32)]
    if probs_b:
        t.append((f"blk.{i}.exp_probs_b.bias", (n_exp,), F32))
    t += [(f"blk.{i}.ffn_gate_exps.weight", (E, ff_exp, n_exp), Q4K), (f"blk.{i}.ffn_up_exps.weight", (E, ff_exp, n_exp), Q4K),
          (f"blk.{i}.ffn_down_exps.weight", (ff_exp, E, n_exp), Q4K)]
    if ff_sh:
        t += [(f"blk.{i}.ffn_gate_shexp.weight", (E, ff_sh), Q8), (f"blk.{i}.ffn_up_shexp.weight", (E, ff_sh), Q8),
              (f"blk.{i}.ffn_down_shexp.weight", (ff_sh, E), Q8)]
    return t


def _dense_ffn(i: int, E: int, ff: int) -> Table:
    return [(f"blk.{i}.ffn_gate.weight", (E, ff), Q4K), (f"blk.{i}.ffn_up.weight", (E, ff), Q4K),
            (f"blk.{i}.ffn_down.weight", (ff, E), Q6K)]


def _nextn(i: int, E: int) -> Table:
    return [(f"blk.{i}.nextn.eh_proj.weight", (2 * E, E), Q8), (f"blk.{i}.nextn.enorm.weight", (E,), F32),
            (f"blk.{i}.nextn.hnorm.weight", (E,), F32), (f"blk.{i}.nextn.shared_head_norm.weight", (E,), F32)]


def _glm4moe(n_layer: int, E: int, nh: int, nkv: int, hd: int, ff: int, n_exp: int, n_used: int, ff_exp: int,
             V: int) -> tuple[dict[str, object], Table, int]:
    """GLM-4.5-Air family: GQA attention (no MLA), one dense lead layer, MoE with one shared expert, MTP."""
    a = "glm4moe"
    keys: dict[str, object] = {
        f"{a}.context_length": 131072, f"{a}.embedding_length": E, f"{a}.block_count": n_layer + 1,
        f"{a}.nextn_predict_layers": 1, f"{a}.feed_forward_length": ff, f"{a}.attention.head_count": nh,
        f"{a}.attention.head_count_kv": nkv, f"{a}.attention.key_length": hd, f"{a}.attention.value_length": hd,
        f"{a}.attention.layer_norm_rms_epsilon": 1e-5, f"{a}.rope.dimension_count": hd // 2,
        f"{a}.rope.freq_base": 1000000.0, f"{a}.expert_count": n_exp, f"{a}.expert_used_count": n_used,
        f"{a}.expert_feed_forward_length": ff_exp, f"{a}.expert_shared_count": 1,
        f"{a}.leading_dense_block_count": 1, f"{a}.expert_weights_scale": 1.0, f"{a}.expert_weights_norm": True,
    }
    t: Table = [("token_embd.weight", (E, V), Q4K), ("output_norm.weight", (E,), F32), ("output.weight", (E, V), Q6K)]
    for i in range(n_layer + 1):
        t += [(f"blk.{i}.attn_norm.weight", (E,), F32), (f"blk.{i}.attn_q.weight", (E, hd * nh), Q8),
              (f"blk.{i}.attn_k.weight", (E, hd * nkv), Q8), (f"blk.{i}.attn_v.weight", (E, hd * nkv), Q8),
              (f"blk.{i}.attn_q.bias", (hd * nh,), F32), (f"blk.{i}.attn_k.bias", (hd * nkv,), F32),
              (f"blk.{i}.attn_v.bias", (hd * nkv,), F32),
              (f"blk.{i}.attn_output.weight", (hd * nh, E), Q8), (f"blk.{i}.post_attention_norm.weight", (E,), F32)]
        t += _dense_ffn(i, E, ff) if i == 0 else _moe(i, E, n_exp, ff_exp, ff_exp)
        if i == n_layer:
            t += _nextn(i, E)
    return keys, t, V


def _deepseek2(n_layer: int, mtp: bool, E: int, nh: int, q_lora: int, kv_lora: int, rope: int, nope: int, v_hd: int,
               ff: int, n_exp: int, n_used: int, ff_exp: int, n_shared: int, V: int) -> tuple[dict[str, object], Table, int]:
    """DeepSeek-V2 family with MLA as converted today: key_length = kv_lora_rank + rope, one KV head, no V."""
    a = "deepseek2"
    n_all = n_layer + (1 if mtp else 0)
    k_mla = nope + rope
    keys: dict[str, object] = {
        f"{a}.context_length": 163840, f"{a}.embedding_length": E, f"{a}.block_count": n_all,
        f"{a}.feed_forward_length": ff, f"{a}.attention.head_count": nh, f"{a}.attention.head_count_kv": 1,
        f"{a}.attention.key_length": kv_lora + rope, f"{a}.attention.value_length": kv_lora,
        f"{a}.attention.key_length_mla": k_mla, f"{a}.attention.value_length_mla": v_hd,
        f"{a}.attention.kv_lora_rank": kv_lora, f"{a}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{a}.rope.dimension_count": rope, f"{a}.rope.freq_base": 10000.0, f"{a}.expert_count": n_exp,
        f"{a}.expert_used_count": n_used, f"{a}.expert_feed_forward_length": ff_exp,
        f"{a}.expert_shared_count": n_shared, f"{a}.leading_dense_block_count": 1, f"{a}.expert_weights_scale": 1.0,
    }
    if q_lora:
        keys[f"{a}.attention.q_lora_rank"] = q_lora
    if mtp:
        keys[f"{a}.nextn_predict_layers"] = 1
    t: Table = [("token_embd.weight", (E, V), Q4K), ("output_norm.weight", (E,), F32), ("output.weight", (E, V), Q6K)]
    for i in range(n_all):
        t.append((f"blk.{i}.attn_norm.weight", (E,), F32))
        if q_lora:
            t += [(f"blk.{i}.attn_q_a_norm.weight", (q_lora,), F32), (f"blk.{i}.attn_q_a.weight", (E, q_lora), Q8),
                  (f"blk.{i}.attn_q_b.weight", (q_lora, nh * k_mla), Q8)]
        else:
            t.append((f"blk.{i}.attn_q.weight", (E, nh * k_mla), Q8))
        t += [(f"blk.{i}.attn_kv_a_norm.weight", (kv_lora,), F32), (f"blk.{i}.attn_kv_a_mqa.weight", (E, kv_lora + rope), Q8),
              (f"blk.{i}.attn_k_b.weight", (nope, kv_lora, nh), Q8), (f"blk.{i}.attn_v_b.weight", (kv_lora, v_hd, nh), Q8),
              (f"blk.{i}.attn_output.weight", (nh * v_hd, E), Q8), (f"blk.{i}.ffn_norm.weight", (E,), F32)]
        t += _dense_ffn(i, E, ff) if i == 0 else _moe(i, E, n_exp, ff_exp, ff_exp * n_shared)
        if i >= n_layer:
            t += _nextn(i, E)
    return keys, t, V


def _mimo2(n_layer: int, E: int, nh: int, kv_full: int, kv_swa: int, hd_k: int, hd_v: int, swa: int, ff: int,
           n_exp: int, n_used: int, ff_exp: int, V: int) -> tuple[dict[str, object], Table, int]:
    """MiMo-V2-Flash family: one full-attention layer in 6 (the first dense), the rest sliding-window with
    more KV heads, K and V heads of different widths, MoE, one MTP block (sliding-window)."""
    a = "mimo2"
    n_all = n_layer + 1
    is_swa = [il < n_layer and il % 6 != 0 or il == n_layer for il in range(n_all)]
    kvh = [kv_swa if w else kv_full for w in is_swa]
    keys: dict[str, object] = {
        f"{a}.context_length": 262144, f"{a}.embedding_length": E, f"{a}.block_count": n_all,
        f"{a}.nextn_predict_layers": 1, f"{a}.feed_forward_length": [ff] + [0] * (n_all - 2) + [ff],
        f"{a}.attention.head_count": nh, f"{a}.attention.head_count_kv": kvh,
        f"{a}.attention.key_length": hd_k, f"{a}.attention.value_length": hd_v,
        f"{a}.attention.layer_norm_rms_epsilon": 1e-5, f"{a}.attention.sliding_window": swa,
        f"{a}.attention.sliding_window_pattern": [int(w) for w in is_swa], f"{a}.rope.dimension_count": 64,
        f"{a}.rope.freq_base": 5000000.0, f"{a}.expert_count": n_exp, f"{a}.expert_used_count": n_used,
        f"{a}.expert_feed_forward_length": ff_exp,
    }
    t: Table = [("token_embd.weight", (E, V), Q4K), ("output_norm.weight", (E,), F32), ("output.weight", (E, V), Q6K)]
    for i in range(n_all):
        # fused QKV (mimo2's MTP graph requires it)
        t += [(f"blk.{i}.attn_qkv.weight", (E, hd_k * nh + (hd_k + hd_v) * kvh[i]), Q8),
              (f"blk.{i}.attn_output.weight", (hd_v * nh, E), Q8),
              (f"blk.{i}.attn_norm.weight", (E,), F32), (f"blk.{i}.ffn_norm.weight", (E,), F32)]
        t += _dense_ffn(i, E, ff) if i in (0, n_layer) else _moe(i, E, n_exp, ff_exp, 0)  # the MTP block is dense
        if i == n_layer:
            t += _nextn(i, E)
    return keys, t, V


def _nemotron_h_moe(pattern: str, E: int, nh: int, nkv: int, hd: int, d_inner: int, d_state: int, n_group: int,
                    n_ssm_head: int, n_exp: int, n_used: int, ff_exp: int, ff_sh: int, V: int) -> tuple[dict[str, object], Table, int]:
    """Nemotron-H MoE: Mamba-2 (M), attention (*) and MoE (E) blocks; no MTP block (trunk only)."""
    a = "nemotron_h_moe"
    n = len(pattern)
    conv_ch = d_inner + 2 * n_group * d_state
    keys: dict[str, object] = {
        f"{a}.context_length": 262144, f"{a}.embedding_length": E, f"{a}.block_count": n,
        f"{a}.feed_forward_length": [ff_exp if c == "E" else 0 for c in pattern],
        f"{a}.attention.head_count": nh,
        f"{a}.attention.head_count_kv": [nkv if c == "*" else 0 for c in pattern],
        f"{a}.attention.key_length": hd, f"{a}.attention.value_length": hd,
        f"{a}.attention.layer_norm_epsilon": 1e-5, f"{a}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{a}.ssm.conv_kernel": 4, f"{a}.ssm.inner_size": d_inner, f"{a}.ssm.state_size": d_state,
        f"{a}.ssm.time_step_rank": n_ssm_head, f"{a}.ssm.group_count": n_group, f"{a}.expert_count": n_exp,
        f"{a}.expert_used_count": n_used, f"{a}.expert_feed_forward_length": ff_exp,
        f"{a}.expert_shared_feed_forward_length": ff_sh, f"{a}.rope.freq_base": 10000.0,
    }
    t: Table = [("token_embd.weight", (E, V), Q4K), ("output_norm.weight", (E,), F32), ("output.weight", (E, V), Q6K)]
    for i, c in enumerate(pattern):
        t.append((f"blk.{i}.attn_norm.weight", (E,), F32))
        if c == "M":
            t += [(f"blk.{i}.ssm_in.weight", (E, 2 * d_inner + 2 * n_group * d_state + n_ssm_head), Q8),
                  (f"blk.{i}.ssm_conv1d.weight", (4, conv_ch), F32), (f"blk.{i}.ssm_conv1d.bias", (conv_ch,), F32),
                  (f"blk.{i}.ssm_dt.bias", (n_ssm_head,), F32), (f"blk.{i}.ssm_a", (1, n_ssm_head), F32),
                  (f"blk.{i}.ssm_d", (1, n_ssm_head), F32), (f"blk.{i}.ssm_norm.weight", (d_inner // n_group, n_group), F32),
                  (f"blk.{i}.ssm_out.weight", (d_inner, E), Q8)]
        elif c == "*":
            t += [(f"blk.{i}.attn_q.weight", (E, hd * nh), Q8), (f"blk.{i}.attn_k.weight", (E, hd * nkv), Q8),
                  (f"blk.{i}.attn_v.weight", (E, hd * nkv), Q8), (f"blk.{i}.attn_output.weight", (hd * nh, E), Q8)]
        else:
            t += [(f"blk.{i}.ffn_gate_inp.weight", (E, n_exp), F32), (f"blk.{i}.exp_probs_b.bias", (n_exp,), F32),
                  (f"blk.{i}.ffn_down_exps.weight", (ff_exp, E, n_exp), Q8), (f"blk.{i}.ffn_up_exps.weight", (E, ff_exp, n_exp), Q8),
                  (f"blk.{i}.ffn_down_shexp.weight", (ff_sh, E), Q8), (f"blk.{i}.ffn_up_shexp.weight", (E, ff_sh), Q8)]
    return keys, t, V


def _qwen(spec_kw: dict[str, object]) -> Callable[[Path], Path]:
    spec = replace(QWEN36_35B_A3B, **spec_kw)  # type: ignore[arg-type]
    return lambda p: write_shape_model(p, spec)


def _sparse(name: str, built: tuple[dict[str, object], Table, int]) -> Callable[[Path], Path]:
    keys, table, n_vocab = built
    arch = next(iter(keys)).split(".")[0]
    # k-quants need rows of 256: narrower rows (Gemma-3-1B's 1152) fall back to Q8_0, as quantizers do
    table = [(n, sh, q if sh[0] % 256 == 0 or q in (F32, Q8) else Q8) for n, sh, q in table]
    return lambda p: write_sparse_gguf(p, arch, f"{name} shape-only (no weights)", keys, table, n_vocab)


#: name -> writer(path); the planner's compute constants were never fitted on any of these shapes.
ARCH_SHAPES: dict[str, Callable[[Path], Path]] = {
    "gemma3-4b": _sparse("Gemma-3-4B", _gemma3(34, 2560, 8, 4, 256, 10240, 262144, 1024)),
    "gemma3-1b-qat": _sparse("Gemma-3-1B QAT Q4_0", _gemma3(26, 1152, 4, 1, 256, 6912, 262144, 512, qat=True)),
    "gemma3-1b": _sparse("Gemma-3-1B", _gemma3(26, 1152, 4, 1, 256, 6912, 262144, 512)),
    "glm45-air": _sparse("GLM-4.5-Air", _glm4moe(46, 4096, 96, 8, 128, 10944, 128, 8, 1408, 151552)),
    "deepseek-v2-lite": _sparse("DeepSeek-V2-Lite", _deepseek2(27, False, 2048, 16, 0, 512, 64, 128, 128, 10944, 64, 6, 1408, 2, 102400)),
    "glm47-flash": _sparse("GLM-4.7-Flash-like (deepseek2 MLA + MTP)",
                           _deepseek2(47, True, 2048, 20, 768, 512, 64, 192, 256, 10240, 64, 4, 1536, 1, 154880)),
    # reduced: the real expert counts (256, 160, 160) cut to 32 so that mapping the file stays quick here;
    # every other dimension is the real one (the expert count only sizes weights and the router)
    "mimo-v2-flash-r32": _sparse("MiMo-V2-Flash (32 experts)", _mimo2(48, 4096, 64, 4, 8, 192, 128, 128, 16384, 32, 8, 2048, 152576)),
    "gemma3-12b": _sparse("Gemma-3-12B", _gemma3(48, 3840, 16, 8, 256, 15360, 262144, 1024)),
    "glm46-r32": _sparse("GLM-4.6 (32 experts)", _glm4moe(92, 5120, 96, 8, 128, 12288, 32, 8, 1536, 151552)),
    "deepseek-v2-r32": _sparse("DeepSeek-V2 (32 experts)",
                               _deepseek2(60, False, 5120, 128, 1536, 512, 64, 128, 128, 12288, 32, 6, 1536, 2, 102400)),
    # Nemotron-3-Nano-30B-A3B-like layout (52 blocks: 23 Mamba-2, 23 MoE, 6 attention), 32 of 128 experts
    "nemotron-h-moe-r32": _sparse("Nemotron-H MoE (32 experts)", _nemotron_h_moe(
        "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEMEM*E"[:52], 2688, 32, 2, 128, 4096, 128, 8, 64, 32, 6, 1856, 3712, 131072)),
    "qwen3-8b": _sparse("Qwen3-8B", _qwen3(36, 4096, 32, 8, 128, 12288, 151936)),
    "qwen3-next-80b": _qwen({"arch": "qwen3next", "n_layer": 48, "n_expert": 512, "n_expert_used": 10, "n_vocab": 151936,
                             "n_merges": 151387, "name": "Qwen3-Next-80B-A3B shape-only (no weights)"}),
}


def write_arch_shape(name: str, path: str | Path) -> Path:
    """Write the named shape-only GGUF (see ARCH_SHAPES)."""
    return ARCH_SHAPES[name](Path(path))
