"""Value types, llama-server defaults and accepted ranges: written once, read by everything.

Why one place: validation, the planner, the form's placeholders and the sweep all need "ubatch
defaults to 512" or "n-min is 0..1024"; each copy drifted. Defaults are b11434's `common.h`; ranges
are what `common/arg.cpp` handlers accept (their `throw`s), plus bounds mtp-tune adds where the
server would accept a value that cannot work (each says why). Keyed by canonical spelling.
"""

from __future__ import annotations

from tui.core.options.spec import ValueRule

__all__ = ["CACHE_TYPES", "FLASH_ATTN", "LOAD_MODES", "MAX_DEVICES", "RULES", "SPEC_TYPES", "SPLIT_MODES"]

#: Devices (GPUs and RPC servers together) one llama-server b11434 can drive: `llama_max_devices()` is
#: 16 (src/llama.cpp:86), the model keeps a 16-entry tensor split and reads one entry per device
#: (llama-model.cpp:1283, 1559), and CUDA and RPC builds stop at 16 too (GGML_CUDA_MAX_DEVICES,
#: GGML_RPC_MAX_SERVERS). A 100-server `--rpc` can never launch.
MAX_DEVICES = 16

#: KV cache types accepted by -ctk/-ctv/-ctkd/-ctvd in llama.cpp b11434 (arg.cpp:304-314).
CACHE_TYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
#: Speculative types (speculative.cpp:72-84).
SPEC_TYPES: tuple[str, ...] = (
    "none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
)
SPLIT_MODES: tuple[str, ...] = ("none", "layer", "row", "tensor")
LOAD_MODES: tuple[str, ...] = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")
FLASH_ATTN: tuple[str, ...] = ("auto", "on", "off")

_TOKENS = "it is a number of tokens"
_DRAFT = "it is a number of draft tokens"

RULES: dict[str, ValueRule] = {
    "--model": ValueRule("text"),
    "--hf-repo": ValueRule("text"),
    "--ctx-size": ValueRule("int", 0, 0, None, "0 means the model's training context", source="arg.cpp:1642"),
    "--batch-size": ValueRule("int", 2048, 1, None, "the logical batch must hold at least one token", source="common.h:456"),
    "--ubatch-size": ValueRule("int", 512, 1, None, "the micro-batch must hold at least one token", source="common.h:457"),
    "--parallel": ValueRule("int", -1, -1, None, "-1 means auto; 0 is refused", source="arg.cpp:2547"),
    "--threads": ValueRule("int", -1, -1, None, "-1 means all cores"),
    "--threads-batch": ValueRule("int", -1, -1, None, "-1 means the same as threads"),
    "--spec-type": ValueRule("spec", (), choices=SPEC_TYPES, source="speculative.cpp:72"),
    # arg.cpp:4153 refuses < 0; the upper bound is the batch (checked against batch-size by validation).
    "--spec-draft-n-max": ValueRule("int", 3, 0, None, _DRAFT, source="arg.cpp:4150"),
    "--spec-draft-n-min": ValueRule("int", 0, 0, None, _DRAFT, source="arg.cpp:4160"),
    "--spec-draft-p-min": ValueRule("float", 0.0, 0.0, 1.0, "it is a probability", source="arg.cpp:4207"),
    "--spec-ngram-mod-n-min": ValueRule("int", 48, 0, 1024, "llama-server refuses others", source="arg.cpp:4284"),
    "--spec-ngram-mod-n-max": ValueRule("int", 64, 0, 1024, "llama-server refuses others", source="arg.cpp:4294"),
    "--spec-ngram-mod-n-match": ValueRule("int", 24, 1, 1024, "llama-server refuses others", source="arg.cpp:4304"),
    "--cache-type-k": ValueRule("choice", "f16", choices=CACHE_TYPES),
    "--cache-type-v": ValueRule("choice", "f16", choices=CACHE_TYPES),
    "--spec-draft-type-k": ValueRule("choice", "f16", choices=CACHE_TYPES),
    "--spec-draft-type-v": ValueRule("choice", "f16", choices=CACHE_TYPES),
    "--flash-attn": ValueRule("choice", "auto", choices=FLASH_ATTN),
    "--fit": ValueRule("onoff", True),
    "--fit-target": ValueRule("list_int", 1024, 0, None, "it is the MiB to keep free per device", source="common.h:486"),
    "--fit-ctx": ValueRule("int", 4096, 0, None, _TOKENS, source="common.h:483"),
    "--gpu-layers": ValueRule("ngl", "auto"),
    "--split-mode": ValueRule("choice", "layer", choices=SPLIT_MODES),
    "--tensor-split": ValueRule("list_float", None, 0.0, None, "proportions must be 0 or more"),
    "--main-gpu": ValueRule("int", 0, 0, None, "it is a device index", source="common.h:479"),
    "--cpu-moe": ValueRule("flag", False),
    "--n-cpu-moe": ValueRule("int", None, 0, None, "it is a number of layers", source="arg.cpp:2773"),
    "--load-mode": ValueRule("choice", "auto", choices=LOAD_MODES),
    "--mmproj-auto": ValueRule("flag", True),
    "--cache-ram": ValueRule("int", 8192, -1, None, "-1 means no limit, 0 turns the cache off", source="common.h:638"),
    "--rpc": ValueRule("list_str"),
    "--host": ValueRule("text", "127.0.0.1"),
    "--port": ValueRule("int", 8080, 0, 65535, "0 lets the system pick a port", source="common.h:626"),
    "--api-key": ValueRule("text"),
    "--metrics": ValueRule("flag", False),
}
