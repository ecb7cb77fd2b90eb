"""A shape-only GGUF with the real Qwen3.6-35B-A3B dimensions: full tensor table, no tensor data.

The file is sparse: its apparent size is the real ~20 GB (so offsets, mapping ranges and buffer sizes
are the real ones) but only the header (~5 MB, mostly the 248,320-token vocabulary) is on disk.
llama-server loads it (weights read as zeros), which lets the planner be checked against llama.cpp's
own accounting for the model people actually run, on a machine without the model or a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

from tui.core.demo.vocab import CHAT_TEMPLATE, build_vocab


@dataclass(frozen=True)
class ShapeSpec:
    """Qwen3.6-35B-A3B (llama-server.md §6.1); types approximate a Q4_K_M-style quant."""

    arch: str = "qwen35moe"
    n_layer: int = 40
    mtp: bool = True
    full_attn_interval: int = 4
    n_embd: int = 2048
    n_head: int = 16
    n_head_kv: int = 2
    head_dim: int = 256
    n_rot: int = 64
    n_expert: int = 256
    n_expert_used: int = 8
    n_ff_exp: int = 512
    n_ff_shexp: int = 512
    ssm_conv: int = 4
    ssm_head_dim: int = 128
    ssm_k_heads: int = 16
    ssm_v_heads: int = 32
    n_vocab: int = 248320
    n_merges: int = 247587
    ctx_train: int = 262144
    expert_type: QT = QT.Q4_K
    proj_type: QT = QT.Q8_0
    embd_type: QT = QT.Q4_K
    output_type: QT = QT.Q6_K
    name: str = "Qwen3.6-35B-A3B shape-only (no weights)"


QWEN36_35B_A3B = ShapeSpec()


def _tensor_table(s: ShapeSpec) -> list[tuple[str, tuple[int, ...], QT]]:
    """(name, ggml shape ne[0..], type) in file order; ne[0] is the row length."""
    E, V = s.n_embd, s.n_vocab
    hd, nh, nkv = s.head_dim, s.n_head, s.n_head_kv
    key_dim = s.ssm_head_dim * s.ssm_k_heads
    value_dim = s.ssm_head_dim * s.ssm_v_heads
    conv_dim = 2 * key_dim + value_dim
    F32, P, X = QT.F32, s.proj_type, s.expert_type
    out: list[tuple[str, tuple[int, ...], QT]] = [
        ("token_embd.weight", (E, V), s.embd_type),
        ("output_norm.weight", (E,), F32),
        ("output.weight", (E, V), s.output_type),
    ]

    def attn(i: int) -> None:
        out.extend([
            (f"blk.{i}.attn_q.weight", (E, hd * nh * 2), P),
            (f"blk.{i}.attn_k.weight", (E, hd * nkv), P),
            (f"blk.{i}.attn_v.weight", (E, hd * nkv), P),
            (f"blk.{i}.attn_output.weight", (hd * nh, E), P),
            (f"blk.{i}.attn_q_norm.weight", (hd,), F32),
            (f"blk.{i}.attn_k_norm.weight", (hd,), F32),
        ])

    def gdn(i: int) -> None:
        out.extend([
            (f"blk.{i}.attn_qkv.weight", (E, conv_dim), P),
            (f"blk.{i}.attn_gate.weight", (E, value_dim), P),
            (f"blk.{i}.ssm_conv1d.weight", (s.ssm_conv, conv_dim), F32),
            (f"blk.{i}.ssm_dt.bias", (s.ssm_v_heads,), F32),
            (f"blk.{i}.ssm_a", (s.ssm_v_heads,), F32),
        ])
        if s.arch == "qwen3next":
            out.append((f"blk.{i}.ssm_ba.weight", (E, 2 * s.ssm_v_heads), P))
        else:
            out.extend([(f"blk.{i}.ssm_beta.weight", (E, s.ssm_v_heads), P),
                        (f"blk.{i}.ssm_alpha.weight", (E, s.ssm_v_heads), P)])
        out.extend([
            (f"blk.{i}.ssm_norm.weight", (s.ssm_head_dim,), F32),
            (f"blk.{i}.ssm_out.weight", (value_dim, E), P),
        ])

    def moe(i: int) -> None:
        out.extend([
            (f"blk.{i}.ffn_gate_inp.weight", (E, s.n_expert), F32),
            (f"blk.{i}.ffn_gate_exps.weight", (E, s.n_ff_exp, s.n_expert), X),
            (f"blk.{i}.ffn_up_exps.weight", (E, s.n_ff_exp, s.n_expert), X),
            (f"blk.{i}.ffn_down_exps.weight", (s.n_ff_exp, E, s.n_expert), X),
            (f"blk.{i}.ffn_gate_inp_shexp.weight", (E,), F32),
            (f"blk.{i}.ffn_gate_shexp.weight", (E, s.n_ff_shexp), P),
            (f"blk.{i}.ffn_up_shexp.weight", (E, s.n_ff_shexp), P),
            (f"blk.{i}.ffn_down_shexp.weight", (s.n_ff_shexp, E), P),
        ])

    for i in range(s.n_layer):
        out.append((f"blk.{i}.attn_norm.weight", (E,), F32))
        out.append((f"blk.{i}.post_attention_norm.weight", (E,), F32))
        if (i + 1) % s.full_attn_interval == 0:
            attn(i)
        else:
            gdn(i)
        moe(i)
    if s.mtp:
        i = s.n_layer
        out.append((f"blk.{i}.attn_norm.weight", (E,), F32))
        out.append((f"blk.{i}.post_attention_norm.weight", (E,), F32))
        attn(i)
        moe(i)
        out.extend([
            (f"blk.{i}.nextn.eh_proj.weight", (2 * E, E), P),
            (f"blk.{i}.nextn.enorm.weight", (E,), F32),
            (f"blk.{i}.nextn.hnorm.weight", (E,), F32),
            (f"blk.{i}.nextn.shared_head_norm.weight", (E,), F32),
        ])
    return out


def _nbytes(shape: tuple[int, ...], qtype: QT) -> int:
    blck, tsize = gguf.GGML_QUANT_SIZES[qtype]
    n = 1
    for d in shape:
        n *= d
    return n // blck * tsize


def write_shape_model(path: str | Path, spec: ShapeSpec = QWEN36_35B_A3B) -> Path:
    """Write the sparse shape-only GGUF; return its path. Takes about a second, a few MB on disk."""
    a = spec.arch
    n_all = spec.n_layer + (1 if spec.mtp else 0)
    keys: dict[str, object] = {
        f"{a}.context_length": spec.ctx_train, f"{a}.embedding_length": spec.n_embd, f"{a}.block_count": n_all,
        f"{a}.attention.head_count": spec.n_head, f"{a}.attention.head_count_kv": spec.n_head_kv,
        f"{a}.attention.key_length": spec.head_dim, f"{a}.attention.value_length": spec.head_dim,
        f"{a}.attention.layer_norm_rms_epsilon": 1e-6, f"{a}.rope.freq_base": 10000000.0,
        f"{a}.rope.dimension_count": spec.n_rot, f"{a}.rope.dimension_sections": [11, 11, 10, 0],
        f"{a}.ssm.conv_kernel": spec.ssm_conv, f"{a}.ssm.state_size": spec.ssm_head_dim,
        f"{a}.ssm.group_count": spec.ssm_k_heads, f"{a}.ssm.time_step_rank": spec.ssm_v_heads,
        f"{a}.ssm.inner_size": spec.ssm_head_dim * spec.ssm_v_heads,
        f"{a}.full_attention_interval": spec.full_attn_interval, f"{a}.expert_count": spec.n_expert,
        f"{a}.expert_used_count": spec.n_expert_used, f"{a}.expert_feed_forward_length": spec.n_ff_exp,
        f"{a}.expert_shared_feed_forward_length": spec.n_ff_shexp,
    }
    if spec.mtp:
        keys[f"{a}.nextn_predict_layers"] = 1
    return write_sparse_gguf(path, a, spec.name, keys, _tensor_table(spec), spec.n_vocab, spec.n_merges)


def write_sparse_gguf(path: str | Path, arch: str, name: str, keys: dict[str, object],
                      tensors: list[tuple[str, tuple[int, ...], QT]], n_vocab: int, n_merges: int = 0) -> Path:
    """A GGUF with these keys (ints as u32, floats as f32, lists as arrays, bools, strings), a byte-level
    BPE vocabulary padded to `n_vocab` tokens, and this tensor table, with no data blocks on disk."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    w = gguf.GGUFWriter(str(tmp), arch)
    w.add_string("general.name", name)
    w.add_string("general.type", "model")
    w.add_uint32("general.file_type", 15)  # MOSTLY_Q4_K_M
    w.add_uint32("general.quantization_version", 2)
    for k, v in keys.items():
        if isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        elif isinstance(v, str):
            w.add_string(k, v)
        else:
            w.add_array(k, list(v))  # type: ignore[call-overload]
    vocab = build_vocab(200)
    base = len(vocab.tokens)
    tokens = vocab.tokens + [f"<|shape_{i}|>" for i in range(n_vocab - base)]
    types = vocab.types + [1] * (n_vocab - base)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen35")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    # a real Qwen3.6 GGUF carries ~247k merges: keep the header as large as the real one
    merges = vocab.merges + [f"S{i} x{i}" for i in range(max(0, n_merges - len(vocab.merges)))]
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", vocab.special["<|im_end|>"])
    w.add_uint32("tokenizer.ggml.bos_token_id", vocab.special["<|endoftext|>"])
    w.add_uint32("tokenizer.ggml.padding_token_id", vocab.special["<|endoftext|>"])
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_string("tokenizer.chat_template", CHAT_TEMPLATE)
    align = gguf.GGUF_DEFAULT_ALIGNMENT
    data_size = 0
    for tname, shape, qtype in tensors:
        nbytes = _nbytes(shape, qtype)
        # GGUFWriter takes the numpy-order shape (reversed ggml ne)
        w.add_tensor_info(tname, tuple(reversed(shape)), np.float32, nbytes, raw_dtype=qtype)
        data_size += (nbytes + align - 1) // align * align
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header = tmp.stat().st_size
    data_start = (header + align - 1) // align * align
    os.truncate(tmp, data_start + data_size)  # sparse: no data blocks written
    tmp.replace(path)
    return path


def main() -> int:
    """`python -m tests.helpers.shapemodel OUT.gguf`."""
    import sys

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "qwen36-35b-a3b-shape.gguf")
    p = write_shape_model(out)
    st = p.stat()
    print(f"{p}: apparent {st.st_size / 2**30:.2f} GiB, on disk {st.st_blocks * 512 / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
