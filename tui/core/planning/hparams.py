"""GGUF keys -> the hyperparameters and memory layout llama.cpp b11434 builds for an architecture.

What each architecture's cache holds is read from llama-model.cpp's `create_memory` and the
models/*.cpp `load_arch_hparams`: which layers keep KV (filters for NextN blocks, recurrent and FFN-only
layers), which are sliding-window (pattern keys or per-arch defaults), MLA's K-only cache, the DSA
indexer key cache, and the recurrent (SSM/GDN) state. Every value is type-checked: a damaged key is a
GGUFError naming it, never a ValueError or a huge allocation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tui.core.planning.gguf_meta import (
    ArrayInfo,
    GGUFError,
    HParams,
    TensorInfo,
)

#: LLAMA_MAX_LAYERS
MAX_LAYERS = 512
#: hybrid Gated-DeltaNet + attention (recurrent pattern from full_attention_interval or an array)
HYBRID_GDN_ARCHS: frozenset[str] = frozenset({"qwen35", "qwen35moe", "qwen3next", "qwen4exp"})
#: hybrid Mamba-2 + attention + FFN-only layers (nemotron-h.cpp: recurrent iff no KV heads and no FFN)
NEMOTRON_ARCHS: frozenset[str] = frozenset({"nemotron_h", "nemotron_h_moe"})
#: MLA + DeepSeek sparse attention: a K-only latent cache plus a one-head indexer key cache
DSA_ARCHS: frozenset[str] = frozenset({"deepseek32", "glm-dsa"})
#: sliding-window defaults when the GGUF has no pattern array: (n_pattern, dense_first) per arch
SWA_PATTERNS: dict[str, tuple[int, bool]] = {"gemma3": (6, False), "gemma2": (2, False), "cohere2": (4, True),
                                            "cohere2moe": (4, True)}
#: sliding-window architectures whose pattern is the `attention.sliding_window_pattern` array
SWA_ARRAY_ARCHS: frozenset[str] = frozenset({"step35", "mimo2"})
#: plain attention (every trunk layer keeps KV; NextN blocks go to the draft context), MLA when the
#: GGUF states key_length_mla/value_length_mla (deepseek2 family)
PLAIN_ARCHS: frozenset[str] = frozenset({
    "llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "mistral3", "phi3", "gemma", "starcoder2",
    "deepseek", "deepseek2", "glm4", "glm4moe", "olmo2", "granite", "granitemoe", "ernie4_5", "ernie4_5-moe",
    "hy_v3", "gemma3", "gemma2", "cohere2", "cohere2moe", "step35", "mimo2",
})
#: MTP architectures whose cache mtp-tune does not model (planned as plain KV, with a warning)
UNMODELLED_MTP: dict[str, str] = {
    "deepseek4": "its compressed DSv4 KV cache",
    "glm5-next": "its KDA recurrent layers and indexer cache",
    "bailingmoe3": "its linear-attention recurrent layers",
}
#: llm_arch_supports_rs_rollback: only these keep n_rs_seq recurrent snapshots (others clamp it to 0)
RS_ROLLBACK_ARCHS: frozenset[str] = frozenset({"kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next",
                                               "nemotron_h", "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3"})
KNOWN_ARCHS = HYBRID_GDN_ARCHS | NEMOTRON_ARCHS | DSA_ARCHS | PLAIN_ARCHS


class _Keys:
    """Typed access to `{arch}.*` keys; a wrong type is a GGUFError naming the key."""

    def __init__(self, p: Path, kv: dict[str, Any], arch: str) -> None:
        self.p, self.kv, self.arch = p, kv, arch

    def _bad(self, key: str, v: Any, want: str) -> GGUFError:
        shown = repr(v) if not isinstance(v, list) else f"an array of {len(v)}"
        return GGUFError(f"{self.p}: key {key!r} is {shown}, not {want}; the GGUF header is damaged or was written "
                         "by a broken converter.")

    def int(self, name: str, default: int = 0, lo: int = 0, hi: int = 1 << 31) -> int:
        key = f"{self.arch}.{name}"
        v = self.kv.get(key)
        if v is None:
            return default
        if isinstance(v, list):  # a per-layer array where a scalar is expected: its largest value
            if not v or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                raise self._bad(key, v, "a whole number")
            v = max(v)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise self._bad(key, v, f"a whole number in {lo}..{hi}")
        return v

    def layers(self, name: str, n: int, default: int) -> list[int]:
        """A per-layer value (scalar or array) as n entries, as llama.cpp's get_key_or_arr."""
        key = f"{self.arch}.{name}"
        v = self.kv.get(key)
        if v is None:
            return [default] * n
        if isinstance(v, ArrayInfo):
            raise self._bad(key, f"{v.length} values", f"at most {MAX_LAYERS} per-layer values")
        vals = v if isinstance(v, list) else [v]
        if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 31 for x in vals):
            raise self._bad(key, v, "whole numbers")
        if not isinstance(v, list):
            return [int(v)] * n
        vals = [int(x) for x in vals][:n]
        return vals + [vals[-1] if vals else default] * (n - len(vals))

    def flags(self, name: str, n: int) -> list[bool] | None:
        key = f"{self.arch}.{name}"
        v = self.kv.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, (int, bool)) for x in v):
            raise self._bad(key, v, "an array of flags")
        out = [bool(x) for x in v][:n]
        return out + [False] * (n - len(out))


