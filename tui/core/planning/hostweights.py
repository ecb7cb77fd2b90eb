"""Host weights in exact mode: the tensors llama.cpp placed in host memory, and the buffers they make.

A `--fit` dry run loads with `no_alloc` and without mmap, so llama.cpp measures its host buffer
types as tensor sums (the breakdown's `Host` row and one row per extra buffer type such as
CPU_REPACK, floored MiB; its `model buffer size` lines print the dummy buffers' 0.00) and never sees the range a real mmap load maps: the file from the first to
the last tensor of the plain CPU buffer, per file (llama_model_loader::get_mapping_range), which
includes any repacked or offloaded tensors lying in between. At `-lv 5` the same pass prints where
it put every block ("layer N assigned to device X", the output layer as block n_layer) and every
`-ot` match ("tensor T ... buffer type overridden to B"). That placement, with the GGUF's offsets,
gives the mapped range; the repacked tensors are the host matrices whose type this CPU repacks
(planning.weights.is_repacked). The result stands only where its sums agree with llama.cpp's floored
rows; otherwise llama.cpp's floors are used and the note says the mapped range could not be derived.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tui.core.planning.breakdown import Measurement
from tui.core.planning.gguf_meta import GGUFMeta, TensorInfo
from tui.core.planning.resolve import Resolved, pad
from tui.core.planning.result import MiB
from tui.core.planning.weights import is_repacked, mapped_range, repack_types

#: llama.cpp's name for the CPU device (load_tensors' "assigned to device CPU")
CPU = "CPU"
#: a formula agrees with llama.cpp when it lies inside the floored MiB (with float slack)
SLACK = 0.02


def agrees(formula: float, floored: int) -> bool:
    """`formula` (MiB) lies inside llama.cpp's floored whole MiB."""
    return floored - SLACK <= formula < floored + 1 + SLACK


def _is_extra(buft: str) -> bool:
    """A CPU extra buffer type (CPU_REPACK, CPU_KLEIDIAI, AMX): allocated, never mapped."""
    return buft.startswith("CPU_") or buft == "AMX"


def _host_buft(buft: str) -> bool:
    return buft.startswith("CPU") or buft.endswith("_Host") or buft == "AMX"


@dataclass
class HostWeights:
    """The host's model buffers: the plain (mappable) one and the repacked one, as tensors."""

    plain: list[TensorInfo] = field(default_factory=list)
    repacked: list[TensorInfo] = field(default_factory=list)

    @property
    def plain_mib(self) -> float:
        return sum(pad(t.nbytes, 32) for t in self.plain) / MiB

    @property
    def repacked_mib(self) -> float:
        return sum(pad(t.nbytes, 32) for t in self.repacked) / MiB

    @property
    def mapped_mib(self) -> float:
        return mapped_range(self.plain) / MiB if self.plain else 0.0


def placed_on_host(meta: GGUFMeta, r: Resolved, m: Measurement, repack: bool) -> HostWeights | None:
    """The host tensors of llama.cpp's printed placement (None: it printed none, e.g. below -lv 5).
    `repack`: llama.cpp filled an extra CPU buffer type, so the repackable host matrices went there."""
    rep = m.detail
    n_all = meta.hparams.n_layer_all
    if n_all not in rep.layer_device:
        return None
    skip = set(meta.hparams.nextn_layers()) if not r.mtp else set()
    types = repack_types() if repack else frozenset()
    out = HostWeights()
    for t in meta.tensors:
        if t.layer is not None and t.layer in skip:
            continue  # TENSOR_SKIP: MTP weights load only for draft-mtp
        buft = rep.buft_overrides.get(t.name)
        if buft is None:
            if t.layer is not None and t.layer < n_all:
                dev = rep.layer_device.get(t.layer, CPU)
            else:
                dev = CPU if t.name.startswith("token_embd") else rep.layer_device[n_all]
            if dev != CPU:
                continue
            (out.repacked if is_repacked(t, types) else out.plain).append(t)
        elif _host_buft(buft):
            (out.repacked if _is_extra(buft) else out.plain).append(t)
    emb = meta.tensor("token_embd.weight")
    if meta.tensor("output.weight") is None and emb is not None and rep.layer_device[n_all] == CPU \
            and emb.type_name in types and len(emb.shape) == 2 and emb.shape[1] % 8 == 0:
        out.repacked.append(emb)  # the tied output's copy: a matrix product the CPU repacks apart
    return out


def exact_host_weights(meta: GGUFMeta, r: Resolved, m: Measurement) -> tuple[float, dict[str, float], list[str]]:
    """(host weights MiB, llama.cpp's buffer name -> MiB, notes for `by_formula`) from the dry run `m`.

    The buffers are named as a real load prints them: CPU_Mapped with mmap (else CPU) and the extra
    buffer type's own name (CPU_REPACK)."""
    plain_floor = sum(row.model for row in m.rows if row.kind == "host")
    extra_rows = [row for row in m.rows if row.kind == "buffer_type" and _is_extra(row.name)]
    extra_floor = sum(row.model for row in extra_rows)
    extra_name = extra_rows[0].name if extra_rows else "CPU_REPACK"
    plain_name = "CPU_Mapped" if r.use_mmap else "CPU"
    hw = placed_on_host(meta, r, m, repack=r.repack and bool(extra_rows))
    if hw is not None and agrees(hw.plain_mib, plain_floor) and agrees(hw.repacked_mib, extra_floor) \
            and not (hw.repacked and not extra_rows):
        plain = hw.mapped_mib if r.use_mmap else hw.plain_mib
        bufs = {plain_name: plain} if hw.plain else {}
        if hw.repacked:
            bufs[extra_name] = hw.repacked_mib
        notes = ["weights (mapped range from the file's offsets)"] if r.use_mmap and hw.plain else []
        if (hw.plain and not r.use_mmap) or hw.repacked:
            notes.append("weights (to 0.01 MiB: the tensors' bytes, inside llama.cpp's floored MiB)")
        return sum(bufs.values()), bufs, notes
    bufs = {name: floor + 0.5 for name, floor in ((plain_name, plain_floor), (extra_name, extra_floor)) if floor > 0}
    why = ("llama.cpp printed no placement" if hw is None else "the placement's sums disagree with llama.cpp's")
    notes = [f"weights (llama.cpp's floored tensor sums; {why}, so the mapped range is not derived)"] if r.use_mmap else []
    return sum(bufs.values()), bufs, notes
