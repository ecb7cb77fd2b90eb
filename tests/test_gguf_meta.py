"""The header-only GGUF reader: hyperparameters, the tensor table, and clear errors on bad files."""

from __future__ import annotations

import random
import re
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from tui.core.planning.gguf_meta import GGUFError

from tui.core.options.settings import Settings
from tui.core.planning.errors import PlanError
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.plan import plan
from tests.helpers.shapemodel import QWEN36_35B_A3B, write_shape_model
from tui.core.demo.tiny_model import PRESETS, write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("g") / "tiny-moe-mtp.gguf", PRESETS["tiny-moe-mtp"])


@pytest.fixture(scope="module")
def shape(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_shape_model(tmp_path_factory.mktemp("shape") / "qwen36-shape.gguf")


def test_tensor_table_matches_gguf_reader(tiny: Path) -> None:
    meta = read_gguf(tiny)
    ref = gguf.GGUFReader(tiny)
    assert len(meta.tensors) == len(ref.tensors)
    for rt in ref.tensors:
        t = meta.tensor(rt.name)
        assert t is not None
        assert t.nbytes == int(rt.n_bytes)
        assert t.offset == int(rt.data_offset)
        assert t.type_id == int(rt.tensor_type)
        assert list(t.shape) == [int(x) for x in rt.shape]
    assert meta.total_bytes == sum(int(t.n_bytes) for t in ref.tensors)


def test_hyperparameters_of_tiny_moe(tiny: Path) -> None:
    h = read_gguf(tiny).hparams
    spec = PRESETS["tiny-moe-mtp"]
    assert h.arch == "qwen35moe"
    assert (h.n_layer_all, h.n_nextn, h.n_layer) == (spec.n_layer + 1, 1, spec.n_layer)
    assert h.n_embd == spec.n_embd
    assert h.n_head == [spec.n_head] * h.n_layer_all and h.n_head_kv == [spec.n_head_kv] * h.n_layer_all
    assert (h.head_dim_k, h.head_dim_v) == (spec.head_dim, spec.head_dim)
    assert (h.n_expert, h.n_expert_used, h.n_ff_exp) == (spec.n_expert, spec.n_expert_used, spec.n_ff_exp)
    assert h.full_attention_interval == spec.full_attn_interval
    # interval 2: layers 1 and 3 attend, 0 and 2 are recurrent, the NextN block is not recurrent
    assert h.attention_layers() == [1, 3] and h.recurrent_layers() == [0, 2] and h.nextn_layers() == [4]
    assert h.ssm_inner_size == spec.ssm_head_dim * spec.ssm_v_heads
    assert h.n_vocab > 256 and h.n_ctx_train == spec.ctx


def test_layers_grouped(tiny: Path) -> None:
    meta = read_gguf(tiny)
    layers = meta.layers()
    assert sorted(layers) == list(range(5))
    assert {t.name for t in meta.non_layer_tensors()} == {"token_embd.weight", "output_norm.weight", "output.weight"}
    assert any(t.name.endswith("nextn.eh_proj.weight") for t in layers[4])
    assert meta.layer_bytes(4) == sum(t.nbytes for t in layers[4])


def test_shape_model_has_real_dimensions(shape: Path) -> None:
    st = shape.stat()
    assert st.st_size > 19 * 2**30  # apparent size of the real file
    assert st.st_blocks * 512 < 64 * 2**20  # sparse: only the header is on disk
    meta = read_gguf(shape)
    h = meta.hparams
    assert (h.arch, h.n_layer_all, h.n_nextn, h.n_embd) == ("qwen35moe", 41, 1, 2048)
    assert (h.n_head[0], h.n_head_kv[0], h.head_dim_k) == (16, 2, 256)
    assert len(h.attention_layers()) == 10 and h.attention_layers()[:2] == [3, 7]
    assert (h.n_expert, h.n_expert_used, h.n_ff_exp, h.n_vocab) == (256, 8, 512, 248320)
    # per-row recurrent state of the real model: 62.8125 MiB over 30 layers (llama-server.md §6.2)
    assert 30 * 4 * (h.n_embd_r + h.n_embd_s) == int(62.8125 * 2**20)
    experts = meta.tensor("blk.0.ffn_up_exps.weight")
    assert experts is not None and experts.type_name == QWEN36_35B_A3B.expert_type.name
    assert experts.nbytes == 256 * 512 * 2048 // 256 * 144
    assert meta.tensors[-1].offset + meta.tensors[-1].nbytes <= st.st_size


def test_not_a_gguf(tmp_path: Path) -> None:
    p = tmp_path / "model.gguf"
    p.write_bytes(b"<html>404 not found</html>" * 10)
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_gguf(p)


@pytest.mark.parametrize("cut", [2, 10, 30, 200, 3000, -1])
def test_truncated_header(tiny: Path, tmp_path: Path, cut: int) -> None:
    data = tiny.read_bytes()
    meta = read_gguf(tiny)
    end = meta.data_offset - 40 if cut == -1 else cut  # -1: inside the tensor table
    p = tmp_path / "cut.gguf"
    p.write_bytes(data[:end])
    with pytest.raises(GGUFError) as exc:
        read_gguf(p)
    assert "truncated" in str(exc.value) or "not a GGUF" in str(exc.value)


def test_truncated_data_is_a_warning(tiny: Path, tmp_path: Path) -> None:
    data = tiny.read_bytes()
    p = tmp_path / "short.gguf"
    p.write_bytes(data[: len(data) - 1000])
    meta = read_gguf(p)
    assert any("truncated" in w for w in meta.warnings)


def test_unknown_quant_type(tiny: Path, tmp_path: Path) -> None:
    data = bytearray(tiny.read_bytes())
    meta = read_gguf(tiny)
    # the type field of the first tensor info: after its name (u64 len + bytes), n_dims u32, dims u64 each
    name = meta.tensors[0].name.encode()
    at = bytes(data).index(struct.pack("<Q", len(name)) + name)
    pos = at + 8 + len(name)
    n_dims = struct.unpack_from("<I", data, pos)[0]
    pos += 4 + 8 * n_dims
    struct.pack_into("<I", data, pos, 99)
    p = tmp_path / "weird.gguf"
    p.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="quantization type id 99"):
        read_gguf(p)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="no such file"):
        read_gguf(tmp_path / "nope.gguf")
    with pytest.raises(GGUFError, match="directory"):
        read_gguf(tmp_path)