def hparams_from_kv(p: Path, kv: dict[str, Any], tensors: list[TensorInfo], warnings: list[str]) -> HParams:
    arch = kv.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GGUFError(f"{p}: general.architecture is missing; this GGUF is not a llama.cpp model file.")
    k = _Keys(p, kv, arch)
    if f"{arch}.block_count" in kv:
        n_all = k.int("block_count", 0, 1, MAX_LAYERS)
    else:
        layers = {t.layer for t in tensors if t.layer is not None}
        n_all = max(layers) + 1 if layers else 0
        if n_all > MAX_LAYERS:
            raise GGUFError(f"{p}: the tensor names count {n_all} blocks, more than llama.cpp's {MAX_LAYERS}.")
        warnings.append(f"{arch}.block_count is missing; counted {n_all} blocks from the tensor names.")
    n_nextn = k.int("nextn_predict_layers", 0, 0, n_all)
    n_embd = k.int("embedding_length")
    n_head = k.layers("attention.head_count", n_all, 0)
    n_head_kv = k.layers("attention.head_count_kv", n_all, -1)
    # default: head_count; an explicit 0 means "no attention here" only where llama.cpp reads it so
    zero_ok = arch in NEMOTRON_ARCHS or arch == "bailingmoe3"
    n_head_kv = [h if kvh < 0 or (kvh == 0 and not zero_ok) else kvh for kvh, h in zip(n_head_kv, n_head)]
    h0 = n_head[0] if n_head else 0
    hd_default = n_embd // h0 if h0 else 0
    hd_k = k.int("attention.key_length", hd_default)
    hd_v = k.int("attention.value_length", hd_default)
    tokens = kv.get("tokenizer.ggml.tokens")
    n_vocab = tokens.length if isinstance(tokens, ArrayInfo) else len(tokens) if isinstance(tokens, list) else 0
    emb = next((t for t in tensors if t.name == "token_embd.weight"), None)
    if emb is not None and len(emb.shape) == 2:
        n_vocab = n_vocab or emb.shape[1]
    n_ff_l = k.layers("feed_forward_length", n_all, 0)
    hp = HParams(
        arch=arch, n_layer_all=n_all, n_nextn=n_nextn, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
        head_dim_k=hd_k, head_dim_v=hd_v, n_ctx_train=k.int("context_length"), n_vocab=n_vocab,
        n_expert=k.int("expert_count"), n_expert_used=k.int("expert_used_count"),
        n_ff=max(n_ff_l, default=0), n_ff_exp=k.int("expert_feed_forward_length"),
        n_ff_shexp=k.int("expert_shared_feed_forward_length"),
        ssm_conv_kernel=k.int("ssm.conv_kernel"), ssm_state_size=k.int("ssm.state_size"),
        ssm_group_count=k.int("ssm.group_count"), ssm_time_step_rank=k.int("ssm.time_step_rank"),
        ssm_inner_size=k.int("ssm.inner_size"), sliding_window=k.int("attention.sliding_window"),
    )
    hp.n_ff_layer = n_ff_l
    hp.head_dim_k_swa = k.int("attention.key_length_swa", hd_k)
    hp.head_dim_v_swa = k.int("attention.value_length_swa", hd_v)
    hp.mla = bool(k.int("attention.key_length_mla") and k.int("attention.value_length_mla"))
    hp.n_lora_kv = k.int("attention.kv_lora_rank")
    hp.head_dim_v_mla = k.int("attention.value_length_mla")
    hp.n_layer_dense_lead = k.int("leading_dense_block_count", 0, 0, n_all)
    for t in tensors:  # the tensor table says which blocks are dense and which route experts
        if t.layer is None or len(t.shape) < 2:
            continue
        if t.name.endswith(".ffn_up.weight") and t.layer < hp.n_layer:
            hp.dense_ff_max = max(hp.dense_ff_max, t.shape[1])
        elif t.name.endswith(".ffn_gate_inp.weight") and t.layer >= hp.n_layer:
            hp.nextn_moe = True
    _layout(k, hp, warnings)
    if not n_embd or not any(n_head):
        warnings.append(f"{arch}: embedding_length or attention.head_count is missing; KV and compute estimates are unreliable.")
    return hp


