"""GGUF header contents as data: hyperparameters and the tensor table the planner sizes memory from.

`gguf_reader.read_gguf` fills these from a file's header; the planner and its tests only read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


#: ggml type id -> (name, block size in elements, bytes per block); ggml.h of b11434.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18), 42: ("Q2_0", 64, 18),
}
TYPE_IDS: dict[str, int] = {name: tid for tid, (name, _, _) in GGML_TYPES.items()}

class GGUFError(ValueError):
    """The file is not a readable GGUF; the message names the file and what to do."""


@dataclass(frozen=True)
class ArrayInfo:
    """An array value too long to keep (only its element type and length)."""

    elem_type: int
    length: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type_name: str
    type_id: int
    shape: tuple[int, ...]  # ggml order: ne[0] is the row length
    offset: int  # absolute file offset of the data
    nbytes: int
    layer: int | None  # N for `blk.N.*`, else None
    file: int = 0  # which part of a split model holds the data (`offset` is in that file)

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class HParams:
    """The hyperparameters that size memory. Per-layer lists have `n_layer_all` entries."""

    arch: str
    n_layer_all: int
    n_nextn: int
    n_embd: int
    n_head: list[int]
    n_head_kv: list[int]
    head_dim_k: int
    head_dim_v: int
    n_ctx_train: int
    n_vocab: int
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff: int = 0
    n_ff_exp: int = 0
    n_ff_shexp: int = 0
    ssm_conv_kernel: int = 0
    ssm_state_size: int = 0
    ssm_group_count: int = 0
    ssm_time_step_rank: int = 0
    ssm_inner_size: int = 0
    full_attention_interval: int | None = None
    recurrent: list[bool] = field(default_factory=list)  # is_recr(il)
    sliding_window: int = 0  # n_swa
    known: bool = True  # False: unknown architecture, planned as weights + plain KV
    n_ff_layer: list[int] = field(default_factory=list)
    head_dim_k_swa: int = 0
    head_dim_v_swa: int = 0
    mla: bool = False  # K-only latent cache (kv_lora_rank + rope dims in key_length), no V
    n_lora_kv: int = 0
    head_dim_v_mla: int = 0
    n_layer_dense_lead: int = 0  # MoE models: the first blocks with a dense FFN
    dense_ff_max: int = 0  # widest dense FFN of a trunk block, from its ffn_up tensor (0: none)
    nextn_moe: bool = False  # the NextN block routes experts (its ffn_gate_inp exists)
    is_swa: list[bool] = field(default_factory=list)
    kv_main: list[int] | None = None  # layers with KV in the main context (None: trunk non-recurrent)
    kv_draft: list[int] = field(default_factory=list)  # layers with KV in the MTP context
    indexer_head_size: int = 0  # DSA lightning indexer: one K head of this size per indexed layer
    idx_main: list[int] = field(default_factory=list)

    @property
    def n_layer(self) -> int:
        """Trunk layers (NextN blocks excluded), as llama.cpp's `n_layer()`."""
        return self.n_layer_all - self.n_nextn

    @property
    def is_hybrid(self) -> bool:
        return any(self.recurrent)

    def is_recr(self, il: int) -> bool:
        return bool(self.recurrent[il]) if il < len(self.recurrent) else False

    def attention_layers(self) -> list[int]:
        """Layers that hold a KV cache in the main context."""
        if self.kv_main is not None:
            return list(self.kv_main)
        return [il for il in range(self.n_layer) if not self.is_recr(il)]

    def swa(self, il: int) -> bool:
        return bool(self.is_swa[il]) if il < len(self.is_swa) else False

    def n_embd_k_gqa(self, il: int) -> int:
        return (self.head_dim_k_swa if self.swa(il) and self.head_dim_k_swa else self.head_dim_k) * self.n_head_kv[il]

    def n_embd_v_gqa(self, il: int) -> int:
        return (self.head_dim_v_swa if self.swa(il) and self.head_dim_v_swa else self.head_dim_v) * self.n_head_kv[il]

    def n_embd_v_gqa_max(self) -> int:
        """The V row width of every layer when V is stored transposed (no flash attention)."""
        return max((self.n_embd_v_gqa(il) for il in range(self.n_layer_all)), default=0)

    def recurrent_layers(self) -> list[int]:
        return [il for il in range(self.n_layer) if self.is_recr(il)]

    def nextn_layers(self) -> list[int]:
        return list(range(self.n_layer, self.n_layer_all))

    @property
    def n_embd_r(self) -> int:
        """Conv state floats per row (llama-hparams.cpp)."""
        if not self.ssm_conv_kernel:
            return 0
        return (self.ssm_conv_kernel - 1) * (self.ssm_inner_size + 2 * self.ssm_group_count * self.ssm_state_size)

    @property
    def n_embd_s(self) -> int:
        """Recurrent (delta-net) state floats per row."""
        return self.ssm_state_size * self.ssm_inner_size


