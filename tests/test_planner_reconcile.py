"""Reconciliation: predicted vs reported per device and component, differences as data."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.core.planning.gguf_reader import read_gguf
from tui.core.server.memreport import parse_log
from tui.core.planning.plan import plan
from tui.core.planning.reconcile import reconcile
from tui.core.options.settings import Settings
from tui.core.demo.tiny_model import PRESETS, write_tiny_model

LOGS = Path(__file__).parent / "data" / "logs"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return read_gguf(write_tiny_model(tmp_path_factory.mktemp("r") / "tiny-mtp.gguf", PRESETS["tiny-mtp"]))


def test_recorded_cpu_launch_reconciles(tiny) -> None:  # noqa: ANN001
    # the recorded log is tiny-mtp at -c 4096 -np 1 --spec-type draft-mtp (same generator, same shapes)
    report = parse_log((LOGS / "mtp_full_memory.log").read_text())
    p = plan(tiny, Settings(ctx_size=4096, parallel=1, spec_type=["draft-mtp"], fit=False), [])
    rec = reconcile(p, report)
    assert not rec.unmatched_devices
    by = {d.component: d for d in rec.diffs}
    assert set(by) == {"weights", "kv", "draft_kv", "recurrent", "compute", "draft_compute", "output"}
    for c in ("weights", "kv", "draft_kv", "recurrent"):
        assert abs(by[c].error_mib) <= 0.01, by[c].to_dict()
    assert by["kv"].reported_mib == 2.0 and by["draft_kv"].reported_mib == 1.0
    assert not rec.failures()
    d = rec.to_dict()
    assert {"device", "component", "predicted_mib", "reported_mib", "error_mib", "error_pct"} <= set(d["diffs"][0])


def test_differences_are_signed_and_devices_unmatched_are_listed(tiny) -> None:  # noqa: ANN001
    report = parse_log("\n".join([
        "0.1 I load_tensors:   CPU_Mapped model buffer size =     1.00 MiB",
        "0.2 I llama_kv_cache:        CPU KV buffer size =    10.00 MiB",
        "0.3 I llama_kv_cache:      CUDA0 KV buffer size =     5.00 MiB",
        "0.4 I sched_reserve:        CPU compute buffer size =   100.00 MiB",
    ]))
    p = plan(tiny, Settings(ctx_size=4096, parallel=1, fit=False), [])
    rec = reconcile(p, report)
    assert "CUDA0" in rec.unmatched_devices
    kv = next(d for d in rec.diffs if d.device == "Host" and d.component == "kv")
    assert kv.error_mib == pytest.approx(2.0 - 10.0)
    assert kv.error_rel == pytest.approx(-0.8)
    cuda = [d for d in rec.diffs if d.device == "CUDA0"]
    assert [(d.component, d.predicted_mib, d.reported_mib) for d in cuda] == [("kv", 0.0, 5.0)]
    fails = {(d.device, d.component) for d in rec.failures()}
    assert ("Host", "kv") in fails and ("Host", "compute") in fails and ("CUDA0", "kv") in fails
    assert rec.max_abs_error("kv") == pytest.approx(8.0)
