"""Exact mode against the real llama-server: the dry run's figures equal what the server then allocates.

Each case plans exactly (a `--fit` dry run, stopped before anything is loaded), then loads the same
settings for real through the product's Supervisor (tests/helpers/launch.py) and parses the launch
log with the product's memory-report parser. Tolerances:
- every component of a single-device load, and weights/KV/draft KV/recurrent/output everywhere:
  0.02 MiB (the log prints 0.01 MiB);
- compute over two devices with pipeline parallelism: 1.02 MiB. There llama.cpp's own no_alloc
  expectation (ggml_backend_sched_reserve_size on the pp graph) can differ from what the pp/tg/pp
  reserve then allocates by a MiB on one device; the dry run reports llama.cpp's expectation.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.archshapes import write_arch_shape
from tests.helpers.launch import probe_launch
from tests.helpers.shapemodel import write_shape_model
from tests.test_planner_real import CPU_CASES as ESTIMATE_CASES
from tui.core.options.argv import settings_from_argv
from tui.core.options.reader import value, without
from tui.core.planning.devices import HOST, DeviceSpec
from tui.core.planning.dryrun import dry_run_args
from tui.core.planning.exact import ExactResult, exact_plan
from tui.core.planning.exact_check import check_exact_mode
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.plan import plan
from tui.core.planning.reconcile import reconcile
from tui.core.planning.standin import RpcServers
from tui.core.server.supervisor import Supervisor

pytestmark = pytest.mark.slow

COMMON = ["-t", "1", "-tb", "1", "--no-warmup"]
#: the estimate's real-server cases, plus --fit off with the context left to the model
CPU_CASES = {**ESTIMATE_CASES, "fit-off-ctx-unset": ("tiny-mtp", ["-np", "2", "--spec-type", "draft-mtp", "-fit", "off"])}


def _exact(model: Path, args: list[str], server_bin: Path, devices: list[DeviceSpec] | None = None, **kw: object) -> ExactResult:
    s = settings_from_argv(["-m", str(model), *args]).settings
    root = model.parent / "exact-cache"  # never the user's cache
    res = exact_plan(s, devices or [], server_bin, use_cache=False, timeout_s=90, root=root, **kw)  # type: ignore[arg-type]
    assert res.status == "exact", res.reason
    assert res.plan is not None
    return res


def _compare(res: ExactResult, report, keymap: dict[str, str] | None = None, compute_tol: float = 0.02) -> None:  # noqa: ANN001
    assert res.plan is not None
    for d in res.plan.devices:  # the stand-ins' real counterparts
        d.key = (keymap or {}).get(d.key, d.key)
    rec = reconcile(res.plan, report)
    # a device fit left empty (-ts N,0) has no buffers to report
    empty = [k for k in rec.unmatched_devices if (p := res.plan.device(k)) is not None and p.needed_mib < 0.01]
    assert rec.unmatched_devices == empty, (rec.unmatched_devices, report.per_device())
    bad = [d.to_dict() for d in rec.diffs
           if abs(d.error_mib) > (compute_tol if d.component in ("compute", "draft_compute") else 0.02)]
    assert not bad, bad
    assert any(d.reported_mib > 0 for d in rec.diffs if d.component == "compute")


@pytest.mark.parametrize("case", list(CPU_CASES))
def test_exact_equals_the_real_allocation_on_the_cpu(case: str, server_bin: Path, tiny_models: dict[str, Path]) -> None:
    name, args = CPU_CASES[case]
    res = _exact(tiny_models[name], args, server_bin)
    assert res.sources[HOST].exact and res.label(HOST) == "exact (llama.cpp)"
    assert res.fit is not None and not res.fit.changed and res.runs == 1
    real = probe_launch(server_bin, ["-m", str(tiny_models[name]), *args, *COMMON], timeout_s=120)
    assert real.ready, real.log[-2000:]
    # after a launch: estimate, exact and reported side by side
    estimate = plan(read_gguf(tiny_models[name]), settings_from_argv(["-m", str(tiny_models[name]), *args]).settings, [])
    side = reconcile(estimate, real.report, exact=res.plan)
    assert side.diffs and all(d.exact_error_mib is not None and abs(d.exact_error_mib) <= 0.02 for d in side.diffs)
    assert {"predicted_mib", "exact_mib", "reported_mib", "exact_error_mib"} <= set(side.to_dict()["diffs"][0])
    _compare(res, real.report)


def test_exact_on_the_qwen36_shape_reads_only_the_header_and_equals_the_real_load(
        server_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("shape")
    model = write_shape_model(root / "qwen36-shape.gguf")
    args = ["-c", "100000", "-ub", "1024", "-ctk", "q4_0", "-ctv", "q4_0", "--spec-type", "draft-mtp", "-np", "1",
            "-nr"]  # -nr: repacking would allocate (and fill) 17 GB of host memory in the real load
    try:
        res = _exact(model, args, server_bin)
        assert res.sparse_copy  # a 20 GB file is measured through its header-only copy
        host = res.plan.device(HOST).components  # type: ignore[union-attr]
        assert host["weights"] > 19000 and host["kv"] > 500 and host["recurrent"] > 200 and host["draft_kv"] > 190
        real = probe_launch(server_bin, ["-m", str(model), *args, *COMMON], timeout_s=240)
        assert real.ready, real.log[-2000:]
        _compare(res, real.report)
    finally:
        shutil.rmtree(root, ignore_errors=True)  # the real load filled the page cache with its zeros


def _sim(n: int, free: float) -> list[DeviceSpec]:
    return [DeviceSpec(f"CUDA{i}", "simulated", 24576, free) for i in range(n)]


def test_two_simulated_gpus_planned_exactly_over_two_stand_ins(server_bin: Path, rpc_server_bin: Path,
                                                              tiny_models: dict[str, Path]) -> None:
    model = tiny_models["tiny-moe-mtp"]
    args = ["-c", "4096", "-np", "2", "--spec-type", "draft-mtp", "-ts", "3,1"]
    res = _exact(model, args, server_bin, _sim(2, 20000), stand_in=True, rpc_bin=rpc_server_bin)
    assert [d.key for d in res.plan.devices] == ["CUDA0", "CUDA1", HOST]  # type: ignore[union-attr]
    assert all(res.sources[k].exact for k in ("CUDA0", "CUDA1", HOST))
    assert any("compute buffers are the CPU backend's sizes" in w for w in res.warnings)
    with RpcServers(rpc_server_bin, 2) as rpc:
        real = probe_launch(server_bin, ["-m", str(model), *args, "--rpc", rpc.endpoints, *COMMON], timeout_s=120)
        keymap = dict(zip(["CUDA0", "CUDA1"], rpc.keys))
    assert real.ready, real.log[-2000:]
    assert real.report.target.pipeline_parallel
    per = res.plan.device("CUDA0").components  # type: ignore[union-attr]
    assert per["weights"] > 0 and per["kv"] > 0 and per["compute"] > 0
    _compare(res, real.report, keymap, compute_tol=1.02)


def test_fit_moves_layers_on_small_simulated_gpus_and_its_choice_is_measured(
        server_bin: Path, rpc_server_bin: Path, tiny_models: dict[str, Path]) -> None:
    model = tiny_models["tiny-moe-mtp"]
    args = ["-np", "1", "--spec-type", "draft-mtp"]
    res = _exact(model, args, server_bin, _sim(2, 1060), stand_in=True, rpc_bin=rpc_server_bin)
    assert res.fit is not None and res.fit.changed and res.fit.action == "move-layers" and res.runs == 2
    flags = res.fit.flags()
    assert value(flags, "-ngl") is not None
    for d in res.plan.devices[:2]:  # type: ignore[union-attr]  # fit kept its 1024 MiB margin
        assert d.needed_mib <= d.free_mib - d.margin_mib + 1.0, d.to_dict()
    # the same configuration loaded for real over two RPC servers (fit off: exactly as chosen)
    with RpcServers(rpc_server_bin, 2) as rpc:
        keymap = dict(zip(["CUDA0", "CUDA1"], rpc.keys))
        named = [o.rsplit("=", 1)[1] for o in res.fit.overrides]
        ot = [o.rsplit("=", 1)[0] + "=" + keymap.get(o.rsplit("=", 1)[1], "CPU") for o in res.fit.overrides]
        real_flags = without(flags, "-ot") + (["-ot", ",".join(ot)] if ot else [])
        # --rpc first: -ot only knows the buffer types of devices added before it
        real = probe_launch(server_bin, ["-m", str(model), "--rpc", rpc.endpoints, *args, *real_flags, "-fit", "off",
                                         *COMMON], timeout_s=120)
    assert named and all(k in ("CPU", "CUDA0", "CUDA1") for k in named)  # named as the simulated devices
    assert real.ready, real.log[-2000:]
    _compare(res, real.report, keymap, compute_tol=1.02)


def test_cached_second_plan_is_the_same(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    s = settings_from_argv(["-m", str(tiny_models["tiny-mtp"]), "-c", "4096", "--spec-type", "draft-mtp"]).settings
    first = exact_plan(s, [], server_bin, root=tmp_path)
    second = exact_plan(s, [], server_bin, root=tmp_path)
    assert first.status == second.status == "exact" and not first.cached and second.cached
    assert [d.components for d in first.plan.devices] == [d.components for d in second.plan.devices]  # type: ignore[union-attr]
    other = exact_plan(settings_from_argv(["-m", str(tiny_models["tiny-mtp"]), "-c", "8192", "--spec-type", "draft-mtp"]).settings,
                       [], server_bin, root=tmp_path)
    assert not other.cached and other.plan.device(HOST).components["kv"] > first.plan.device(HOST).components["kv"]  # type: ignore[union-attr]


def test_an_architecture_llama_cpp_does_not_know_is_unavailable(server_bin: Path, tiny_models: dict[str, Path],
                                                                tmp_path: Path) -> None:
    data = tiny_models["tiny-mtp"].read_bytes()
    bad = tmp_path / "unknown-arch.gguf"
    bad.write_bytes(data.replace(b"qwen35", b"qwen99"))  # the architecture and all its keys, same length
    res = exact_plan(settings_from_argv(["-m", str(bad)]).settings, [], server_bin, use_cache=False, root=tmp_path)
    assert res.status == "unavailable" and res.plan is None
    assert "qwen99" in res.reason and res.reason.count(".") <= 3


def _script(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "llama-server"
    p.write_text(f"#!{sys.executable}\n{body}\n")
    p.chmod(0o755)
    return p


def test_a_server_too_old_for_the_breakdown_is_unavailable(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    old = _script(tmp_path, "import sys\nprint('error: invalid argument: --log-jsonl', file=sys.stderr)\nsys.exit(1)")
    res = exact_plan(settings_from_argv(["-m", str(tiny_models["tiny-mtp"])]).settings, [], old, use_cache=False, root=tmp_path)
    assert res.status == "unavailable" and "too old" in res.reason


def test_a_dry_run_that_hangs_times_out_and_one_can_be_cancelled(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    helper = Path(__file__).parent / "helpers" / "hang_server.py"
    hang = _script(tmp_path, f"import runpy\nrunpy.run_path({str(helper)!r}, run_name='__main__')")
    s = settings_from_argv(["-m", str(tiny_models["tiny-mtp"])]).settings
    res = exact_plan(s, [], hang, use_cache=False, timeout_s=1.5, root=tmp_path)
    assert res.status == "unavailable" and "did not finish within 1.5 s" in res.reason
    cancel = threading.Event()
    res = exact_plan(s, [], hang, use_cache=False, timeout_s=60, cancel=cancel, progress=lambda _msg: cancel.set(), root=tmp_path)
    assert res.status == "cancelled" and res.plan is None


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True, env=env, timeout=180)


def test_plan_exact_cli_on_simulated_gpus_and_doctor_line(server_bin: Path, tiny_models: dict[str, Path],
                                                          tmp_path: Path) -> None:
    env = dict(os.environ, MTP_TUNE_LLAMA_SERVER=str(server_bin), MTP_TUNE_CACHE_DIR=str(tmp_path / "cache"))
    model = str(tiny_models["tiny-moe-mtp"])
    out = _cli(env, "plan", "--exact", "--json", "-m", model, "--spec-type", "draft-mtp", "-np", "1", "--gpus", "2x1060MiB")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    exact, estimate = data["exact"], data["estimate"]
    assert exact["status"] == "exact", exact["reason"]
    assert exact["fit"]["changed"] and exact["sources"]["CUDA0"]["source"] == "exact (llama.cpp)"
    assert [d["name"].split()[0] for d in exact["plan"]["devices"]] == [d["name"].split()[0] for d in estimate["devices"]]
    assert all("RPC0[" not in o for o in exact["fit"]["overrides"])  # named as the simulated devices
    text = _cli(env, "plan", "--exact", "-m", model, "--spec-type", "draft-mtp", "-np", "1", "--gpus", "2x1060MiB")
    assert text.returncode == 0 and "exact (llama.cpp): cached" in text.stdout and "fit chose: -ngl" in text.stdout
    doctor = _cli(env, "doctor", "--json")
    assert doctor.returncode == 0, doctor.stderr
    assert json.loads(doctor.stdout)["server"]["exact_mode"]["ok"] is True


def test_exact_mode_check_says_why_not(tmp_path: Path, server_bin: Path) -> None:
    assert check_exact_mode(server_bin, root=tmp_path / "ok").ok
    old = _script(tmp_path, "import sys\nprint('error: invalid argument: --log-jsonl', file=sys.stderr)\nsys.exit(1)")
    res = check_exact_mode(old, root=tmp_path / "old")
    assert not res.ok and "too old" in res.message


def test_gpus_the_server_cannot_see_are_unavailable_not_misread(server_bin: Path, tiny_models: dict[str, Path],
                                                                tmp_path: Path) -> None:
    s = settings_from_argv(["-m", str(tiny_models["tiny-mtp"]), "-c", "4096"]).settings
    res = exact_plan(s, [DeviceSpec("CUDA0", "RTX 4090", 24576, 24000)], server_bin, use_cache=False, root=tmp_path)
    assert res.status == "unavailable" and "offloads to 0 device(s) where the plan has 1" in res.reason


def test_damaged_headers_give_a_sentence_never_a_traceback(server_bin: Path, tiny_models: dict[str, Path],
                                                           tmp_path: Path) -> None:
    data = tiny_models["tiny-mtp"].read_bytes()
    rng = random.Random(13)
    statuses = []
    for i in range(20):
        buf = bytearray(data)
        for _ in range(8):
            buf[rng.randrange(0, min(len(buf), 64 * 1024))] ^= 1 << rng.randrange(8)
        bad = tmp_path / f"flipped-{i}.gguf"
        bad.write_bytes(bytes(buf))
        res = exact_plan(settings_from_argv(["-m", str(bad)]).settings, [], server_bin, use_cache=False,
                         root=tmp_path / "cache", timeout_s=30)
        assert res.status in ("exact", "unavailable"), res
        assert res.status == "exact" or (res.reason and "\n" not in res.reason), res.reason
        statuses.append(res.status)
    assert "unavailable" in statuses


def test_the_header_only_copy_measures_what_the_file_does(server_bin: Path, tiny_models: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """The dry run reads no tensor data (no_alloc, load mode none): a copy whose data is a hole gives
    llama.cpp's same figures for every component."""
    s = settings_from_argv(["-m", str(tiny_models["tiny-moe-mtp"]), "-c", "8192", "-np", "2", "--spec-type", "draft-mtp"]).settings
    real_file = exact_plan(s, [], server_bin, use_cache=False, root=tmp_path, sparse=False)
    copy = exact_plan(s, [], server_bin, use_cache=False, root=tmp_path, sparse=True)
    assert copy.sparse_copy and not real_file.sparse_copy
    assert [d.components for d in copy.plan.devices] == [d.components for d in real_file.plan.devices]  # type: ignore[union-attr]
    assert list((tmp_path / "sparse").glob("*.gguf"))


