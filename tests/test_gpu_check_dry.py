"""The real-GPU check (scripts/gpu-check.sh, bench/gpu_check/) without a GPU: its whole logic on the
recorded samples in tests/data/gpu_check/, its pure pieces, and its launch path on the CPU server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu_check import assemble, build, nvsmi
from bench.gpu_check.backend import DATA, RealBackend
from bench.gpu_check.budget import BudgetClock
from bench.gpu_check.matrix import MODELS, Config, generate

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"


@pytest.fixture(scope="module")
def dry(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, str]:
    """One dry run of the whole script (build plan + run): its JSON, Markdown and printed summary."""
    out = tmp_path_factory.mktemp("gpu-check-out")
    work = tmp_path_factory.mktemp("gpu-check-work")
    env = dict(os.environ, PYTHON=sys.executable)
    p = subprocess.run([str(SCRIPT), "all", "--dry-run", "--out", str(out), "--work", str(work)],
                       capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return json.loads((out / "gpu-check.json").read_text()), (out / "gpu-check.md").read_text(), p.stdout


def _row(res: dict, cid: str) -> dict:
    return next(r for r in res["matrix"] if r["config"]["id"] == cid)


def test_script_is_executable() -> None:
    assert os.access(SCRIPT, os.X_OK)


def test_dry_build_plan_targets_the_recorded_arch_only(dry: tuple[dict, str, str]) -> None:
    res = dry[0]
    b = res["build"]
    assert b["dry"] is True and b["arch"] == "90"  # compute_cap 9.0 from the recorded nvidia-smi CSV
    assert "-DCMAKE_CUDA_ARCHITECTURES=90-real" in b["configure"]
    assert "-DGGML_CUDA=ON" in b["configure"] and "-DGGML_CUDA_FA_ALL_QUANTS=OFF" in b["configure"]
    assert "-DGGML_RPC=ON" in b["configure"]  # the product's own flags come along
    assert b["build"][-3:] == ["llama-server", "llama-fit-params", "ggml-rpc-server"]


def test_dry_records_compare_nvidia_smi_with_gpus_json(dry: tuple[dict, str, str]) -> None:
    res = dry[0]
    by_field = {r["field"]: r for r in res["smi_compare"]}
    assert by_field["memory.total"] == {"index": 0, "field": "memory.total", "nvidia_smi": 143771,
                                        "mtp_tune": 143771, "agree": True}
    assert by_field["name"]["agree"] is True and by_field["power.draw"]["agree"] is None
    assert res["doctor"]["server"]["build_number"] == 11434


def test_dry_matrix_rows_hold_measured_planned_and_unaccounted(dry: tuple[dict, str, str]) -> None:
    res = dry[0]
    assert len(res["matrix"]) == len(generate())
    base = _row(res, Config("shape").id)
    assert base["ready"] is True
    assert base["measured_gpu"]["kv"] == 1280.0 and base["measured_gpu"]["draft_kv"] == 128.0
    assert base["measured_gpu_total"] == pytest.approx(21579.0, abs=0.5)
    # the planner really ran (on the CPU, for the recorded 143771 MiB card)
    assert base["planned_gpu"]["kv"] == pytest.approx(1280.0) and base["planned_gpu"]["weights"] > 19000
    assert base["fit_print_gpu"] == {"model": 19663, "context": 1659, "compute": 256}
    assert base["exact_status"] == ["exact", ""] and base["exact_gpu"]["kv"] == 1280.0  # bases only
    assert "exact_gpu" not in _row(res, Config("shape", kv="q4_0").id)
    # NVML growth over the baseline minus the buffers: (22586 - 1) - 21579
    assert base["unaccounted"]["after_decode"] == pytest.approx(1006.0, abs=0.5)
    assert base["nvml_delta"]["after_long"] == 23328.0
    # the planner's view changes with the config even though the dry samples do not
    q4 = _row(res, Config("shape", kv="q4_0").id)
    assert q4["planned_gpu"]["kv"] < base["planned_gpu"]["kv"] / 3


def test_dry_laptop_finds_fit_target_and_classifies_first_decode_oom(dry: tuple[dict, str, str]) -> None:
    lap = dry[0]["laptop"]
    assert lap["foreign_seen"] is True  # the holder (pid 4242, 137043 MiB) is another process
    assert lap["sweep_finding"]["flag"] == "--fit-target" and lap["sweep_finding"]["value"] == 384
    for key in ("probe_laptop", "probe_squeeze"):
        c = lap[key]["classified"]
        assert c["kind"] == "oom_device" and c["flag_or_file"] == "CUDA0"
        assert "CUDA error: out of memory" in c["evidence"]
        assert lap[key]["at_first_decode"] is True
    sq = lap["probe_squeeze"]
    # leave = load growth + half the first decode's growth of the measured shape base
    assert sq["leave_mib"] == pytest.approx(22200 + (22585 - 22200) / 2)
    assert sq["holder"]["exit_code"] is not None


def test_dry_markdown_and_summary(dry: tuple[dict, str, str]) -> None:
    res, md, stdout = dry
    assert md.startswith("# gpu-check (DRY RUN")
    assert f"| {Config('shape').id} | True | 19664 / 19664 | 1280 / 1280 |" in md
    assert "smallest surviving --fit-target = 384 MiB" in stdout
    assert f"{len(res['matrix'])}/{len(res['matrix'])} configs measured" in stdout


# -- pure pieces ------------------------------------------------------------------------------

def test_matrix_covers_every_value_of_the_issue() -> None:
    rows = generate()
    for m in MODELS:
        mine = [c for c in rows if c.model == m]
        assert {c.ctx for c in mine} == {65536, 100000}
        assert {c.ub for c in mine} == {512, 2048}
        assert {c.kv for c in mine if c.fa == "on"} == {"f16", "q8_0", "q4_0"}
        assert [c.kv for c in mine if c.fa == "off"] == ["f16"]
        assert {c.mtp_n for c in mine} == {0, 2, 3}
        assert {c.draft_kv for c in mine if c.mtp_n} == {"f16", "q4_0"}
    assert len({c.id for c in rows}) == len(rows)
    assert [c.priority for c in rows[: len(MODELS)]] == [0] * len(MODELS)
    assert sorted(c.priority for c in rows) == [c.priority for c in rows]


def test_config_server_args() -> None:
    a = Config("tiny").server_args("m.gguf")
    assert a[:2] == ["-m", "m.gguf"] and "-ngl" in a and a[a.index("--fit") + 1] == "off"
    assert a[a.index("--spec-draft-n-max") + 1] == "3" and a[a.index("-ctkd") + 1] == "f16"
    off = Config("tiny", mtp_n=0, draft_kv="q4_0").server_args("m.gguf")
    assert "--spec-type" not in off and "-ctkd" not in off
    fit = Config("shape").server_args("m.gguf", fit=True)  # fit only adjusts what is left unset
    assert "-c" not in fit and "-ngl" not in fit and fit[fit.index("--fit") + 1] == "on"
    fp = Config("shape", ctx=100000).fit_print_args("m.gguf")  # llama-fit-params takes no server-only flags
    assert fp[fp.index("-c") + 1] == "100000" and not {"-np", "--fit", "--spec-type", "-ctkd"} & set(fp)


def test_budget_clock() -> None:
    now = [100.0]
    c = BudgetClock(60, reserve_s=10, clock=lambda: now[0])
    assert c.left == 50 and c.allows(50) and not c.allows(51)
    now[0] += 45
    assert c.left == 5 and c.timeout(120) == 5 and c.timeout(2) == 2
    assert c.skip("shape", 30) is True and c.skipped == [{"step": "shape", "reason": "needs ~30 s, 5 s left"}]
    assert c.skip("tiny", 4) is False and len(c.skipped) == 1
    now[0] += 100
    assert c.left == 0 and c.timeout(10) == 1.0


def test_nvidia_smi_csv_parsing() -> None:
    rows = nvsmi.parse_csv((DATA / "nvidia-smi.csv").read_text())
    assert rows[0]["name"] == "NVIDIA H200" and rows[0]["memory.total"] == 143771 and rows[0]["compute_cap"] == 9.0
    assert nvsmi.compute_cap(rows) == "90" and nvsmi.used_mib(rows) == 1.0
    header = "index, name, memory.used [MiB]\n0, GPU A, [N/A]\n"
    assert nvsmi.parse_csv(header, ("index", "name", "memory.used")) == [{"index": 0, "name": "GPU A", "memory.used": None}]
    with pytest.raises(ValueError, match="line 2: 2 columns, expected 3"):
        nvsmi.parse_csv("0, a, 1\n1, b\n", ("index", "name", "memory.used"))
    apps = nvsmi.parse_csv((DATA / "nvidia-smi-apps-laptop.csv").read_text(), nvsmi.APPS_FIELDS)
    assert apps == [{"pid": 4242, "process_name": "/opt/torch/.venv/bin/python3", "used_memory": 137043}]


def test_compare_flags_a_disagreement() -> None:
    rows = nvsmi.parse_csv((DATA / "nvidia-smi.csv").read_text())
    gpus = json.loads((DATA / "gpus.json").read_text())
    gpus["devices"][0]["memory_used_mib"] = 500  # NVML layer off by 499 MiB
    bad = {r["field"]: r["agree"] for r in nvsmi.compare(rows, gpus)}
    assert bad["memory.used"] is False and bad["memory.total"] is True
    assert all(r["mtp_tune"] is None for r in nvsmi.compare(rows, {"devices": []}))


def test_config_row_arithmetic() -> None:
    bufs = {"devices": {"CUDA0": {"weights": 100.0, "kv": 20.0, "draft_kv": 5.0, "recurrent": 1.0, "compute": 30.0,
                                  "draft_compute": 10.0, "output": 0.0, "draft_output": 2.0},
                        "Host": {"weights": 3.0, "compute": 4.0}}, "flash_attn": True}
    plan = {"devices": [{"name": "Host", "needed_mib": 7}, {"name": "CUDA0 (NVIDIA H200)", "weights_mib": 100, "kv_mib": 22,
                        "draft_kv_mib": 5, "recurrent_mib": 1, "compute_mib": 40, "draft_compute_mib": 12, "output_mib": 0,
                        "needed_mib": 180}]}
    launch = {"ready": True, "readings": {"baseline": 10, "after_load": 700, "after_decode": 760, "after_long": None}}
    r = assemble.config_row({"id": "x"}, launch, bufs, plan, {"CUDA0": {"model": 100, "context": 25, "compute": 43}})
    assert r["measured_gpu_total"] == 168.0  # draft output counted with the draft compute
    assert r["nvml_delta"] == {"after_load": 690.0, "after_decode": 750.0, "after_long": None}
    assert r["unaccounted"] == {"after_load": 522.0, "after_decode": 582.0, "after_long": None}
    assert r["planner_error_mib"] == 12.0 and r["planner_error_by_component"]["kv"] == 2.0
    assert r["fit_print_total"] == 168 and r["measured_host"]["compute"] == 4.0
    assert assemble.config_row({"id": "y"}, {"ready": False, "readings": {}}, None, None, None)["unaccounted"]["after_load"] is None


def test_parse_fit_print() -> None:
    assert assemble.parse_fit_print("llama_fit: noise\nCUDA0 19663 1659 256 \nHost 272 2 32 \n") == {
        "CUDA0": {"model": 19663, "context": 1659, "compute": 256}, "Host": {"model": 272, "context": 2, "compute": 32}}


def test_build_plan_reuses_product_flags(tmp_path: Path) -> None:
    rec = build.plan(tmp_path / "x.tar.gz", tmp_path, "90", 16)
    cfg = rec["configure"]
    assert cfg.index("-DGGML_RPC=ON") < cfg.index("-DGGML_CUDA=ON") and cfg[-1] == "-DCMAKE_CUDA_ARCHITECTURES=90-real"
    assert build.plan(tmp_path / "x", tmp_path, "native", 2)["configure"][-1] == "-DCMAKE_CUDA_ARCHITECTURES=native"
    assert rec["build"][rec["build"].index("-j") + 1] == "16"
    missing = build.build(tmp_path / "x.tar.gz", tmp_path, "90", 16, BudgetClock(60), tmp_path / "log")
    assert missing["ok"] is False and "sdist is not there" in missing["error"]


def test_holder_without_cuda_reports_and_is_reaped(tmp_path: Path) -> None:
    """No torch/cupy GPU here: the holder fails, says so, and is gone after the block (no orphan)."""
    be = RealBackend(tmp_path, tmp_path)
    with be.hold(6144, timeout=60) as info:
        assert info["held_mib"] is None and "did not start" in info["error"]
    assert info["exit_code"] is not None


def test_real_launch_path_on_the_cpu_server(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """The GPU run's launch path (`mtp-tune serve`, first decode, long prompt, SIGINT) on the CPU build."""
    be = RealBackend(tmp_path, server_bin.parent)
    cfg = Config("tiny", ctx=4096)
    launch = be.launch(cfg, cfg.server_args(str(tiny_models["tiny-mtp"])), timeout=90, long_tokens=600)
    assert launch.ready and launch.error is None, launch.error
    assert launch.long_prompt_tokens == 600 and launch.exit_code == 0
    from bench.gpu_check import adapter

    bufs = adapter.buffers(launch.log_text)
    assert bufs["devices"]["Host"]["kv"] > 0 and bufs["devices"]["Host"]["draft_kv"] > 0