@dataclass(frozen=True)
class SplitPart:
    """One file of a split model: where it is, its size, where its tensor data begins."""

    path: Path
    file_size: int
    data_offset: int


@dataclass
class GGUFMeta:
    path: Path
    version: int
    file_size: int
    alignment: int
    data_offset: int
    kv: dict[str, Any]
    tensors: list[TensorInfo]
    hparams: HParams
    warnings: list[str] = field(default_factory=list)
    #: a split model's files, the first (`path`) included; empty for a single file
    parts: list[SplitPart] = field(default_factory=list)
    #: this model's calibrated compute terms (planning.calibration.Calibration), once llama.cpp has
    #: measured it (planning.cache.attach); every plan of the model then uses them
    calibration: Any = field(default=None, compare=False, repr=False)
    #: sparse.header_hash's digest, once computed (the header is read and hashed once per read model)
    digest: str | None = field(default=None, compare=False, repr=False)

    @property
    def architecture(self) -> str:
        return self.hparams.arch

    def layers(self) -> dict[int, list[TensorInfo]]:
        """Tensors grouped by block index."""
        out: dict[int, list[TensorInfo]] = {}
        for t in self.tensors:
            if t.layer is not None:
                out.setdefault(t.layer, []).append(t)
        return out

    def non_layer_tensors(self) -> list[TensorInfo]:
        return [t for t in self.tensors if t.layer is None]

    def tensor(self, name: str) -> TensorInfo | None:
        for t in self.tensors:
            if t.name == name:
                return t
        return None

    @property
    def model_size(self) -> int:
        """Bytes of the whole model on disk: every part of a split model, else the one file."""
        return sum(p.file_size for p in self.parts) if self.parts else self.file_size

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def layer_bytes(self, il: int) -> int:
        return sum(t.nbytes for t in self.tensors if t.layer == il)

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly description for `mtp-tune plan --json`."""
        h = self.hparams
        return {
            "path": str(self.path),
            "architecture": h.arch,
            "name": self.kv.get("general.name"),
            "file_size_mib": round(self.model_size / 2**20, 2),
            "weights_mib": round(self.total_bytes / 2**20, 2),
            "n_tensors": len(self.tensors),
            "block_count": h.n_layer_all,
            "nextn_predict_layers": h.n_nextn,
            "n_layer": h.n_layer,
            "attention_layers": len(h.attention_layers()),
            "recurrent_layers": len(h.recurrent_layers()),
            "n_embd": h.n_embd,
            "n_head": _compact(h.n_head),
            "n_head_kv": _compact(h.n_head_kv),
            "head_dim_k": h.head_dim_k,
            "head_dim_v": h.head_dim_v,
            "n_expert": h.n_expert,
            "n_expert_used": h.n_expert_used,
            "n_vocab": h.n_vocab,
            "context_length": h.n_ctx_train,
            "known_architecture": h.known,
        }


def _compact(values: list[int]) -> int | list[int]:
    return values[0] if values and all(v == values[0] for v in values) else values