def test_the_dry_run_reads_the_header_and_no_tensor_data(server_bin: Path, tmp_path: Path) -> None:
    """llama.cpp's fit pass loads with no_alloc and load mode none: by the time fit has decided, the
    server has read() a few MB (the 5 MB header, twice) of a 19.5 GiB file, not its data."""
    model = write_shape_model(tmp_path / "shape.gguf")
    s = settings_from_argv(["-m", str(model), "-c", "8192", "-np", "1", "--spec-type", "draft-mtp"]).settings
    sup = Supervisor(server_bin, settings_from_argv(dry_run_args(s, model)).settings, log_dir=tmp_path / "logs", record_history=False,
                     memreport_factory=None)
    got: dict[str, int] = {}
    decided = threading.Event()

    def on_line(line: str) -> None:
        if "fitting params to free memory took" in line and not decided.is_set():
            io = Path(f"/proc/{sup.pid}/io").read_text()
            got.update({k: int(v) for k, v in (ln.split(": ") for ln in io.splitlines())})
            decided.set()

    sup.on_log_line(on_line)
    try:
        sup.start()
        assert decided.wait(120), sup.tail(20)
    finally:
        sup.close()
    assert model.stat().st_size > 19 * 2**30
    assert 2**20 < got["rchar"] < 64 * 2**20, got  # the header is ~5 MB; the data would be 19.5 GiB