def _swa_pattern(k: _Keys, hp: HParams, n_pattern: int, dense_first: bool) -> list[bool]:
    """load_swa_pattern / set_swa_pattern: an array wins, else the period (key or per-arch default)."""
    arr = k.flags("attention.sliding_window_pattern", hp.n_layer_all)
    if arr is not None:
        return arr
    n_pattern = k.int("attention.sliding_window_pattern", n_pattern, 0, MAX_LAYERS)
    out = []
    for il in range(hp.n_layer_all):
        if il >= hp.n_layer:
            out.append(False)
        elif dense_first:
            out.append(n_pattern == 0 or il % n_pattern != 0)
        else:
            out.append(n_pattern == 0 or il % n_pattern < n_pattern - 1)
    return out


def _layout(k: _Keys, hp: HParams, warnings: list[str]) -> None:
    """Recurrent, sliding-window, KV and indexer layers of the main and the MTP context (create_memory)."""
    arch, n_all, n_layer = hp.arch, hp.n_layer_all, hp.n_layer
    trunk = [il < n_layer for il in range(n_all)]
    hp.recurrent = [False] * n_all
    hp.is_swa = [False] * n_all
    if arch in HYBRID_GDN_ARCHS:
        rl = k.flags("attention.recurrent_layers", n_all)
        if rl is not None:
            hp.recurrent = rl
        else:
            fai = k.int("full_attention_interval", 4, 0, MAX_LAYERS) or 4
            hp.full_attention_interval = fai
            hp.recurrent = [il < n_layer and (il + 1) % fai != 0 for il in range(n_all)]
        hp.kv_main = [il for il in range(n_layer) if not hp.recurrent[il]]
    elif arch in NEMOTRON_ARCHS:
        ff = hp.n_ff_layer
        hp.recurrent = [il < n_layer and hp.n_head_kv[il] == 0 and ff[il] == 0 for il in range(n_all)]
        # filter_attn is `!is_recr && n_ff == 0` over every layer, the NextN block's included
        hp.kv_main = [il for il in range(n_all) if not hp.recurrent[il] and ff[il] == 0]
    else:
        if hp.sliding_window and arch in SWA_PATTERNS:
            hp.is_swa = _swa_pattern(k, hp, *SWA_PATTERNS[arch])
        elif hp.sliding_window and arch in SWA_ARRAY_ARCHS:
            hp.is_swa = k.flags("attention.sliding_window_pattern", n_all) or [False] * n_all
        elif hp.sliding_window and arch in PLAIN_ARCHS:
            warnings.append(f"{arch} states a sliding window but mtp-tune knows no SWA pattern for it; every layer is sized for the full context.")
        hp.kv_main = [il for il in range(n_all) if trunk[il] or not hp.n_nextn]
    # the MTP (draft) context: the NextN block(s) alone, a plain KV cache (an SWA one if the block is SWA)
    hp.kv_draft = list(range(n_layer, n_all))
    if arch in DSA_ARCHS:
        hp.indexer_head_size = k.int("attention.indexer.key_length")
        types = k.flags("attention.indexer.types", n_layer)
        if types is None and arch == "glm-dsa" and hp.n_ctx_train >= 1048576:
            warnings.append("glm-dsa (5.2+) without attention.indexer.types: the indexer cache is sized for every layer.")
        hp.idx_main = [il for il in range(n_layer) if types is None or types[il]]
    hp.known = arch in KNOWN_ARCHS
    if arch in UNMODELLED_MTP:
        warnings.append(f"architecture {arch!r}: mtp-tune does not model {UNMODELLED_MTP[arch]}; its KV is planned as "
                        "plain attention on every layer and may be off (use exact mode for llama.cpp's own figures).")
    elif not hp.known:
        warnings.append(
            f"architecture {arch!r} is not modelled by mtp-tune's planner: weights are exact, the KV cache is "
            "estimated as plain attention on every layer, recurrent state and compute buffers are rough."
        )
