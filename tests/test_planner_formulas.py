"""Planner formulas on the shape-only Qwen3.6-35B-A3B and the tiny models: KV, draft KV, recurrent
state, placement (-ngl/-ts/-mg/-sm/-cmoe/-ncmoe), pipeline copies, risk, --fit, and the CLI shape.

Reference numbers are llama-server.md §6.2 (checked there against the real server) and
multi-device.md (layer placement)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.devices import HOST, DeviceSpec
from tui.core.planning.errors import PlanError
from tui.core.planning.plan import plan
from tui.core.planning.resolve import resolve
from tui.core.options.settings import Settings
from tests.helpers.shapemodel import write_shape_model
from tui.core.demo.tiny_model import PRESETS, write_tiny_model

MTP = ["draft-mtp"]


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    path = write_shape_model(tmp_path_factory.mktemp("shape") / "qwen36-shape.gguf")
    return read_gguf(path)


@pytest.fixture(scope="module")
def nomtp(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return read_gguf(write_tiny_model(tmp_path_factory.mktemp("t") / "nomtp.gguf", PRESETS["tiny-nomtp"]))


def cpu(meta, **kw) -> dict[str, float]:  # noqa: ANN001
    s = Settings(fit=False, **kw)
    return plan(meta, s, []).device(HOST).components


def gpus(n: int, mib: float = 24576.0) -> list[DeviceSpec]:
    return [DeviceSpec(f"CUDA{i}", f"GPU {i}", mib, mib) for i in range(n)]


@pytest.mark.parametrize(("ctk", "ctx", "main_mib", "draft_mib"), [
    ("f16", 65536, 1280.00, 128.00),
    ("q8_0", 65536, 680.00, 128.00),  # -ctk/-ctv q8_0 without -ctkd: the draft stays f16
    ("q4_0", 65536, 360.00, 128.00),
    ("f16", 100000, 1955.00, 195.50),  # 100000 is padded to 100096 cells
    ("q8_0", 100000, 1038.59, 195.50),
])
def test_kv_table(qwen, ctk: str, ctx: int, main_mib: float, draft_mib: float) -> None:  # noqa: ANN001
    c = cpu(qwen, ctx_size=ctx, parallel=1, spec_type=MTP, cache_type_k=ctk, cache_type_v=ctk)
    assert c["kv"] == pytest.approx(main_mib, abs=0.01)
    assert c["draft_kv"] == pytest.approx(draft_mib, abs=0.01)


def test_draft_kv_types_follow_ctkd_ctvd(qwen) -> None:  # noqa: ANN001
    c = cpu(qwen, ctx_size=65536, parallel=1, spec_type=MTP, cache_type_k_draft="q8_0", cache_type_v_draft="q8_0")
    assert c["draft_kv"] == pytest.approx(68.00, abs=0.01)
    assert cpu(qwen, ctx_size=65536, parallel=1)["draft_kv"] == 0.0  # no MTP, no draft KV


@pytest.mark.parametrize(("np_", "n_max", "spec", "rs_mib"), [
    (1, None, [], 62.8125),
    (1, 3, MTP, 251.25),
    (None, None, [], 251.25),  # auto -np = 4 slots
    (None, 3, MTP, 1005.00),
    (1, 6, MTP, 439.6875),
    (4, 6, MTP, 1758.75),
])
def test_recurrent_state_table(qwen, np_, n_max, spec, rs_mib: float) -> None:  # noqa: ANN001
    c = cpu(qwen, ctx_size=4096, parallel=np_, spec_type=spec, spec_draft_n_max=n_max)
    assert c["recurrent"] == pytest.approx(rs_mib, abs=0.001)


def test_unified_vs_per_slot(qwen) -> None:  # noqa: ANN001
    h = qwen.hparams
    auto = resolve(Settings(ctx_size=65536), h)
    assert (auto.n_seq_max, auto.kv_unified, auto.n_ctx_seq, auto.n_stream) == (4, True, 65536, 1)
    per = resolve(Settings(ctx_size=65536, parallel=3), h)
    # 65536/3 = 21845.3 -> padded to 22016 per slot, 3 streams
    assert (per.kv_unified, per.n_ctx_seq, per.n_stream, per.n_ctx) == (False, 22016, 3, 66048)
    kvu = resolve(Settings(ctx_size=65536, parallel=3, extra_args=["-kvu"]), h)
    assert kvu.kv_unified and kvu.n_ctx_seq == 65536
    assert cpu(qwen, ctx_size=65536, parallel=3)["kv"] == pytest.approx(1280 * 66048 / 65536, abs=0.01)


def test_outputs_and_batches(qwen) -> None:  # noqa: ANN001
    h = qwen.hparams
    r = resolve(Settings(parallel=2, spec_type=["draft-mtp", "ngram-mod"]), h)
    assert r.n_outputs_max == 130 and r.n_rs_seq == 3  # as observed in llama-server.md §8 item 13
    r = resolve(Settings(ctx_size=1000, batch_size=4096, ubatch_size=1024), h)
    assert (r.n_ctx, r.n_batch, r.n_ubatch, r.n_tokens) == (1024, 1024, 1024, 1024)


def test_mtp_weights_only_with_draft_mtp(qwen) -> None:  # noqa: ANN001
    # -nr: on a CPU-only host with AVX2 the Q4_K experts would also get a CPU_REPACK copy (test_planner_arch.py)
    without = cpu(qwen, ctx_size=4096, parallel=1, extra_args=["-nr"])["weights"]
    with_mtp = cpu(qwen, ctx_size=4096, parallel=1, spec_type=MTP, extra_args=["-nr"])["weights"]
    mtp_block = qwen.layer_bytes(40) / 2**20
    assert with_mtp - without == pytest.approx(mtp_block, rel=0.001)
    assert with_mtp == pytest.approx(qwen.total_bytes / 2**20, rel=0.0001)


def test_two_devices_even_split_places_mtp_and_output_on_the_last(qwen) -> None:  # noqa: ANN001
    p = plan(qwen, Settings(ctx_size=8192, parallel=1, spec_type=MTP, tensor_split=[1, 1], fit=False), gpus(2))
    d0, d1 = p.device("CUDA0"), p.device("CUDA1")
    assert d0.layers == list(range(0, 21)) and d1.layers == list(range(21, 41))
    assert p.layer_device[41] == "CUDA1"  # output layer
    assert d0.components["draft_kv"] == 0 and d1.components["draft_kv"] > 0
    assert d0.components["draft_compute"] == 0 and d1.components["draft_compute"] > 0
    # KV follows attention layers: 3,7,...,19 (5) on CUDA0; 23..39 (5) on CUDA1
    assert d0.components["kv"] == pytest.approx(d1.components["kv"])
    assert p.pipeline_parallel
    emb = qwen.tensor("token_embd.weight").nbytes / 2**20
    assert p.device(HOST).components["weights"] == pytest.approx(emb, rel=0.001)


def test_uneven_split_and_partial_ngl(qwen) -> None:  # noqa: ANN001
    p = plan(qwen, Settings(ctx_size=8192, parallel=1, tensor_split=[3, 1], fit=False), gpus(2))
    assert len(p.device("CUDA0").layers) == 32 and len(p.device("CUDA1").layers) == 9
    p = plan(qwen, Settings(ctx_size=8192, parallel=1, n_gpu_layers="20", fit=False), gpus(1))
    host = p.device(HOST)
    # 20 of 42 "layers" offloaded: output + blocks 22..40; blocks 0..21 stay on the host
    assert host.layers == list(range(0, 22))
    assert not p.pipeline_parallel
    assert host.components["kv"] > 0 and host.components["recurrent"] > 0
    assert p.device("CUDA0").components["kv"] > 0


def test_main_gpu_with_split_none(qwen) -> None:  # noqa: ANN001
    p = plan(qwen, Settings(ctx_size=8192, parallel=1, split_mode="none", main_gpu=1, fit=False), gpus(2))
    assert [d.key for d in p.devices] == ["CUDA1", HOST]
    with pytest.raises(PlanError, match="-mg 5"):
        plan(qwen, Settings(split_mode="none", main_gpu=5, fit=False), gpus(2))


def test_cpu_moe_and_n_cpu_moe_keep_experts_on_host(qwen) -> None:  # noqa: ANN001
    base = plan(qwen, Settings(ctx_size=8192, parallel=1, fit=False), gpus(1, 40000))
    cmoe = plan(qwen, Settings(ctx_size=8192, parallel=1, cpu_moe=True, fit=False), gpus(1, 40000))
    nc = plan(qwen, Settings(ctx_size=8192, parallel=1, n_cpu_moe=10, fit=False), gpus(1, 40000))
    exps = sum(t.nbytes for t in qwen.tensors if "_exps" in t.name and t.layer is not None and t.layer < 40) / 2**20
    moved = base.device("CUDA0").components["weights"] - cmoe.device("CUDA0").components["weights"]
    assert moved == pytest.approx(exps, rel=0.001)
    assert 0 < nc.device("CUDA0").components["weights"] - cmoe.device("CUDA0").components["weights"] < moved
    assert not plan(qwen, Settings(ctx_size=8192, parallel=1, cpu_moe=True, fit=False), gpus(2)).pipeline_parallel


def test_pipeline_parallel_keeps_four_mask_copies(qwen) -> None:  # noqa: ANN001
    def compute(ctx: int, extra: list[str]) -> tuple[bool, float]:
        p = plan(qwen, Settings(ctx_size=ctx, parallel=1, fit=False, extra_args=extra), gpus(2))
        return p.pipeline_parallel, p.device("CUDA0").components["compute"]

    ot = ["-ot", "blk\\.0\\.ffn_up_exps=CUDA0"]  # any override turns pipeline parallelism off
    pp_hi, hi = compute(65536, [])
    pp_lo, lo = compute(32768, [])
    no_hi, hi1 = compute(65536, ot)
    no_lo, lo1 = compute(32768, ot)
    assert pp_hi and pp_lo and not no_hi and not no_lo
    mask_delta = (65536 - 32768) * 512 * 2 / 2**20  # one f16 KQ mask, n_ctx x n_ubatch
    assert hi1 - lo1 == pytest.approx(mask_delta, rel=1e-6)
    assert hi - lo == pytest.approx(4 * mask_delta, rel=1e-6)


def test_risk_verdicts(qwen) -> None:  # noqa: ANN001
    s = Settings(ctx_size=8192, parallel=1, fit=False)
    need = plan(qwen, s, gpus(1, 10**6)).device("CUDA0").needed_mib
    assert plan(qwen, s, gpus(1, need + 2048)).device("CUDA0").risk == "ok"
    assert plan(qwen, s, gpus(1, need + 500)).device("CUDA0").risk == "tight"
    assert plan(qwen, s, gpus(1, need - 1)).device("CUDA0").risk == "oom"
    p = plan(qwen, replace(s, fit_target=[256]), gpus(1, need + 500))
    assert p.device("CUDA0").risk == "ok" and p.device("CUDA0").margin_mib == 256


def test_fit_reduces_an_unset_context(qwen) -> None:  # noqa: ANN001
    p = plan(qwen, Settings(parallel=1, spec_type=MTP), gpus(1, 24576))
    assert p.fit.action == "reduce-ctx"
    assert 4096 <= p.fit.n_ctx < 262144 and p.fit.n_ctx % 256 == 0
    assert p.device("CUDA0").risk in ("ok", "tight")
    # the context was given: fit cannot shrink it and moves nothing while -ngl is set
    q = plan(qwen, Settings(ctx_size=262144, parallel=1, n_gpu_layers="all"), gpus(1, 24576))
    assert q.fit.action == "give-up" and q.device("CUDA0").risk == "oom"
    # nothing to do when it fits
    r = plan(qwen, Settings(ctx_size=8192, parallel=1), gpus(1, 81920))
    assert r.fit.action == "none"
    off = plan(qwen, Settings(ctx_size=8192, parallel=1, fit=False), gpus(1, 8192))
    assert off.fit.action == "off" and off.device("CUDA0").risk == "oom"


def test_fit_moves_experts_when_the_context_cannot_save_it(qwen) -> None:  # noqa: ANN001
    p = plan(qwen, Settings(parallel=1, spec_type=MTP), gpus(1, 6144))
    assert p.fit.action == "move-layers" and p.fit.n_cpu_moe
    assert p.device("CUDA0").risk != "oom"


def test_mtp_on_a_model_without_mtp_is_refused(nomtp) -> None:  # noqa: ANN001
    with pytest.raises(PlanError, match="no MTP"):
        plan(nomtp, Settings(spec_type=MTP), [])


@pytest.mark.parametrize(("kw", "match"), [
    ({"parallel": 0}, "-np 0"),
    ({"cache_type_k": "q3_k"}, "-ctk q3_k"),
    ({"flash_attn": "off", "cache_type_v": "q8_0"}, "flash attention"),
    ({"n_gpu_layers": "lots"}, "-ngl"),
])
def test_impossible_settings(qwen, kw: dict, match: str) -> None:  # noqa: ANN001
    with pytest.raises(PlanError, match=match):
        plan(qwen, Settings(**kw), [])


def test_cli_json_shape(qwen) -> None:  # noqa: ANN001
    out = subprocess.run([sys.executable, "-m", "tui.cli", "plan", "-m", str(qwen.path), "-c", "65536", "-np", "1",
                          "--spec-type", "draft-mtp", "-ctk", "q8_0", "-ctv", "q8_0", "--gpus", "2x16GiB", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert set(obj) == {"model", "devices", "totals", "unreachable"} and obj["unreachable"] == []
    keys = {"name", "total_mib", "free_mib", "weights_mib", "kv_mib", "draft_kv_mib", "recurrent_mib", "compute_mib",
            "draft_compute_mib", "output_mib", "margin_mib", "needed_mib", "headroom_mib", "risk"}
    assert [set(d) for d in obj["devices"]] == [keys] * 3
    assert obj["devices"][0]["name"].startswith("CUDA0") and obj["devices"][-1]["name"] == "Host"
    assert sum(d["kv_mib"] for d in obj["devices"]) == pytest.approx(680.0, abs=0.05)
    assert obj["totals"]["draft_kv_mib"] == pytest.approx(128.0, abs=0.05)
    assert {d["risk"] for d in obj["devices"]} <= {"ok", "tight", "oom"}
    for k in ("weights_mib", "kv_mib", "needed_mib"):
        assert obj["totals"][k] == pytest.approx(sum(d[k] for d in obj["devices"]), abs=0.05)


@pytest.mark.parametrize("spec", ["cpu", "rtx3060-laptop-6g", "6GiB,24GiB"])
def test_cli_gpu_specs(qwen, spec: str) -> None:  # noqa: ANN001
    out = subprocess.run([sys.executable, "-m", "tui.cli", "plan", "-m", str(qwen.path), "-c", "8192", "-np", "1",
                          "--gpus", spec, "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    devs = json.loads(out.stdout)["devices"]
    assert len(devs) == {"cpu": 1, "rtx3060-laptop-6g": 2, "6GiB,24GiB": 3}[spec]


def test_cli_errors_are_one_paragraph(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_text("hello")
    for args, needle in ((["-m", str(bad)], "not a GGUF"), (["-c", "4096"], "needs a model"),
                         (["-m", str(bad), "--gpus", "lots"], "--gpus")):
        out = subprocess.run([sys.executable, "-m", "tui.cli", "plan", *args], capture_output=True, text=True, timeout=60)
        assert out.returncode != 0
        assert needle in out.stderr and "Traceback" not in out.stderr