#: shape-only GGUFs of other architectures: sliding-window (iswa) caches, MLA, MLA with MTP, glm4moe, qwen3next
REAL_ARCHS = ("gemma3-1b", "deepseek-v2-lite")
DRY_ARCHS = ("glm47-flash", "glm45-air", "qwen3-next-80b")  # 17-76 GB files: their real loads belong in bench/


@pytest.mark.parametrize("name", REAL_ARCHS + DRY_ARCHS)
def test_exact_on_other_architectures(name: str, server_bin: Path, tmp_path: Path) -> None:
    model = write_arch_shape(name, tmp_path / f"{name}.gguf")
    try:
        meta = read_gguf(model)
        mtp = meta.hparams.n_nextn > 0
        args = ["-c", "8192", "-np", "1", "-nr", *(["--spec-type", "draft-mtp"] if mtp else [])]
        res = _exact(model, args, server_bin)
        host = res.plan.device(HOST).components  # type: ignore[union-attr]
        assert res.sparse_copy and host["weights"] > 500 and host["kv"] > 0 and host["compute"] > 0
        assert (host["draft_kv"] > 0 and host["draft_compute"] > 0) if mtp else host["draft_kv"] == 0
        if name in REAL_ARCHS:
            real = probe_launch(server_bin, ["-m", str(model), *args, *COMMON], timeout_s=240)
            assert real.ready, real.log[-2000:]
            _compare(res, real.report)
    finally:
        model.unlink(missing_ok=True)  # and with it the page cache its real load filled


def test_a_cancel_never_cuts_a_measurement_on_the_users_rpc_servers(server_bin: Path, rpc_server_bin: Path,
                                                                   tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """Killing llama-server mid-measurement can kill an rpc-server (it dies of SIGPIPE writing the
    answer): on the user's own RPC servers a cancel lets fit decide first, then stops."""
    with RpcServers(rpc_server_bin, 2) as rpc:
        s = settings_from_argv(["-m", str(tiny_models["tiny-moe-mtp"]), "-c", "4096", "--rpc", rpc.endpoints,
                                "--spec-type", "draft-mtp"]).settings
        devs = [DeviceSpec(k, f"RPC{i}", 24000, 24000, remote=True) for i, k in enumerate(rpc.keys)]
        cancel = threading.Event()
        res = exact_plan(s, devs, server_bin, use_cache=False, root=tmp_path, cancel=cancel,
                         progress=lambda _msg: cancel.set())
        assert res.status == "cancelled"
        assert all(c.proc.poll() is None for c in rpc.children)
        again = exact_plan(s, devs, server_bin, use_cache=False, root=tmp_path)
        assert again.status == "exact", again.reason
        assert all(again.sources[k].exact for k in rpc.keys)
