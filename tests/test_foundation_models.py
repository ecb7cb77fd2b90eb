"""The tiny model generator: deterministic, small, and served by the real llama-server with MTP."""

from __future__ import annotations

import hashlib
from pathlib import Path

import gguf
import pytest

from tests.helpers.llama import ServerFailed, llama_server
from tui.core.demo.tiny_model import PRESETS, expected_acceptance_band, preset, write_tiny_model

MTP = ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "--spec-draft-n-min", "1"]
GREEDY = {"prompt": "Hello world", "n_predict": 256, "temperature": 0, "ignore_eos": True, "cache_prompt": False}


def test_generator_is_deterministic_and_small(tmp_path: Path) -> None:
    a = write_tiny_model(tmp_path / "a.gguf", PRESETS["tiny-mtp"])
    b = write_tiny_model(tmp_path / "b.gguf", PRESETS["tiny-mtp"])
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    assert a.stat().st_size < 5 * 1024 * 1024
    other = write_tiny_model(tmp_path / "c.gguf", preset("tiny-mtp", seed=99))
    assert other.read_bytes() != a.read_bytes()


@pytest.mark.parametrize("name", ["tiny-mtp", "tiny-nomtp", "tiny-moe-mtp", "tiny-mtp-q8_0"])
def test_generator_metadata(tmp_path: Path, name: str) -> None:
    spec = PRESETS[name]
    path = write_tiny_model(tmp_path / f"{name}.gguf", spec)
    reader = gguf.GGUFReader(path)
    arch = reader.fields["general.architecture"].contents()
    assert arch == spec.arch
    block_count = reader.fields[f"{arch}.block_count"].contents()
    names = {t.name for t in reader.tensors}
    if spec.mtp:
        assert reader.fields[f"{arch}.nextn_predict_layers"].contents() == 1
        assert block_count == spec.n_layer + 1
        assert f"blk.{spec.n_layer}.nextn.eh_proj.weight" in names
    else:
        assert f"{arch}.nextn_predict_layers" not in reader.fields
        assert block_count == spec.n_layer
        assert not any("nextn" in n for n in names)
    if spec.arch == "qwen35moe":
        assert "blk.0.ffn_gate_exps.weight" in names


def test_generator_rejects_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dtype"):
        write_tiny_model(tmp_path / "x.gguf", preset("tiny-mtp", dtype="q2_k"))
    with pytest.raises(ValueError, match="mtp_agree"):
        write_tiny_model(tmp_path / "x.gguf", preset("tiny-mtp", mtp_agree=1.5))


def _acceptance(server_bin: Path, model: Path, root: Path) -> tuple[int, int]:
    drafted = accepted = 0
    with llama_server(server_bin, model, MTP, root) as srv:
        for _ in range(3):
            t = srv.post("/completion", GREEDY)["timings"]
            drafted += t.get("draft_n", 0)
            accepted += t.get("draft_n_accepted", 0)
    return drafted, accepted


@pytest.mark.parametrize("name", ["tiny-mtp", "tiny-mtp-a50", "tiny-mtp-random", "tiny-moe-mtp", "tiny-mtp-q8_0"])
def test_real_server_acceptance_matches_generator(
    server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path, name: str
) -> None:
    drafted, accepted = _acceptance(server_bin, tiny_models[name], tmp_path)
    assert drafted > 0, "draft-mtp produced no drafts"
    rate = accepted / drafted
    low, high = expected_acceptance_band(PRESETS[name], n_max=3)
    print(f"{name}: {accepted}/{drafted} = {rate:.4f} (band {low:.3f}..{high:.3f})")
    assert low <= rate <= high


def test_real_server_without_mtp_spec_has_no_draft_keys(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    with llama_server(server_bin, tiny_models["tiny-mtp"], [], tmp_path) as srv:
        t = srv.post("/completion", GREEDY)["timings"]
    assert t["predicted_n"] == 256
    assert "draft_n" not in t  # the keys are absent, not 0, when nothing was drafted


def test_real_server_refuses_mtp_on_model_without_mtp(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ServerFailed) as info:
        with llama_server(server_bin, tiny_models["tiny-nomtp"], MTP, tmp_path):
            pass
    err = info.value
    assert err.rc != 0
    text = "\n".join(err.log)
    assert "doesn't contain MTP layers" in text or "failed to create MTP context" in text, text[-2000:]