def test_short_budget_skips_cleanly_and_a_second_call_continues(tmp_path: Path) -> None:
    """A call without time for a launch records the skips; the next call (same --work) runs the rest."""
    env = dict(os.environ, PYTHON=sys.executable)
    work = tmp_path / "work"

    def call(budget: int, out: Path) -> dict:
        p = subprocess.run([str(SCRIPT), "run", "--dry-run", "--models", "tiny", "--budget", str(budget),
                            "--out", str(out), "--work", str(work)], capture_output=True, text=True, timeout=240,
                           env=env, cwd=ROOT)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        return json.loads((out / "gpu-check.json").read_text())

    first = call(30, tmp_path / "out1")  # 10 s after the 20 s reserve: no 15 s launch fits
    assert first["matrix"] == [] and first["smi_compare"]  # the records still ran
    assert first["skipped"][0]["step"] == f"matrix {Config('tiny').id}"
    assert first["skipped"][0]["reason"].startswith("needs ~15 s, ")
    assert len(first["skipped"]) == len([c for c in generate() if c.model == "tiny"])
    second = call(540, tmp_path / "out2")
    assert [r["config"]["id"] for r in second["matrix"]] == [c.id for c in generate(("tiny",))]
    assert second["skipped"] == [] and len(second["calls"]) == 2
    third = call(540, tmp_path / "out3")  # nothing left: no launch is repeated
    assert len(third["matrix"]) == len(second["matrix"])


def test_adapter_exact_mode_on_the_cpu_server(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """The adapter reaches the product's exact mode (the import paths the GPU run needs are live)."""
    from bench.gpu_check import adapter

    args = Config("tiny", ctx=4096).server_args(str(tiny_models["tiny-mtp"]))
    res = adapter.exact(args, server_bin, 60, tmp_path / "exact")
    assert res["status"] == "exact", res.get("reason")
    host = next(d for d in res["plan"]["devices"] if d["name"] == "Host")
    assert host["kv_mib"] > 0 and host["draft_kv_mib"] > 0
