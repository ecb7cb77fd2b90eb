"""The plan follows llama-server's own context rules and words fit's moves by direction (issue 31).

llama-server b11434 caps each slot at the model's training context (server-context.cpp `n_ctx_slot`,
"the slot context (%d) exceeds the training context of the model (%d) - capping") while the KV stays
allocated for the whole per-slot context; the plan must say so instead of showing 65536 as usable.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.core.demo.tiny_model import PRESETS, write_tiny_model
from tui.core.options.settings import Settings
from tui.core.planning.devices import DeviceSpec
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.plan import plan
from tui.core.planning.result import layers_on_devices


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return read_gguf(write_tiny_model(tmp_path_factory.mktemp("t") / "nomtp.gguf", PRESETS["tiny-nomtp"]))


def test_a_context_past_training_is_capped_and_said(tiny) -> None:  # noqa: ANN001
    train = tiny.hparams.n_ctx_train
    assert train > 0
    p = plan(tiny, Settings(ctx_size=train * 16, parallel=1, fit=False))
    assert p.resolved.n_ctx_seq == train * 16
    assert p.n_ctx_slot == train
    assert f"caps each slot at {train} tokens" in p.context_note
    assert any(p.context_note in w for w in p.warnings)
    assert p.to_dict()["model"]["context"]["n_ctx_slot"] == train


def test_per_slot_division_is_counted_before_the_cap(tiny) -> None:  # noqa: ANN001
    train = tiny.hparams.n_ctx_train
    p = plan(tiny, Settings(ctx_size=train * 4, parallel=4, fit=False))  # 4 slots of `train`: no cap
    assert p.resolved.n_ctx_seq == train and p.n_ctx_slot == train
    assert p.context_note == "" and not any("training context" in w for w in p.warnings)
    p2 = plan(tiny, Settings(ctx_size=train * 8, parallel=4, fit=False))
    assert "over 4 slots" in p2.context_note and p2.n_ctx_slot == train


def test_within_training_context_no_note(tiny) -> None:  # noqa: ANN001
    p = plan(tiny, Settings(ctx_size=256, parallel=1))
    assert p.context_note == "" and p.n_ctx_slot == 256


def test_layers_worded_by_direction() -> None:
    assert layers_on_devices(2, 41, 1) == "keeps 2 of 41 layers on the GPU, the rest in host RAM"
    assert layers_on_devices(41, 41, 2) == "keeps all 41 layers on the 2 devices"
    assert layers_on_devices(0, 41, 1) == "keeps every layer in host RAM"


def test_fit_moving_layers_says_where_they_stay(tiny) -> None:  # noqa: ANN001
    """A GPU too small for the whole model: fit's move says how many layers stay on it."""
    full = plan(tiny, Settings(ctx_size=256, parallel=1), devices=[DeviceSpec("CUDA0", "big", 1e6, 1e6)])
    need = full.device("CUDA0").needed_mib
    small = DeviceSpec("CUDA0", "small", need * 0.6 + 1024, need * 0.6 + 1024)
    p = plan(tiny, Settings(ctx_size=256, parallel=1), devices=[small])
    assert p.fit.action == "move-layers", p.fit.message
    assert "offload" not in p.fit.message
    assert "layers on the GPU, the rest in host RAM" in p.fit.message
