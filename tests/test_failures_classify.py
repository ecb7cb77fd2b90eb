"""Failure classification from verbatim llama-server logs (tests/data/server_errors, recorded from
b11434) and, for GPU backends this machine lacks, lines built from llama.cpp's own format strings."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tui.core.server.classify import classify, router_model_failure
from tui.core.server.failures import Failure, FailureKind, ready_timeout, router_unknown_model, strip_prefix

DATA = Path(__file__).parent / "data" / "server_errors"


def load(name: str) -> tuple[int | None, list[str]]:
    """The log lines and the `[exit code N]` the recording ends with."""
    lines = (DATA / name).read_text().splitlines()
    codes = [int(m.group(1)) for ln in lines if (m := re.search(r"\[exit code (-?\d+)\]", ln))]
    return (codes[-1] if codes else None), lines


@pytest.mark.parametrize(
    ("log", "kind", "flag", "in_message", "in_fix"),
    [
        ("removed_no_mmap.log", FailureKind.REMOVED_ARG, "--no-mmap", "--no-mmap", "--load-mode none"),
        ("removed_draft_max.log", FailureKind.REMOVED_ARG, "--draft-max", "--draft-max", "--spec-draft-n-max"),
        ("removed_env_draft_max.log", FailureKind.REMOVED_ARG, "LLAMA_ARG_DRAFT_MAX", "LLAMA_ARG_DRAFT_MAX",
         "LLAMA_ARG_SPEC_DRAFT_N_MAX"),
        ("unknown_cli_flag.log", FailureKind.UNKNOWN_ARG, "--no-such-flag", "--no-such-flag", "--help"),
        ("unknown_cache_type_ctk.log", FailureKind.UNSUPPORTED_CACHE_TYPE, "-ctk q3_k", "q3_k", "q8_0"),
        ("unknown_cache_type_ctkd.log", FailureKind.UNSUPPORTED_CACHE_TYPE, "-ctkd foo", "foo", "q8_0"),
        ("spec_type_fork.log", FailureKind.BAD_ARG_VALUE, "--spec-type mtp", "mtp", "--spec-type draft-mtp"),
        ("spec_type_unknown.log", FailureKind.BAD_ARG_VALUE, "--spec-type draft-foo", "draft-foo", "draft-mtp"),
        ("bad_fit_value.log", FailureKind.BAD_ARG_VALUE, "--fit", "maybe", "--fit"),
        ("missing_model.log", FailureKind.MISSING_MODEL, "models/does-not-exist.gguf", "does not exist", "-m"),
        ("not_a_gguf.log", FailureKind.NOT_GGUF, "<path>", "not a GGUF", "convert"),
        ("truncated_gguf.log", FailureKind.TRUNCATED_GGUF, "trunc.gguf", "blk.2.ffn_gate.weight", "Download"),
        ("truncated_header.log", FailureKind.TRUNCATED_GGUF, "trunc_small.gguf", "truncated", "Download"),
        ("mtp_on_model_without_mtp.log", FailureKind.NO_MTP_LAYERS, "--spec-type", "tiny-qwen35-nomtp.gguf",
         "remove --spec-type draft-mtp"),
        ("preset_unknown_key.log", FailureKind.PRESET_ERROR, "no-such-option", "[a]", "no-such-option"),
        ("host_oom_kv.log", FailureKind.OOM_HOST, None, "KV cache", "-c"),
        ("host_oom_bad_alloc.log", FailureKind.OOM_HOST, None, "host memory", "RAM"),
    ],
)
def test_recorded_logs(log: str, kind: FailureKind, flag: str | None, in_message: str, in_fix: str) -> None:
    rc, lines = load(log)
    assert rc == 1
    f = classify(rc, lines, raw_log_path=Path("/logs/x.log"))
    assert f.kind == kind, f
    assert f.flag_or_file == flag
    assert in_message in f.message
    assert in_fix in f.fix
    assert f.exit_code == 1 and f.signal is None
    assert f.evidence and f.evidence in lines  # the line it rests on, verbatim
    # One paragraph: what, what to do, where the log is.
    text = f.explain()
    assert "\n" not in text and text.endswith("Full server log: /logs/x.log")


@pytest.mark.parametrize("log", ["port_in_use_by_llama_server.log", "port_in_use_by_python.log"])
def test_port_in_use(log: str) -> None:
    _, lines = load(log)
    port = re.search(r"port: (\d+)", "\n".join(lines)).group(1)  # type: ignore[union-attr]
    f = classify(1, lines)
    assert f.kind == FailureKind.PORT_IN_USE
    assert f.flag_or_file == f"--port {port}"
    assert port in f.message and "free one" in f.fix


def test_router_child_failure_is_explained_from_prefixed_lines() -> None:
    _, lines = load("router_missing_model.log")
    child = [ln for ln in lines if ln.startswith("[40989] ")]
    f = router_model_failure("a", 1, child)
    assert f.kind == FailureKind.MISSING_MODEL
    assert f.flag_or_file == "/nonexistent/x.gguf"
    assert f.message.startswith("Router model 'a':")


def test_router_child_failure_without_known_cause() -> None:
    f = router_model_failure("b", 3, ["[1234] 0.00.001.000 I srv  llama_server: initializing ..."])
    assert f.kind == FailureKind.ROUTER_MODEL_FAILED and "'b'" in f.message and "3" in f.message


def test_router_unknown_model_lists_choices() -> None:
    f = router_unknown_model("nope", ["tiny-mtp", "tiny-nomtp"])
    assert f.kind == FailureKind.ROUTER_MODEL_NOT_FOUND
    assert "tiny-mtp, tiny-nomtp" in f.message and f.flag_or_file == "nope"


# ---- signals ---------------------------------------------------------------------------------


def test_sigkill_while_serving_points_at_oom_killer() -> None:
    _, lines = load("sigkill.log")
    f = classify(-signal.SIGKILL, lines)
    assert f.kind == FailureKind.KILLED and f.signal == signal.SIGKILL
    assert "while serving a request" in f.message and "OOM killer" in f.message
    assert "dmesg" in f.fix


def test_sigkill_while_loading() -> None:
    f = classify(-9, ["0.00.001 I srv    load_model: loading model 'm.gguf'"])
    assert f.kind == FailureKind.KILLED and "while loading" in f.message


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS])
def test_crash_signals(sig: signal.Signals) -> None:
    lines = [
        "0.00.052.446 I slot launch_slot_: id  3 | task 0 | processing task, is_child = 0",
        "/src/ggml/src/ggml.c:1234: GGML_ASSERT(ne % 32 == 0) failed",
    ]
    f = classify(-sig, lines, was_ready=True)
    assert f.kind == FailureKind.CRASH
    assert sig.name in f.message and "while serving a request" in f.message
    assert "GGML_ASSERT(ne % 32 == 0) failed" in f.message


def test_shell_style_signal_exit_code() -> None:
    assert classify(128 + 11, []).kind == FailureKind.CRASH


def test_external_sigterm_is_reported() -> None:
    f = classify(-signal.SIGTERM, [], was_ready=True)
    assert f.kind == FailureKind.KILLED and "SIGTERM" in f.message


def test_clean_exit_on_its_own() -> None:
    _, lines = load("sigint.log")
    f = classify(0, lines)
    assert f.kind == FailureKind.EXITED and "code 0" in f.message


def test_unknown_cause_quotes_last_error_line() -> None:
    lines = ["0.00.001.000 I srv  llama_server: initializing ...", "0.00.002.000 E srv  something odd happened: 42"]
    f = classify(3, lines)
    assert f.kind == FailureKind.UNKNOWN
    assert "exit code 3" in f.message and "something odd happened: 42" in f.message
    assert f.evidence == lines[-1]


def test_unknown_flag_suggests_close_option() -> None:
    f = classify(1, ["error: invalid argument: --spec-draft-nmax"],
                 known_options=["--spec-draft-n-max", "--spec-draft-n-min", "--ctx-size"])
    assert f.kind == FailureKind.UNKNOWN_ARG and "--spec-draft-n-max" in f.fix


def test_ready_timeout_message() -> None:
    f = ready_timeout(180, "loading", Path("/l.log"), "0.00.001.000 I srv    load_model: loading model 'big.gguf'")
    assert f.kind == FailureKind.READY_TIMEOUT
    assert "180 s" in f.message and "loading" in f.message and "big.gguf" in f.message
    assert f.raw_log_path == Path("/l.log")


# ---- memory allocation failures on GPU backends (lines from llama.cpp's format strings) --------

CUDA_MALLOC = [
    "0.00.913.100 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2304.00 MiB on device 0: "
    "cudaMalloc failed: out of memory",
    "0.00.913.120 E ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 2415919104",
    "0.00.913.200 E llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers",
]
CUDA_RUNTIME = [
    "0.01.500.000 I common_speculative_init_result: creating MTP draft context against the target model 'm.gguf'",
    "CUDA error: out of memory",
    "  current device: 1, in function ggml_cuda_pool_leg::alloc at ggml/src/ggml-cuda/ggml-cuda.cu:412",
    "  cudaMalloc((void **) &ptr, look_ahead_size)",
    "ggml/src/ggml-cuda/ggml-cuda.cu:110: CUDA error",
]
VULKAN = [
    "ggml_vulkan: Device memory allocation of size 4294967296 failed.",
    "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
    "0.00.500.000 E llama_model_load: error loading model: unable to allocate Vulkan0 buffer",
]
METAL = ["0.00.400.000 E ggml_metal_buffer_init: error: failed to allocate buffer, size =  8192.00 MiB"]
KV_CUDA = [
    "0.00.300.000 E ggml_backend_buft_alloc_buffer_n_default: failed to allocate CUDA0 buffer of size 1073741824",
    "0.00.300.010 E llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache",
]
PINNED = ["0.00.200.000 E ggml_backend_buft_alloc_buffer_n_default: failed to allocate CUDA_Host buffer of size 1048576"]
CPU_WEIGHTS = ["0.00.100.000 E llama_model_load: error loading model: unable to allocate CPU buffer"]


@pytest.mark.parametrize(
    ("lines", "rc", "kind", "device", "in_message"),
    [
        (CUDA_MALLOC, 1, FailureKind.OOM_DEVICE, "CUDA0", "2304.00 MiB"),
        (CUDA_RUNTIME, -signal.SIGABRT, FailureKind.OOM_DEVICE, "CUDA1", "MTP draft context"),
        (VULKAN, 1, FailureKind.OOM_DEVICE, "Vulkan", "4096.00 MiB"),
        (METAL, 1, FailureKind.OOM_DEVICE, "Metal", "8192.00 MiB"),
        (KV_CUDA, 1, FailureKind.OOM_DEVICE, "CUDA0", "the KV cache"),
        (PINNED, 1, FailureKind.OOM_HOST, "CUDA_Host", "host memory"),
        (CPU_WEIGHTS, 1, FailureKind.OOM_HOST, "CPU", "the model weights"),
    ],
)
def test_memory_allocation_failures(lines: list[str], rc: int, kind: FailureKind, device: str, in_message: str) -> None:
    f = classify(rc, lines)
    assert f.kind == kind, f
    assert f.flag_or_file == device
    assert in_message in f.message
    if kind == FailureKind.OOM_DEVICE:
        assert "-ctk" in f.fix and "-c" in f.fix


def test_strip_prefix_handles_router_timestamp_and_level() -> None:
    assert strip_prefix("[40989] 0.00.008.327 E gguf_init_from_file: x\n") == "gguf_init_from_file: x"
    assert strip_prefix("error: invalid argument: --x") == "error: invalid argument: --x"


def test_failure_is_plain_data() -> None:
    f = Failure(FailureKind.UNKNOWN, "m", fix="f")
    assert f.explain() == "m f"


def test_rpc_buffer_allocation_failure_is_oom_not_missing_mtp() -> None:
    """A draft context whose RPC compute buffer cannot be allocated ends with 'failed to create MTP
    context'; the allocation error before it is the real cause."""
    from tui.core.server.classify import classify
    from tui.core.server.failures import FailureKind

    lines = [
        "llama_context: n_ctx = 262144",
        "ggml_backend_rpc_buffer_type_alloc_buffer: failed to allocate RPC0[127.0.0.1:50052] buffer of size 1073741824",
        "common_speculative_init_result: failed to create MTP context",
        "srv    load_model: failed to create MTP context",
    ]
    f = classify(1, lines, raw_log_path=None, argv=["--spec-type", "draft-mtp"], was_ready=False, known_options=None)
    assert f.kind == FailureKind.OOM_DEVICE, f
