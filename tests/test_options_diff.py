"""Stored settings compared as llama-server reads them: a value left out equals its default typed out,
and each difference is spelled as the option and value on a llama-server command line."""

from __future__ import annotations

from tui.core.options.diff import SettingChange, settings_changes
from tui.core.options.settings import Settings, settings_json

#: Every default of b11434 typed out (or spelled another way llama-server reads the same).
TYPED_DEFAULTS = {
    "batch_size": 2048, "ubatch_size": 512, "ctx_size": 0, "parallel": -1, "flash_attn": "auto", "fit": True,
    "fit_target": [1024], "fit_ctx": 4096, "n_gpu_layers": "auto", "cache_type_k": "f16", "cache_type_v": "f16",
    "cache_type_k_draft": "f16", "spec_type": ["none"], "spec_draft_n_max": 3, "spec_draft_p_min": 0.0,
    "cpu_moe": False, "no_mmproj": False, "split_mode": "layer", "main_gpu": 0, "tensor_split": [], "rpc": [],
    "extra_args": [], "cache_ram": 8192, "load_mode": "auto",
}


def test_a_default_left_out_equals_it_typed_out() -> None:
    assert settings_changes({"model": "/m.gguf"}, {"model": "/m.gguf", **TYPED_DEFAULTS}) == ()
    # What the stores hold: the cockpit keeps set fields only, the lab every field (None where unset).
    left_out = settings_json(Settings(model="/m.gguf"))
    every_field = settings_json(Settings(model="/m.gguf", batch_size=2048, fit=True), only_set=False)
    assert settings_changes(left_out, every_field) == ()


def test_mtp_is_spelled_as_llama_server_reads_it() -> None:
    changes = settings_changes({"spec_type": [], "spec_draft_n_max": None},
                               {"spec_type": ["draft-mtp"], "spec_draft_n_max": 2})
    assert changes == (
        SettingChange("spec_type", "--spec-type", "(not given)", "draft-mtp"),
        SettingChange("spec_draft_n_max", "--spec-draft-n-max", "(default 3)", "2"),
    )
    assert [str(c) for c in changes] == ["--spec-type (not given) -> draft-mtp", "--spec-draft-n-max (default 3) -> 2"]


def test_real_differences_name_the_flag_and_both_values() -> None:
    a = {"batch_size": 4096, "cpu_moe": True, "fit_target": [512, 2048], "extra_args": ["-ot", "exps=CPU"], "port": 1}
    b = {"fit": False, "port": 2, "future_knob": [1, 2]}
    assert [str(c) for c in settings_changes(a, b, ignore={"port"})] == [  # command-line order, then the rest
        "--batch-size 4096 -> (default 2048)",
        "--fit (default on) -> off",
        "--fit-target 512,2048 -> (default 1024)",
        "--cpu-moe given -> (not given)",
        "extra arguments -ot exps=CPU -> (none)",
        "future_knob (not given) -> 1,2",
    ]
    assert settings_changes(None, None) == ()
    assert settings_changes({"port": 1}, {"port": 2}, ignore={"port"}) == ()