def _write_custom(path: Path, arch: str, kv: dict[str, object]) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    for k, v in kv.items():
        if isinstance(v, list):
            w.add_array(k, v)
        else:
            w.add_uint32(k, int(v))  # type: ignore[arg-type]
    w.add_tensor("token_embd.weight", np.zeros((10, 64), dtype=np.float32))
    w.add_tensor("blk.0.attn_k.weight", np.zeros((32, 64), dtype=np.float16))
    w.add_tensor("blk.1.attn_k.weight", np.zeros((32, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_unknown_architecture_degrades_with_a_warning(tmp_path: Path) -> None:
    p = _write_custom(tmp_path / "x.gguf", "frobnicator", {"frobnicator.block_count": 2, "frobnicator.embedding_length": 64,
                                                          "frobnicator.attention.head_count": 4})
    meta = read_gguf(p)
    assert meta.hparams.known is False
    assert any("frobnicator" in w and "not modelled" in w for w in meta.warnings)
    assert meta.hparams.attention_layers() == [0, 1]  # plain KV on every layer
    assert meta.hparams.head_dim_k == 16  # embedding_length / head_count


def test_per_layer_head_counts_and_recurrent_layers_array(tmp_path: Path) -> None:
    p = _write_custom(tmp_path / "y.gguf", "qwen35", {
        "qwen35.block_count": 4, "qwen35.embedding_length": 64, "qwen35.attention.head_count": 4,
        "qwen35.attention.head_count_kv": [0, 2, 0, 4], "qwen35.attention.recurrent_layers": [1, 0, 1, 0],
    })
    h = read_gguf(p).hparams
    assert h.n_head_kv == [4, 2, 4, 4]  # 0 -> head_count (llama-model.cpp default)
    assert h.recurrent == [True, False, True, False]
    assert h.attention_layers() == [1, 3]


#: a damaged-header error names the file and the field or byte offset it tripped on
_NAMES_WHERE = re.compile(r"offset \d+|'[^']+'|\b[a-z_0-9]+\.[a-z_0-9.]+\b")


def _flipped(data: bytes, seed: int) -> bytes:
    """1-8 random bit flips in the first 64 KiB (the header, mostly the tokenizer, and the tensor table)."""
    rng = random.Random(seed)
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        b[rng.randrange(min(65536, len(b)))] ^= 1 << rng.randrange(8)
    return bytes(b)


def test_damaged_headers_are_clear_errors_or_plan(tiny: Path, tmp_path: Path) -> None:
    """Bit flips once made a length field read as gigabytes (MemoryError): every length and count is now
    checked against the file size first. Each damaged file is a GGUFError naming where, or plans fine."""
    data = tiny.read_bytes()
    outcomes = {"error": 0, "planned": 0}
    for seed in range(80):
        p = tmp_path / f"flip{seed}.gguf"
        p.write_bytes(_flipped(data, seed))
        try:
            meta = read_gguf(p)
            plan(meta, Settings(model=str(p), ctx_size=4096, spec_type=["draft-mtp"]))
            outcomes["planned"] += 1
        except (GGUFError, PlanError) as exc:
            msg = str(exc)
            assert str(p) in msg or p.name in msg, (seed, msg)
            assert _NAMES_WHERE.search(msg.replace(str(p), "")), (seed, msg)
            outcomes["error"] += 1
        p.unlink()
    assert outcomes["error"] >= 20 and outcomes["planned"] >= 20, outcomes


@pytest.mark.parametrize("field,at", [("n_kv", 16), ("n_tensors", 8)])
def test_huge_counts_are_refused_before_allocating(tiny: Path, tmp_path: Path, field: str, at: int) -> None:
    data = bytearray(tiny.read_bytes())
    struct.pack_into("<Q", data, at, 1 << 40)
    p = tmp_path / "huge.gguf"
    p.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="more than a .*-byte file"):
        read_gguf(p)


def test_a_string_length_read_as_gigabytes_names_the_key(tiny: Path, tmp_path: Path) -> None:
    data = bytearray(tiny.read_bytes())
    key = b"general.architecture"
    at = bytes(data).index(struct.pack("<Q", len(key)) + key) + 8 + len(key) + 4  # its value's length
    struct.pack_into("<Q", data, at, 3 << 30)
    p = tmp_path / "long.gguf"
    p.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match=r"general\.architecture.*offset \d+.*truncated or that field is damaged"):
        read_gguf(p)
