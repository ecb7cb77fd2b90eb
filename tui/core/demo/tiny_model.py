"""Tiny, deterministic Qwen3.5-style GGUFs with an MTP (NextN) head, for tests, demo and benchmarks.

The "bigram" weights make the trunk predict `next = sigma(current)` for a fixed cycle `sigma` over
printable tokens, and the MTP block predict the same token, so with greedy sampling every draft is
accepted. `mtp_agree < 1` gives the MTP block its own head that agrees with `sigma` on that fraction
of tokens, which sets the acceptance rate (per draft position about F, F^2, F^3).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

from tui.core.demo.vocab import CHAT_TEMPLATE, Vocab, build_vocab


@dataclass(frozen=True)
class TinySpec:
    """Shape and behaviour of a generated model; defaults give a ~1.7 MB file."""

    arch: str = "qwen35"  # or "qwen35moe"
    mode: str = "bigram"  # or "random" (acceptance ~0)
    mtp: bool = True
    mtp_agree: float = 1.0
    layer_scale: float = 0.01
    n_layer: int = 4
    full_attn_interval: int = 2
    n_embd: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32
    n_rot: int = 16
    n_ff: int = 256
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 64
    ssm_head_dim: int = 16
    ssm_k_heads: int = 2
    ssm_v_heads: int = 4
    n_merges: int = 200
    ctx: int = 4096
    dtype: str = "f16"  # f32 | f16 | q8_0
    seed: int = 1234
    name: str | None = None


#: Named variants used by the demo and the tests.
PRESETS: dict[str, TinySpec] = {
    "tiny-mtp": TinySpec(),
    "tiny-nomtp": TinySpec(mtp=False),
    "tiny-mtp-a50": TinySpec(mtp_agree=0.5),
    "tiny-mtp-random": TinySpec(mode="random"),
    "tiny-mtp-q8_0": TinySpec(dtype="q8_0"),
    "tiny-moe-mtp": TinySpec(arch="qwen35moe"),
    "small-mtp-q8_0": TinySpec(
        n_embd=512, n_head=8, head_dim=64, n_head_kv=2, n_rot=32, n_ff=1536,
        ssm_head_dim=64, ssm_k_heads=4, ssm_v_heads=8, n_layer=6, dtype="q8_0",
    ),
}


class _Writer:
    """Adds tensors in numpy order (reversed ggml `ne`), converting to the chosen matrix type."""

    def __init__(self, w: gguf.GGUFWriter, dtype: str) -> None:
        self.w = w
        self.mat = {"f32": QT.F32, "f16": QT.F16, "q8_0": QT.Q8_0}[dtype]
        self.nbytes = 0

    def add(self, name: str, arr: np.ndarray, force_f32: bool = False) -> None:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if force_f32 or arr.ndim == 1 or self.mat == QT.F32:
            self.w.add_tensor(name, arr)
            self.nbytes += arr.nbytes
        elif self.mat == QT.F16 or arr.shape[-1] % 32 != 0:
            a16 = arr.astype(np.float16)
            self.w.add_tensor(name, a16)
            self.nbytes += a16.nbytes
        else:
            q = gguf.quants.quantize(arr, QT.Q8_0)
            self.w.add_tensor(name, q, raw_dtype=QT.Q8_0)
            self.nbytes += q.nbytes


def _write_metadata(w: gguf.GGUFWriter, s: TinySpec, vocab: Vocab) -> None:
    arch = s.arch
    n_all = s.n_layer + (1 if s.mtp else 0)
    w.add_string("general.name", s.name or f"tiny-{arch}{'-mtp' if s.mtp else ''}-{s.mode}")
    w.add_string("general.type", "model")
    w.add_uint32("general.file_type", {"f32": 0, "f16": 1, "q8_0": 7}[s.dtype])
    w.add_uint32("general.quantization_version", 2)

    def k(key: str) -> str:
        return f"{arch}.{key}"

    w.add_uint32(k("context_length"), s.ctx)
    w.add_uint32(k("embedding_length"), s.n_embd)
    w.add_uint32(k("block_count"), n_all)
    if s.mtp:
        w.add_uint32(k("nextn_predict_layers"), 1)
    w.add_uint32(k("feed_forward_length"), s.n_ff)
    w.add_uint32(k("attention.head_count"), s.n_head)
    w.add_uint32(k("attention.head_count_kv"), s.n_head_kv)
    w.add_uint32(k("attention.key_length"), s.head_dim)
    w.add_uint32(k("attention.value_length"), s.head_dim)
    w.add_float32(k("attention.layer_norm_rms_epsilon"), 1e-6)
    w.add_float32(k("rope.freq_base"), 10000000.0)
    w.add_uint32(k("rope.dimension_count"), s.n_rot)
    half = s.n_rot // 2
    s0 = (half + 2) // 3
    s1 = (half - s0 + 1) // 2
    w.add_array(k("rope.dimension_sections"), [s0, s1, half - s0 - s1, 0])  # must sum to n_rot/2
    w.add_uint32(k("ssm.conv_kernel"), 4)
    w.add_uint32(k("ssm.state_size"), s.ssm_head_dim)
    w.add_uint32(k("ssm.group_count"), s.ssm_k_heads)
    w.add_uint32(k("ssm.time_step_rank"), s.ssm_v_heads)
    w.add_uint32(k("ssm.inner_size"), s.ssm_head_dim * s.ssm_v_heads)
    w.add_uint32(k("full_attention_interval"), s.full_attn_interval)
    if arch == "qwen35moe":
        w.add_uint32(k("expert_count"), s.n_expert)
        w.add_uint32(k("expert_used_count"), s.n_expert_used)
        w.add_uint32(k("expert_feed_forward_length"), s.n_ff_exp)
        w.add_uint32(k("expert_shared_feed_forward_length"), s.n_ff)

    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen35")
    w.add_array("tokenizer.ggml.tokens", vocab.tokens)
    w.add_array("tokenizer.ggml.token_type", vocab.types)
    w.add_array("tokenizer.ggml.merges", vocab.merges)
    w.add_uint32("tokenizer.ggml.eos_token_id", vocab.special["<|im_end|>"])
    w.add_uint32("tokenizer.ggml.bos_token_id", vocab.special["<|endoftext|>"])
    w.add_uint32("tokenizer.ggml.padding_token_id", vocab.special["<|endoftext|>"])
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_string("tokenizer.chat_template", CHAT_TEMPLATE)


def write_tiny_model(path: str | Path, spec: TinySpec = TinySpec()) -> Path:
    """Write the GGUF described by `spec` to `path` (byte-for-byte reproducible); return the path."""
    if spec.arch not in ("qwen35", "qwen35moe"):
        raise ValueError(f"arch: {spec.arch!r} is not one of qwen35, qwen35moe")
    if spec.dtype not in ("f32", "f16", "q8_0"):
        raise ValueError(f"dtype: {spec.dtype!r} is not one of f32, f16, q8_0")
    if not 0.0 <= spec.mtp_agree <= 1.0:
        raise ValueError(f"mtp_agree: {spec.mtp_agree} is outside 0..1")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    moe = spec.arch == "qwen35moe"
    bigram = spec.mode == "bigram"
    E = spec.n_embd
    vocab = build_vocab(spec.n_merges)
    V = len(vocab.tokens)

    tmp = path.with_name(path.name + ".part")
    w = gguf.GGUFWriter(str(tmp), spec.arch)
    _write_metadata(w, spec, vocab)
    t = _Writer(w, spec.dtype)

    def rnd(*shape: int, std: float | None = None) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32) * (std if std is not None else 1.0 / np.sqrt(shape[-1]))

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    out_scale = spec.layer_scale if bigram else 1.0
    emb = rng.standard_normal((V, E)).astype(np.float32)
    printable = [i for i, r in enumerate(vocab.raw) if r is not None and all(0x20 <= c < 0x7F for c in r)]

    def head_for(sigma: np.ndarray) -> np.ndarray:
        W = np.zeros((V, E), dtype=np.float32)
        en = emb / np.sqrt((emb**2).mean(axis=1, keepdims=True))
        for tok in range(V):
            W[sigma[tok]] += en[tok]
        return W * (16.0 / E)

    sigma = np.empty(V, dtype=np.int64)
    if bigram:
        order = rng.permutation(printable)
        for i, tok in enumerate(order):
            sigma[tok] = order[(i + 1) % len(order)]
        pset = set(printable)
        for tok in range(V):
            if tok not in pset:
                sigma[tok] = rng.choice(printable)
        out_w = head_for(sigma)
    else:
        out_w = rnd(V, E)

    t.add("token_embd.weight", emb)
    t.add("output_norm.weight", ones(E))
    t.add("output.weight", out_w)

    hd, nh, nkv = spec.head_dim, spec.n_head, spec.n_head_kv
    key_dim = spec.ssm_head_dim * spec.ssm_k_heads
    value_dim = spec.ssm_head_dim * spec.ssm_v_heads
    conv_dim = key_dim * 2 + value_dim

    def attn_block(i: int) -> None:
        t.add(f"blk.{i}.attn_q.weight", rnd(hd * nh * 2, E))  # query plus output gate
        t.add(f"blk.{i}.attn_k.weight", rnd(hd * nkv, E))
        t.add(f"blk.{i}.attn_v.weight", rnd(hd * nkv, E))
        t.add(f"blk.{i}.attn_output.weight", rnd(E, hd * nh) * out_scale)
        t.add(f"blk.{i}.attn_q_norm.weight", ones(hd))
        t.add(f"blk.{i}.attn_k_norm.weight", ones(hd))

    def gdn_block(i: int) -> None:
        t.add(f"blk.{i}.attn_qkv.weight", rnd(conv_dim, E))
        t.add(f"blk.{i}.attn_gate.weight", rnd(value_dim, E))
        t.add(f"blk.{i}.ssm_conv1d.weight", rnd(conv_dim, 4, std=0.5), force_f32=True)
        t.add(f"blk.{i}.ssm_dt.bias", rng.standard_normal(spec.ssm_v_heads).astype(np.float32))
        t.add(f"blk.{i}.ssm_a", -np.exp(rng.standard_normal(spec.ssm_v_heads).astype(np.float32) * 0.5))
        t.add(f"blk.{i}.ssm_beta.weight", rnd(spec.ssm_v_heads, E))
        t.add(f"blk.{i}.ssm_alpha.weight", rnd(spec.ssm_v_heads, E))
        t.add(f"blk.{i}.ssm_norm.weight", ones(spec.ssm_head_dim))
        t.add(f"blk.{i}.ssm_out.weight", rnd(E, value_dim) * out_scale)

    def ffn_block(i: int) -> None:
        if not moe:
            t.add(f"blk.{i}.ffn_gate.weight", rnd(spec.n_ff, E))
            t.add(f"blk.{i}.ffn_up.weight", rnd(spec.n_ff, E))
            t.add(f"blk.{i}.ffn_down.weight", rnd(E, spec.n_ff) * out_scale)
            return
        X, F = spec.n_expert, spec.n_ff_exp
        t.add(f"blk.{i}.ffn_gate_inp.weight", rnd(X, E), force_f32=True)
        t.add(f"blk.{i}.ffn_gate_exps.weight", rnd(X, F, E))
        t.add(f"blk.{i}.ffn_up_exps.weight", rnd(X, F, E))
        t.add(f"blk.{i}.ffn_down_exps.weight", rnd(X, E, F) * out_scale)
        t.add(f"blk.{i}.ffn_gate_inp_shexp.weight", rnd(E))
        t.add(f"blk.{i}.ffn_gate_shexp.weight", rnd(spec.n_ff, E))
        t.add(f"blk.{i}.ffn_up_shexp.weight", rnd(spec.n_ff, E))
        t.add(f"blk.{i}.ffn_down_shexp.weight", rnd(E, spec.n_ff) * out_scale)

    for i in range(spec.n_layer):
        t.add(f"blk.{i}.attn_norm.weight", ones(E))
        t.add(f"blk.{i}.post_attention_norm.weight", ones(E))
        if (i + 1) % spec.full_attn_interval == 0:
            attn_block(i)
        else:
            gdn_block(i)
        ffn_block(i)

    if spec.mtp:
        i = spec.n_layer
        t.add(f"blk.{i}.attn_norm.weight", ones(E))
        t.add(f"blk.{i}.post_attention_norm.weight", ones(E))
        attn_block(i)
        ffn_block(i)
        if bigram:
            eh = np.zeros((E, 2 * E), dtype=np.float32)
            eh[:, :E] = np.eye(E, dtype=np.float32)  # keep the embedding half of [enorm(e), hnorm(h)]
        else:
            eh = rnd(E, 2 * E)
        t.add(f"blk.{i}.nextn.eh_proj.weight", eh)
        t.add(f"blk.{i}.nextn.enorm.weight", ones(E))
        t.add(f"blk.{i}.nextn.hnorm.weight", ones(E))
        if bigram and spec.mtp_agree < 1.0:
            sigma2 = sigma.copy()
            for tok in range(V):
                if rng.random() >= spec.mtp_agree:
                    alt = rng.choice(printable)
                    while alt == sigma[tok]:
                        alt = rng.choice(printable)
                    sigma2[tok] = alt
            t.add(f"blk.{i}.nextn.shared_head_head.weight", head_for(sigma2))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)
    return path


def expected_acceptance_band(spec: TinySpec, n_max: int = 3) -> tuple[float, float]:
    """The acceptance (accepted/drafted) a greedy run should show, as a (low, high) band.

    MTP drafts all `n_max` tokens each step and verification keeps the agreeing prefix, so with
    per-token agreement F the acceptance is (F + F^2 + ... + F^n) / n. The agreement map is drawn at
    random over the vocabulary and a greedy cycle visits only part of it, so the band takes F within
    +-0.15 of the nominal value (measured: F=0.5 gives a per-position 0.615, overall 0.36).
    """
    if spec.mode == "random":
        return (0.0, 0.05)
    if not spec.mtp:
        return (0.0, 0.0)
    f = spec.mtp_agree
    if f >= 1.0:
        return (0.95, 1.0)

    def acc(x: float) -> float:
        x = min(1.0, max(0.0, x))
        return sum(x**k for k in range(1, n_max + 1)) / n_max

    return (acc(f - 0.15), acc(f + 0.15))


def preset(name: str, **overrides: object) -> TinySpec:
    """A named preset with fields overridden."""
    try:
        base = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown tiny model preset {name!r}; known: {', '.join(PRESETS)}") from None
    return replace(base, **overrides) if overrides else base
