"""Closed forms of the KV cache and recurrent state per architecture, checked by hand against
llama.cpp b11434's create_memory (no server; the real-server checks are test_planner_arch_real.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from tests.helpers.archshapes import write_arch_shape
from tui.core.options.settings import Settings
from tui.core.planning.errors import PlanError
from tui.core.planning.gguf_meta import GGUFError
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.plan import plan

MiB = 2**20


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("arch")
    return {n: write_arch_shape(n, root / f"{n}.gguf") for n in ("gemma3-1b", "deepseek-v2-lite", "glm47-flash", "qwen3-next-80b")}


def _totals(path: Path, **kw: object) -> dict[str, float]:
    s = Settings(model=str(path), fit=False, **kw)  # type: ignore[arg-type]
    return plan(read_gguf(path), s).totals()


def test_gemma3_sliding_window_pattern_and_cells(shapes: dict[str, Path]) -> None:
    h = read_gguf(shapes["gemma3-1b"]).hparams
    # pattern 6, not dense-first: every 6th layer (5, 11, 17, 23) is full attention
    assert [il for il in range(26) if not h.is_swa[il]] == [5, 11, 17, 23]
    row = 1 * 256 * 2 * 2  # one KV head of 256, K and V in f16
    # -c 16384 -np 2: 8192 cells per stream; SWA layers pad(min(8192, 512 + 256), 256) = 768 per stream
    t = _totals(shapes["gemma3-1b"], ctx_size=16384, parallel=2, ubatch_size=256)
    assert t["kv"] * MiB == 2 * (4 * 8192 + 22 * 768) * row
    # unified: one stream of 16384; SWA pad(512 x 2 + 256, 256) = 1280
    t = _totals(shapes["gemma3-1b"], ctx_size=16384, parallel=2, ubatch_size=256, extra_args=["--kv-unified"])
    assert t["kv"] * MiB == (4 * 16384 + 22 * 1280) * row
    t = _totals(shapes["gemma3-1b"], ctx_size=16384, parallel=1, extra_args=["--swa-full"])
    assert t["kv"] * MiB == 26 * 16384 * row


def test_deepseek2_mla_keeps_one_latent_k_and_no_v(shapes: dict[str, Path]) -> None:
    h = read_gguf(shapes["deepseek-v2-lite"]).hparams
    assert h.mla and h.n_head_kv[0] == 1 and h.head_dim_k == 512 + 64
    t = _totals(shapes["deepseek-v2-lite"], ctx_size=8192, parallel=1)
    assert t["kv"] * MiB == 27 * 8192 * 576 * 2  # K only, f16
    t = _totals(shapes["deepseek-v2-lite"], ctx_size=8192, parallel=1, flash_attn="off")
    assert t["kv"] * MiB == 27 * 8192 * 576 * 2  # still no V without flash attention
    t = _totals(shapes["deepseek-v2-lite"], ctx_size=8192, parallel=1, cache_type_k="q8_0", cache_type_v="q8_0")
    assert t["kv"] * MiB == 27 * 8192 * 576 // 32 * 34


def test_mla_refuses_mixed_k_and_v_types_as_the_server_does(shapes: dict[str, Path]) -> None:
    with pytest.raises(PlanError, match="-ctk/-ctv q8_0/f16.*different K and V"):
        _totals(shapes["deepseek-v2-lite"], ctx_size=8192, parallel=1, cache_type_k="q8_0")
    with pytest.raises(PlanError, match="-ctkd/-ctvd"):
        _totals(shapes["glm47-flash"], ctx_size=4096, parallel=1, spec_type=["draft-mtp"], cache_type_k_draft="q8_0")


def test_deepseek2_mtp_draft_kv_is_the_nextn_block(shapes: dict[str, Path]) -> None:
    t = _totals(shapes["glm47-flash"], ctx_size=4096, parallel=1, spec_type=["draft-mtp"], cache_type_k_draft="q8_0",
                cache_type_v_draft="q8_0")
    assert t["kv"] * MiB == 47 * 4096 * 576 * 2
    assert t["draft_kv"] * MiB == 1 * 4096 * 576 // 32 * 34


def test_repack_buffer_holds_the_host_q4_0_matrices(shapes: dict[str, Path], tmp_path: Path) -> None:
    from tui.core.planning.weights import is_repacked
    qat = write_arch_shape("gemma3-1b-qat", tmp_path / "qat.gguf")
    meta = read_gguf(qat)
    on = {"Q4_0"}
    reps = [t for t in meta.tensors if is_repacked(t, frozenset(on))]
    assert reps and all(t.type_name == "Q4_0" and len(t.shape) == 2 for t in reps)
    assert not any(t.name.startswith("token_embd") or "norm" in t.name for t in reps)
    pad = lambda n: (n + 31) // 32 * 32  # noqa: E731
    import tui.core.planning.weights as w
    w.repack_types.cache_clear()
    orig = w.repack_types
    try:
        w.repack_types = lambda: frozenset(on)  # type: ignore[assignment]
        mapped = _totals(qat, ctx_size=4096, parallel=1)
        mapped_off = _totals(qat, ctx_size=4096, parallel=1, extra_args=["-nr"])
        nommap = _totals(qat, ctx_size=4096, parallel=1, load_mode="none")
    finally:
        w.repack_types = orig  # type: ignore[assignment]
    # with mmap the mapped range still spans the repacked tensors: CPU_REPACK comes on top
    assert (mapped["weights"] - mapped_off["weights"]) * MiB == sum(pad(t.nbytes) for t in reps)
    # without mmap: the plain CPU buffer and CPU_REPACK together hold every tensor once, padded
    assert nommap["weights"] * MiB == sum(pad(t.nbytes) for t in meta.tensors)


def test_qwen3next_keeps_no_rollback_snapshots(shapes: dict[str, Path]) -> None:
    h = read_gguf(shapes["qwen3-next-80b"]).hparams
    per_row = 4 * (h.n_embd_r + h.n_embd_s)
    t = _totals(shapes["qwen3-next-80b"], ctx_size=4096, parallel=1, spec_type=["draft-mtp"], spec_draft_n_max=3)
    assert t["recurrent"] * MiB == 36 * per_row  # llm_arch_supports_rs_rollback is false: 1 row, not 1 + 3


def _custom(path: Path, arch: str, kv: dict[str, object], n_layer: int) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    for k, v in kv.items():
        if isinstance(v, list):
            w.add_array(k, v)
        else:
            w.add_uint32(k, int(v))  # type: ignore[call-overload]
    w.add_tensor("token_embd.weight", np.zeros((10, 64), dtype=np.float32))
    for i in range(n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.zeros((64,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_nemotron_h_layers_are_mamba_attention_or_ffn(tmp_path: Path) -> None:
    a = "nemotron_h_moe"
    p = _custom(tmp_path / "n.gguf", a, {
        f"{a}.block_count": 5, f"{a}.nextn_predict_layers": 1, f"{a}.embedding_length": 64,
        f"{a}.attention.head_count": 4, f"{a}.attention.head_count_kv": [0, 2, 0, 0, 2],
        f"{a}.feed_forward_length": [0, 0, 128, 0, 0], f"{a}.attention.key_length": 16, f"{a}.attention.value_length": 16,
        f"{a}.ssm.conv_kernel": 4, f"{a}.ssm.inner_size": 128, f"{a}.ssm.state_size": 16, f"{a}.ssm.group_count": 2,
        f"{a}.ssm.time_step_rank": 8,
    }, 5)
    h = read_gguf(p).hparams
    assert h.recurrent_layers() == [0, 3]  # no KV heads and no FFN
    assert h.attention_layers() == [1, 4]  # filter_attn: not recurrent and no FFN, the NextN block included
    assert (h.n_embd_r, h.n_embd_s) == (3 * (128 + 2 * 2 * 16), 16 * 128)


def test_dsa_indexer_keys_follow_the_indexer_types(tmp_path: Path) -> None:
    a = "deepseek32"
    p = _custom(tmp_path / "d.gguf", a, {
        f"{a}.block_count": 3, f"{a}.embedding_length": 64, f"{a}.attention.head_count": 4,
        f"{a}.attention.head_count_kv": 1, f"{a}.attention.key_length": 96, f"{a}.attention.value_length": 64,
        f"{a}.attention.key_length_mla": 48, f"{a}.attention.value_length_mla": 32,
        f"{a}.attention.indexer.key_length": 128, f"{a}.attention.indexer.types": [1, 0, 1],
    }, 3)
    h = read_gguf(p).hparams
    assert h.mla and h.idx_main == [0, 2] and h.indexer_head_size == 128
    t = plan(read_gguf(p), Settings(model=str(p), ctx_size=1024, parallel=1, fit=False)).totals()
    assert t["kv"] * MiB == 3 * 1024 * 96 * 2 + 2 * 1024 * 128 * 2


@pytest.mark.parametrize("key,value,match", [
    ("block_count", 100000, "block_count"),
    ("attention.head_count", "sixteen", "head_count"),
])
def test_damaged_hyperparameters_name_the_key(tmp_path: Path, key: str, value: object, match: str) -> None:
    a = "llama"
    w = gguf.GGUFWriter(str(tmp_path / "h.gguf"), a)
    w.add_uint32(f"{a}.embedding_length", 64)
    if isinstance(value, str):
        w.add_string(f"{a}.{key}", value)
    else:
        w.add_uint32(f"{a}.{key}", value)
    w.add_tensor("token_embd.weight", np.zeros((10, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(GGUFError, match=match):
        read_gguf(tmp_path / "h.gguf")


def test_the_plan_carries_the_measured_error_band(shapes: dict[str, Path]) -> None:
    from tui.core.planning.errorband import measured
    p = plan(read_gguf(shapes["gemma3-1b"]), Settings(ctx_size=4096, parallel=1, fit=False))
    band = p.error_band
    data = measured()
    assert band == {k: float(v) for k, v in data.get("band_pct", {}).items()}
    if data:  # committed by bench/bench_planner_heldout.py with its date and commit
        assert data["measured"] and data["commit"] and data["configurations"] >= 60
        assert set(band) >= {"weights", "kv", "compute"}
    assert p.to_dict()["model"]["error_band_pct"] == band
