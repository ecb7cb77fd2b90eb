"""Weights: which device each block goes to, and every tensor's bytes placed as `load_tensors` does.

`-ngl`, `-sm`, `-ts`, `-mg`; the output layer on `dev(n_layer_all)`; `token_embd` on the host;
`-cmoe`/`-ncmoe`/`-ot ...=CPU` move tensors to host memory; MTP tensors load only with draft-mtp;
host weights count as the mmap range llama.cpp maps (or the padded sum without mmap).

CPU_REPACK: host-resident matrices whose type the CPU backend repacks (ggml-cpu/repack.cpp's
`ggml_repack_get_optimal_repack_type`: on x86 with AVX2 Q4_0, Q4_K, IQ4_NL, MXFP4, with AVX-512 also
Q2_K; rows a multiple of 8) go to their own buffer, mmap or not (llama-model-loader's buffer selection
tries the extra buffer types before the plain CPU one). Only when no offload device offers a pinned
host buffer (CPU only, RPC devices) or with --no-host: with a GPU the host buffer comes first.
"""

from __future__ import annotations

import bisect
import platform
import re
from functools import lru_cache

from tui.core.planning.devices import HOST, DeviceSpec
from tui.core.planning.errors import PlanError
from tui.core.planning.gguf_meta import GGUFMeta, TensorInfo
from tui.core.planning.resolve import Resolved, pad
from tui.core.planning.result import MiB, DevicePlan

EXPERT_TENSORS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")
#: 2-D weights that are not matrix multiplications (get_rows, norms, convolutions, scales)
_NOT_MATMUL = re.compile(r"token_embd|per_layer_token_embd|pos_embd|norm|conv1d|ssm_a|ssm_d\b|\.bias$|_b\.weight$")


@lru_cache(maxsize=1)
def repack_types() -> frozenset[str]:
    """The ggml types this host's CPU backend repacks (b11434's repack.cpp, by CPU feature)."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return frozenset()
    flags = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
            break
    out: set[str] = set()
    if platform.machine() in ("x86_64", "AMD64") and "avx2" in flags:
        out |= {"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"}
        if "avx512f" in flags:
            out.add("Q2_K")
    elif platform.machine() in ("aarch64", "arm64"):
        if "asimddp" in flags:
            out |= {"Q4_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "MXFP4", "Q8_0"}
    return frozenset(out)


def is_repacked(t: TensorInfo, types: frozenset[str]) -> bool:
    """The tensor would land in CPU_REPACK if it is host-resident (MUL_MAT 2-D, MUL_MAT_ID experts)."""
    if t.type_name not in types or len(t.shape) < 2 or t.shape[1] % 8:
        return False
    if len(t.shape) == 3:
        return bool(EXPERT_TENSORS.search(t.name))
    return len(t.shape) == 2 and not _NOT_MATMUL.search(t.name)


def offload_devices(r: Resolved, devices: list[DeviceSpec], warnings: list[str]) -> tuple[list[DeviceSpec], list[float]]:
    """(the devices layers may go to, the normalised cumulative split over them)."""
    if r.split_mode in ("row", "tensor") and devices:
        warnings.append(f"-sm {r.split_mode}: planned as -sm layer (row/tensor splitting is not modelled).")
    offload = list(devices)
    if r.split_mode == "none" and offload:
        if r.main_gpu >= len(offload):
            raise PlanError(f"-mg {r.main_gpu}: there are only {len(offload)} devices (0..{len(offload) - 1}).")
        offload = [offload[r.main_gpu]]
    if r.tensor_split and offload:
        ts = list(r.tensor_split)[: len(offload)] + [0.0] * max(0, len(offload) - len(r.tensor_split))
        if len(r.tensor_split) > len(offload):
            warnings.append(f"-ts has {len(r.tensor_split)} values but there are {len(offload)} devices; the extra values are ignored.")
        if all(v == 0 for v in ts):
            ts = [d.free_mib for d in offload]
    else:
        ts = [d.free_mib for d in offload]
    total = sum(ts) or 1.0
    splits, acc = [], 0.0
    for v in ts:
        acc += v
        splits.append(acc / total)
    return offload, splits


def device_of_layer(il: int, r: Resolved, n_layer_all: int, splits: list[float], keys: list[str]) -> str:
    """load_tensors' placement: upper_bound over the normalised cumulative split."""
    if not keys:
        return HOST
    ngl = r.n_gpu_layers
    i_gpu_start = max(n_layer_all + 1 - ngl, 0)
    act = min(ngl, n_layer_all + 1)
    if il < i_gpu_start or (il - i_gpu_start) >= act:
        return HOST
    x = (il - i_gpu_start) / act
    idx = bisect.bisect_right(splits, x)
    return keys[min(idx, len(keys) - 1)]


def add_weights(meta: GGUFMeta, r: Resolved, dplans: dict[str, DevicePlan], layer_dev: list[str]) -> None:
    """Every tensor's bytes on the device `load_tensors` puts it on."""
    hp = meta.hparams
    n_all = hp.n_layer_all
    out_dev = layer_dev[n_all]
    placed: dict[str, list[TensorInfo]] = {k: [] for k in dplans}
    nextn = set(hp.nextn_layers())
    cpu_res = [re.compile(p) for p in r.cpu_overrides]
    has_output = any(t.name == "output.weight" for t in meta.tensors)
    for t in meta.tensors:
        if t.layer is not None and t.layer in nextn and not r.mtp:
            continue  # TENSOR_SKIP: MTP weights are only loaded for draft-mtp
        if t.layer is not None and t.layer < n_all:
            dev = layer_dev[t.layer]
        elif t.name.startswith("token_embd"):
            dev = HOST
        else:
            dev = out_dev
        if dev != HOST and t.layer is not None:
            if (r.cpu_moe or t.layer < r.n_cpu_moe) and EXPERT_TENSORS.search(t.name):
                dev = HOST
            elif any(rx.search(t.name) for rx in cpu_res):
                dev = HOST
        placed[dev].append(t)
    if not has_output and out_dev != HOST:
        emb = meta.tensor("token_embd.weight")
        if emb is not None:
            placed[out_dev].append(emb)  # tied embeddings: a copy on the output device
    repack: list[TensorInfo] = []
    if r.repack and (r.no_host or all(dplans[k].remote for k in dplans if k != HOST)):
        types = repack_types()
        repack = [t for t in placed[HOST] if is_repacked(t, types)]
        if repack:
            ids = {id(t) for t in repack}
            placed[HOST] = [t for t in placed[HOST] if id(t) not in ids]
    for key, ts_ in placed.items():
        if key == HOST and r.use_mmap:
            dplans[key].components["weights"] = mapped_range(ts_) / MiB
        else:
            dplans[key].components["weights"] = sum(pad(t.nbytes, 32) for t in ts_) / MiB
    dplans[HOST].components["weights"] += sum(pad(t.nbytes, 32) for t in repack) / MiB  # the CPU_REPACK buffer


def mapped_range(ts: list[TensorInfo]) -> int:
    """Bytes of the file ranges llama.cpp maps for these tensors (first offset to last end, in each
    part of a split model)."""
    total = 0
    for f in {t.file for t in ts}:
        mine = [t for t in ts if t.file == f]
        total += max(t.offset + t.nbytes for t in mine) - min(t.offset for t in mine)
    return total
