"""The memory report parser on recorded llama-server -lv 4 logs (copies of real output in tests/data/logs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tui.core.server.memreport import MemoryReport, device_of, parse_log

LOGS = Path(__file__).parent / "data" / "logs"


@pytest.fixture(scope="module")
def mtp_full() -> str:
    return (LOGS / "mtp_full_memory.log").read_text()


@pytest.fixture(scope="module")
def rpc_ts11() -> str:
    return (LOGS / "rpc_ts11_memory.log").read_text()


def test_cpu_mtp_log_split_into_target_and_draft(mtp_full: str) -> None:
    r = parse_log(mtp_full)
    assert r.weights == {"CPU_Mapped": 1.68}
    t, d = r.target, r.draft
    assert d is not None
    assert t.kv == {"CPU": 2.0} and d.kv == {"CPU": 1.0}
    assert t.recurrent == {"CPU": 0.04} and d.recurrent == {}
    assert t.compute == {"CPU": 6.77}
    # the draft's compute line is printed twice (after the backend sampler is attached): last wins
    assert d.compute == {"CPU": 5.52}
    assert t.params["n_rs_seq"] == "3" and d.params["n_rs_seq"] == "0"
    assert t.param_int("n_outputs_max") == 4 and d.param_int("n_outputs_max") == 1
    assert t.rs_rows == 4 and t.rs_seq == 3
    assert t.kv_lines[0].cells == 4096 and t.kv_lines[0].layers == 2 and t.kv_lines[0].type_k == "f16"
    dev = r.per_device()
    assert list(dev) == ["Host"]
    assert dev["Host"]["compute"] == 6.77 and dev["Host"]["draft_compute"] == 5.52
    assert dev["Host"]["kv"] == 2.0 and dev["Host"]["draft_kv"] == 1.0
    assert r.complete


def test_breakdown_tables_by_phase(mtp_full: str) -> None:
    r = parse_log(mtp_full)
    phases = [b.phase for b in r.breakdowns]
    assert phases == ["fit", "fit-extra", "exit"]
    host = r.breakdowns[0].rows[0]
    assert (host.name, host.self_mib, host.model_mib, host.context_mib, host.compute_mib) == ("Host", 10, 1, 2, 6)
    assert r.breakdowns[1].rows[0].self_mib == 8


def test_compute_line_repeated_replaces_not_adds() -> None:
    r = MemoryReport()
    r.feed("0.00.1 I sched_reserve:        CPU compute buffer size =    10.00 MiB")
    r.feed("0.00.2 I sched_reserve:        CPU compute buffer size =    12.50 MiB")
    assert r.target.compute == {"CPU": 12.5}
    r.feed("0.00.3 I common_speculative_init_result: creating MTP draft context against the target model 'm.gguf'")
    r.feed("0.00.4 I sched_reserve:        CPU compute buffer size =     5.00 MiB")
    r.feed("0.00.5 I sched_reserve:        CPU compute buffer size =     5.50 MiB")
    assert r.target.compute == {"CPU": 12.5}
    assert r.draft is not None and r.draft.compute == {"CPU": 5.5}


def test_incremental_feed_equals_whole_parse(mtp_full: str) -> None:
    whole = parse_log(mtp_full)
    inc = MemoryReport()
    seen_complete_at = None
    for i, line in enumerate(mtp_full.splitlines()):
        inc.feed(line)
        if inc.complete and seen_complete_at is None:
            seen_complete_at = i
    assert inc.to_dict() == whole.to_dict()
    assert seen_complete_at is not None and seen_complete_at < len(mtp_full.splitlines()) - 1


def test_rpc_devices_keyed_by_endpoint(rpc_ts11: str) -> None:
    r = parse_log(rpc_ts11)
    dev = r.per_device()
    rpc = sorted(k for k in dev if k.startswith("RPC0["))
    assert len(rpc) == 2 and all(k.endswith("]") and "127.0.0.1:" in k for k in rpc)
    assert set(dev) == {"Host", *rpc}
    assert [d["name"] for d in r.devices] == ["RPC0", "RPC1"]
    assert r.target.pipeline_parallel and r.target.sched_copies == 4
    # draft KV and draft compute sit on the last device only (the MTP block's)
    last = next(k for k in rpc if dev[k]["draft_kv"] > 0)
    assert dev[last]["draft_compute"] > 0
    other = next(k for k in rpc if k != last)
    assert dev[other]["draft_kv"] == 0 and dev[other]["draft_compute"] == 0
    assert dev["Host"]["weights"] > 0  # token_embd stays on the host
    # every value equals the one printed on its line
    for line in rpc_ts11.splitlines():
        if "model buffer size" in line:
            name = line.split("load_tensors:")[1].split(" model buffer")[0].strip()
            val = float(line.rsplit("=", 1)[1].split()[0])
            assert r.weights[name] == val


def test_gpu_breakdown_row_and_jsonl() -> None:
    r = MemoryReport()
    r.feed("0.00.1 I common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |")
    r.feed("0.00.2 I common_memory_breakdown_print: |   - CUDA0 (RTX 4090)   | 24077 =  945 + (19187 = 17904 +     384 +     898) +        3945 |")
    r.feed("0.00.3 I common_memory_breakdown_print: |   - Host               |                  722 =   336 +     331 +      55                |")
    rows = r.breakdowns[0].rows
    assert (rows[0].name, rows[0].total_mib, rows[0].free_mib, rows[0].self_mib) == ("CUDA0 (RTX 4090)", 24077, 945, 19187)
    assert (rows[0].model_mib, rows[0].context_mib, rows[0].compute_mib, rows[0].unaccounted_mib) == (17904, 384, 898, 3945)
    assert (rows[1].name, rows[1].self_mib, rows[1].model_mib) == ("Host", 722, 336)
    obj = {"type": "fit_memory_breakdown", "data": {"unit": "MiB", "rows": [
        {"kind": "device", "name": "CUDA0", "description": "RTX 3090", "total": 24135, "free": 23000, "self": 900,
         "model": 500, "context": 300, "compute": 100, "unaccounted": 235},
        {"kind": "host", "name": "Host", "self": 400, "model": 300, "context": 0, "compute": 100}]}}
    assert r.feed(json.dumps(obj))
    assert r.breakdowns[-1].rows[0].name == "CUDA0 (RTX 3090)" and r.breakdowns[-1].rows[1].self_mib == 400


def test_cuda_buffers_map_to_devices() -> None:
    assert device_of("CUDA0") == "CUDA0"
    assert device_of("CUDA_Host") == "Host"
    assert device_of("CPU_Mapped") == "Host" and device_of("CPU_REPACK") == "Host"
    assert device_of("RPC0[10.0.0.2:50052]") == "RPC0[10.0.0.2:50052]"
    r = MemoryReport()
    r.feed("0.01 I load_tensors:        CUDA0 model buffer size = 17904.12 MiB")
    r.feed("0.01 I load_tensors:   CPU_Mapped model buffer size =   333.00 MiB")
    r.feed("0.01 I load_tensors:   CPU_Mapped model buffer size =     3.00 MiB")  # a second split file
    r.feed("0.02 I llama_context:  CUDA_Host  output buffer size =     0.95 MiB")
    r.feed("0.03 I llama_kv_cache:      CUDA0 KV buffer size =   680.00 MiB")
    r.feed("0.03 I llama_memory_recurrent:      CUDA0 RS buffer size =   251.25 MiB")
    r.feed("0.04 I sched_reserve:      CUDA0 compute buffer size =   493.00 MiB")
    r.feed("0.04 I sched_reserve:  CUDA_Host compute buffer size =    20.01 MiB")
    dev = r.per_device()
    assert dev["CUDA0"]["weights"] == 17904.12 and dev["Host"]["weights"] == 336.0
    assert dev["Host"]["output"] == 0.95 and dev["Host"]["compute"] == 20.01
    assert dev["CUDA0"]["kv"] == 680.0 and dev["CUDA0"]["recurrent"] == 251.25 and dev["CUDA0"]["compute"] == 493.0
    assert r.totals()["weights"] == 18240.12


def test_unrelated_lines_are_ignored() -> None:
    r = MemoryReport()
    assert not r.feed("0.00.1 I slot print_timing: id  0 | task 2 | prompt eval time = 14.58 ms")
    assert not r.feed("garbage")
    assert not r.feed("")
    assert r.per_device() == {}
    assert not r.complete
