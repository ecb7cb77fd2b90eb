"""Exact mode without a server: the dry-run log parser, fit's choice as flags, the sparse copy, the
stand-ins' fit targets, the argv and the cache key. The lines below are llama.cpp b11434's formats
(common/fit.cpp, src/llama-*.cpp) as `--log-jsonl -lv 5` prints them."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tui.core.options.argv import settings_from_argv
from tui.core.options.reader import value, values
from tui.core.planning.breakdown import DryRunLog
from tui.core.planning.devices import DeviceSpec
from tui.core.planning.dryrun import dry_run_args
from tui.core.planning.exact import ExactResult, cache_key
from tui.core.planning.exact_runner import ExactRunner
from tui.core.planning.fitchoice import FitChoice, choice_from_trace
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.sparse import header_bytes, header_hash, needs_sparse, sparse_copy
from tui.core.planning.standin import StandInError, fit_targets
from tui.core.demo.tiny_model import PRESETS, write_tiny_model


def _log(msg: str, level: str = "info") -> str:
    return json.dumps({"type": "log", "time": 1, "level": level, "msg": msg + "\n"})


def _bd(rows: list[dict]) -> str:
    return json.dumps({"type": "fit_memory_breakdown", "data": {"unit": "MiB", "rows": rows}})


def _measurement(kv: float, rs: float, compute: float, output: float) -> list[str]:
    return [
        _log("llama_model_loader: loaded meta data with 34 key-value pairs and 67 tensors from m.gguf (version GGUF V3 (latest))"),
        _log("load_tensors: loading model tensors, this can take a while... (load_mode = none)"),
        _log("load_tensors:          CPU model buffer size =     0.00 MiB"),
        _log("llama_context: constructing llama_context"),
        _log("llama_context: n_ctx                 = 4096"),
        _log(f"llama_context:        CPU  output buffer size =     {output:.2f} MiB"),
        _log("llama_kv_cache:        CPU KV buffer size =     0.00 MiB"),
        _log(f"llama_kv_cache: size =    {kv:.2f} MiB (  4096 cells,   2 layers,  4/1 seqs), K (f16):    {kv / 2:.2f} MiB, V (f16):    {kv / 2:.2f} MiB"),
        *([_log(f"llama_memory_recurrent:        CPU RS buffer size =     {rs:.2f} MiB")] if rs else []),
        _log(f"sched_reserve:        CPU compute buffer size =     {compute:.2f} MiB"),
        _log("sched_reserve: reserve took 3.98 ms, sched copies = 1"),
    ]


NO_CHANGE = [
    _log("srv    load_model: loading model 'm.gguf'"),
    _log("cmn  common_init_: fitting params to device memory ..."),
    _log("common_params_fit_impl: getting device memory data for initial parameters:"),
    *_measurement(2.0, 0.17, 6.77, 0.01),
    _bd([{"kind": "host", "name": "Host", "self": 10, "model": 1, "context": 2, "compute": 6}]),
    _log("operator(): getting device memory data for the extra model at a context size of 4096:"),
    *_measurement(1.0, 0.0, 5.52, 0.01),
    _bd([{"kind": "host", "name": "Host", "self": 8, "model": 1, "context": 1, "compute": 5}]),
    _log("common_params_fit_impl: projected to use 17 MiB of host memory vs. 24105 MiB of total host memory"),
    _log("common_params_fit_impl: will leave 24088 >= 1024 MiB of system memory, no changes needed"),
    _log("common_fit_params: successfully fit params to free device memory"),
    _log("common_fit_params: fitting params to free memory took 0.01 seconds"),
    _log("load_tensors: loading model tensors, this can take a while... (load_mode = mmap)"),
]


def test_parser_splits_target_and_draft_and_stops_at_fits_decision() -> None:
    log = DryRunLog()
    done_at = None
    for i, line in enumerate(NO_CHANGE):
        log.feed(line)
        if log.done and done_at is None:
            done_at = i
    assert done_at == len(NO_CHANGE) - 4  # fit's decision ("no changes needed"): nothing it measures comes after
    target, draft = log.step1()
    assert target is not None and draft is not None
    assert (target.label, draft.label, draft.n_ctx) == ("target", "extra", 4096)
    assert [(r.kind, r.model, r.context, r.compute) for r in target.rows] == [("host", 1, 2, 6)]
    host_t = target.detail.per_device()["Host"]
    assert (host_t["compute"], host_t["recurrent"], host_t["output"]) == (6.77, 0.17, 0.01)
    assert target.detail.target.kv_lines[0].size_mib == 2.0
    assert draft.detail.per_device()["Host"]["compute"] == 5.52
    assert log.fit.status == "none" and log.fit.seconds == 0.01 and not log.fit.changed


def test_plain_text_lines_parse_the_same() -> None:
    log = DryRunLog()
    for line in NO_CHANGE:
        obj = json.loads(line)
        log.feed(obj["msg"] if obj["type"] == "log" else line)
    assert log.fit.finished and len(log.measurements) == 2


def test_unknown_architecture_is_a_fatal_error() -> None:
    log = DryRunLog()
    log.feed(_log("cmn  common_init_: fitting params to device memory ..."))
    log.feed(_log("llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'foo'", "error"))
    assert log.done and "unknown model architecture: 'foo'" in log.errors[0]


def test_a_warning_is_not_fatal() -> None:
    log = DryRunLog()
    log.feed(_log("cmn  common_init_: fitting params to device memory ..."))
    log.feed(_log("operator(): failed to measure the memory of the extra model, fitting without it: failed to load model", "warn"))
    assert not log.done


MOVED = [
    _log("cmn  common_init_: fitting params to device memory ..."),
    _log("common_params_fit_impl: getting device memory data for initial parameters:"),
    *_measurement(2.0, 0.0, 6.0, 0.01),
    _bd([{"kind": "device", "name": "RPC0", "description": "127.0.0.1:1", "total": 100, "free": 100, "self": 90, "model": 80, "context": 5, "compute": 5},
         {"kind": "device", "name": "RPC1", "description": "127.0.0.1:2", "total": 100, "free": 100, "self": 90, "model": 80, "context": 5, "compute": 5},
         {"kind": "host", "name": "Host", "self": 1, "model": 1, "context": 0, "compute": 0}]),
    _log("common_params_fit_impl: projected memory use with initial parameters [MiB]:"),
    _log("common_params_fit_impl: cannot meet free memory targets on all devices, need to use 80 MiB less in total"),
    _log("common_params_fit_impl: context size reduced from 8192 to 4096 -> need 3 MiB less memory in total"),
    _log("common_params_fit_impl: entire model should be fit across devices by reducing context"),
    _log("common_params_fit_impl: filling dense-only layers back-to-front:"),
    _log("common_params_fit_impl:   - RPC1 (127.0.0.1:2): 13 layers,     60 MiB used,     40 MiB free"),
    _log("common_params_fit_impl:   - RPC0 (127.0.0.1:1): 28 layers,     50 MiB used,     50 MiB free"),
    _log("common_params_fit_impl: converting dense-only layers to full layers and filling them front-to-back with overflow to next device/system memory:"),
    _log("common_params_fit_impl: set ngl_per_device[0].(n_layer, n_part, overflow_type)=(28, 20, UP), id_dense_start=0"),
    _log("common_params_fit_impl:   - RPC0 (127.0.0.1:1): 28 layers (20 overflowing),     70 MiB used,     30 MiB free"),
    _log("common_params_fit_impl:   - RPC1 (127.0.0.1:2): 13 layers (12 overflowing),     70 MiB used,     30 MiB free"),
    _log("common_fit_params: successfully fit params to free device memory"),
    _log("common_fit_params: fitting params to free memory took 2.10 seconds"),
]


class _HP:  # the two fields choice_from_trace reads
    n_layer = 40
    n_nextn = 1


def test_moved_layers_become_ngl_ts_and_overrides() -> None:
    log = DryRunLog()
    for line in MOVED:
        log.feed(line)
    assert log.fit.changed and log.fit.reduced_ctx == 4096
    s = settings_from_argv(["-m", "m.gguf", "--spec-type", "draft-mtp"]).settings
    c = choice_from_trace(log, s, _HP(), 2, ["RPC0[127.0.0.1:1]", "RPC0[127.0.0.1:2]"])  # type: ignore[arg-type]
    assert c.changed and c.action == "move-layers"
    assert (c.n_ctx, c.n_gpu_layers, c.tensor_split) == (4096, 41, [28.0, 13.0])
    # fit.cpp set_ngl_tensor_split_tbo: il0 = hp_ngl + 1 - ngl = 1; device 0: 8 full layers (1..8),
    # then 20 partial (9..28), the first overflowing (UP) to the next device; device 1: 1 full, 12 partial
    assert c.overrides[0] == r"blk\.9\.ffn_(gate|gate_up|down).*=RPC0[127.0.0.1:2]"
    assert c.overrides[1] == r"blk\.10\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU"
    assert len(c.overrides) == 32 and c.overrides[20].startswith(r"blk\.30\.")
    flags = c.flags()
    assert value(flags, "-ngl") == "41" and value(flags, "-ts") == "28,13" and len(values(flags, "-ot")[0].split(",")) == 32
    pinned = c.apply(s)
    assert pinned.ctx_size == 4096 and pinned.n_gpu_layers == "41" and pinned.tensor_split == [28.0, 13.0]
    assert FitChoice.from_dict(c.to_dict()) == c


def test_fit_off_pins_context_and_layers() -> None:
    s = settings_from_argv(["-m", "m.gguf", "-fit", "off", "-np", "2"]).settings
    args = dry_run_args(s, "/x/m.gguf", n_ctx_train=32768)
    assert value(args, "--fit") == "on" and value(args, "--ctx-size") == "32768"
    assert value(args, "--n-gpu-layers") == "all" and "--log-jsonl" in args and value(args, "-lv") == "5"
    assert value(args, "--model") == "/x/m.gguf"
    assert choice_from_trace(DryRunLog(), s, _HP(), 0, []).action == "off"  # type: ignore[arg-type]


def test_dry_run_args_keep_the_users_memory_flags_and_drop_the_rest() -> None:
    s = settings_from_argv(["-m", "m.gguf", "-c", "8192", "-ctk", "q8_0", "--spec-type", "draft-mtp", "-t", "7",
                            "--api-key", "secret", "--port", "8080", "-fitt", "512"]).settings
    args = dry_run_args(s, "m.gguf", rpc=["127.0.0.1:5000"], fit_targets=[100, 200])
    assert value(args, "--ctx-size") == "8192" and value(args, "--cache-type-k") == "q8_0"
    assert value(args, "--fit-target") == "100,200" and value(args, "--rpc") == "127.0.0.1:5000"
    assert "secret" not in args and value(args, "--port") is None and value(args, "-t") == "1"


def test_cache_key_follows_memory_settings_not_threads(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("x")
    s1 = settings_from_argv(["-m", "m.gguf", "-c", "4096", "-t", "2"]).settings
    s2 = settings_from_argv(["-m", "other.gguf", "-c", "4096", "-t", "8"]).settings
    s3 = settings_from_argv(["-m", "m.gguf", "-c", "8192"]).settings
    k = lambda s, devs=(): cache_key("h", dry_run_args(s, "M"), list(devs), binary, False)  # noqa: E731
    assert k(s1) == k(s2)
    assert k(s1) != k(s3)
    assert k(s1) != k(s1, [DeviceSpec("CUDA0", "x", 100, 100)])
    assert k(s1) != cache_key("other-header", dry_run_args(s1, "M"), [], binary, False)


def test_sparse_copy_has_the_header_and_the_size_but_no_data(tmp_path: Path) -> None:
    src = write_tiny_model(tmp_path / "m.gguf", PRESETS["tiny-mtp"])
    meta = read_gguf(src)
    copy = sparse_copy(meta, tmp_path / "cache")
    assert copy.stat().st_size == meta.file_size
    data = copy.read_bytes()
    assert data[: meta.data_offset] == header_bytes(meta)
    assert data[meta.data_offset:] == bytes(meta.file_size - meta.data_offset)
    again = read_gguf(copy)
    assert [t.name for t in again.tensors] == [t.name for t in meta.tensors]
    assert header_hash(again) == header_hash(meta)
    assert sparse_copy(meta, tmp_path / "cache") == copy  # reused
    assert needs_sparse(meta)  # every file: no dry run ever reads the user's tensor data
    assert not needs_sparse(meta, threshold=meta.file_size)


def test_stand_in_targets_make_fit_see_the_simulated_free_memory() -> None:
    devs = [DeviceSpec("CUDA0", "sim", 24576, 20000), DeviceSpec("CUDA1", "sim", 24576, 10000)]
    assert fit_targets(devs, [1024], host_mib=64000) == [64000 - 20000 + 1024, 64000 - 10000 + 1024]
    assert fit_targets(devs, [512, 256], host_mib=64000) == [64000 - 20000 + 512, 64000 - 10000 + 256]
    with pytest.raises(StandInError, match="more than this machine's 16000 MiB"):
        fit_targets(devs, [1024], host_mib=16000)


def _fake_plan(started: threading.Event) -> Callable[..., ExactResult]:
    def fake(settings: str, *, cancel: threading.Event) -> ExactResult:
        if settings == "slow":
            started.set()
            cancel.wait(30)  # bounded: a newer submit cancels it at once
            return ExactResult("cancelled", "cancelled")
        return ExactResult("exact", settings)
    return fake


def test_runner_delivers_only_the_newest_request() -> None:
    started, delivered = threading.Event(), threading.Event()
    got: list[tuple[int, str]] = []
    runner = ExactRunner(lambda rid, res: (got.append((rid, res.reason)), delivered.set()), debounce_s=0,
                         plan_fn=_fake_plan(started))
    try:
        runner.submit("slow")
        assert started.wait(10)
        newest = runner.submit("B")
        assert delivered.wait(10)
    finally:
        runner.close()
    assert got == [(newest, "B")]


def test_runner_debounces_and_never_delivers_a_stale_result() -> None:
    got: list[tuple[int, str]] = []
    last_done = threading.Event()
    names: dict[int, str] = {}

    def on_result(rid: int, res: ExactResult) -> None:
        got.append((rid, res.reason))
        if rid == 3:
            last_done.set()

    runner = ExactRunner(on_result, debounce_s=0.2, plan_fn=_fake_plan(threading.Event()))
    try:
        for s in ("A", "B", "C"):
            names[runner.submit(s)] = s
        assert last_done.wait(10)
    finally:
        runner.close()
    assert got[-1] == (3, "C") and all(names[rid] == reason for rid, reason in got)


def test_an_assert_in_the_server_is_a_fatal_error_named_plainly() -> None:
    log = DryRunLog()
    log.feed(_log("cmn  common_init_: fitting params to device memory ..."))
    log.feed("/src/llama.cpp/src/llama-vocab.cpp:2578: GGML_ASSERT(id_to_token.size() == token_to_id.size()) failed")
    assert log.done and log.errors == ["GGML_ASSERT(id_to_token.size() == token_to_id.size()) failed"]


def test_fit_summary_lines_match_gpus_whose_description_the_breakdown_shortens() -> None:
    """fit names devices "CUDA0 (NVIDIA GeForce RTX 4090)"; the breakdown row strips the vendor prefixes."""
    rows = [{"kind": "device", "name": f"CUDA{i}", "description": "RTX 4090", "total": 24000, "free": 23000, "self": 1,
             "model": 1, "context": 0, "compute": 0} for i in range(2)] + [{"kind": "host", "name": "Host", "self": 0,
                                                                              "model": 0, "context": 0, "compute": 0}]
    lines = [
        _log("cmn  common_init_: fitting params to device memory ..."),
        _log("common_params_fit_impl: getting device memory data for initial parameters:"),
        *_measurement(2.0, 0.0, 6.0, 0.01), _bd(rows),
        _log("common_params_fit_impl: projected memory use with initial parameters [MiB]:"),
        _log("common_params_fit_impl:   - CUDA1 (NVIDIA GeForce RTX 4090): 10 layers,  20000 MiB used,   3000 MiB free"),
        _log("common_params_fit_impl:   - CUDA0 (NVIDIA GeForce RTX 4090): 31 layers,  21000 MiB used,   2000 MiB free"),
        _log("common_fit_params: successfully fit params to free device memory"),
        _log("common_fit_params: fitting params to free memory took 1.00 seconds"),
    ]
    log = DryRunLog()
    for line in lines:
        log.feed(line)
    s = settings_from_argv(["-m", "m.gguf"]).settings

    class Dense:
        n_layer = 40
        n_nextn = 0

    c = choice_from_trace(log, s, Dense(), 2, ["CUDA0", "CUDA1"])  # type: ignore[arg-type]
    assert (c.n_gpu_layers, c.tensor_split, c.overrides) == (41, [31.0, 10.0], [])
