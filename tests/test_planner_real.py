"""The planner against what the real llama-server allocates at launch (CPU build, -lv 4), device by
device, including two loopback ggml-rpc-server devices (-ts 1,1 and -ts 3,1).

Tolerances asserted (what the planner meets on this build; the goals are 1 % / 1 MiB and 10 %):
- weights, KV, draft KV, recurrent state, output: within 0.02 MiB + 0.5 % (the log prints 0.01 MiB);
- compute and draft compute: within 10 % or 0.75 MiB, whichever is larger.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tui.core.options.argv import settings_from_argv
from tui.core.planning.gguf_reader import read_gguf
from tui.core.server.memreport import device_of
from tui.core.planning.devices import HOST, DeviceSpec
from tui.core.planning.plan import plan
from tests.helpers.launch import probe_launch
from tui.core.planning.standin import RpcServers
from tui.core.planning.reconcile import reconcile

pytestmark = pytest.mark.slow

EXACT = ("weights", "kv", "draft_kv", "recurrent", "output")
APPROX = ("compute", "draft_compute")
COMMON = ["-t", "1", "-tb", "1", "--no-warmup", "-fit", "off"]

CPU_CASES = {
    "mtp-default": ("tiny-mtp", ["-c", "4096", "-np", "1", "--spec-type", "draft-mtp"]),
    "moe-quant-kv-3slots": ("tiny-moe-mtp", ["-c", "8000", "-np", "3", "-ub", "256", "--spec-type", "draft-mtp",
                                             "-ctk", "q8_0", "-ctv", "q4_0", "-ctkd", "q8_0", "-ctvd", "q4_0"]),
    "q8-auto-np-nmax5": ("tiny-mtp-q8_0", ["-c", "16384", "-ub", "128", "--spec-type", "draft-mtp", "--spec-draft-n-max", "5"]),
    "nomtp-fa-off": ("tiny-nomtp", ["-c", "2048", "-np", "2", "-ub", "64", "-fa", "off"]),
}
RPC_CASES = {
    "rpc-ts-1-1": ("tiny-moe-mtp", ["-c", "4096", "-np", "1", "--spec-type", "draft-mtp", "-ts", "1,1", "-ngl", "all"]),
    "rpc-ts-3-1": ("tiny-mtp", ["-c", "8192", "-np", "1", "-ub", "256", "--spec-type", "draft-mtp", "-ctk", "q8_0",
                                "-ctv", "q8_0", "-ts", "3,1", "-ngl", "all"]),
}


def _check(model: Path, args: list[str], result, devices: list[DeviceSpec]) -> None:  # noqa: ANN001
    assert result.ready, f"llama-server did not get ready:\n{result.log[-3000:]}"
    imp = settings_from_argv(["-m", str(model), *args])
    p = plan(read_gguf(model), imp.settings, devices)
    rec = reconcile(p, result.report)
    assert not rec.unmatched_devices, (rec.unmatched_devices, result.report.per_device())
    bad = []
    for d in rec.diffs:
        tol = 0.02 + 0.005 * d.reported_mib if d.component in EXACT else max(0.75, 0.10 * d.reported_mib)
        if abs(d.error_mib) > tol:
            bad.append(d.to_dict())
    assert not bad, bad
    # every device the server used is planned, and every planned device got its component
    reported = result.report.per_device()
    for key, comps in reported.items():
        pd = p.device(key)
        assert pd is not None
        for c in ("weights", "kv", "compute"):
            if comps[c] > 0.05:
                assert pd.components[c] > 0, (key, c)


@pytest.mark.parametrize("case", list(CPU_CASES))
def test_cpu_launch_matches_plan(case: str, server_bin: Path, tiny_models: dict[str, Path]) -> None:
    name, args = CPU_CASES[case]
    model = tiny_models[name]
    res = probe_launch(server_bin, ["-m", str(model), *args, *COMMON], timeout_s=120)
    _check(model, args, res, [])


@pytest.mark.parametrize("case", list(RPC_CASES))
def test_two_rpc_devices_match_plan_device_by_device(case: str, server_bin: Path, rpc_server_bin: Path,
                                                     tiny_models: dict[str, Path]) -> None:
    name, args = RPC_CASES[case]
    model = tiny_models[name]
    with RpcServers(rpc_server_bin, 2) as rpc:
        res = probe_launch(server_bin, ["-m", str(model), "--rpc", rpc.endpoints, *args, *COMMON], timeout_s=120)
        devices = [DeviceSpec(f"RPC0[127.0.0.1:{port}]", f"rpc {i}", 24576, 24576, remote=True)
                   for i, port in enumerate(rpc.ports)]
    _check(model, args + ["--rpc", rpc.endpoints], res, devices)
    per = res.report.per_device()
    meta = read_gguf(model)
    mtp_dev = plan(meta, settings_from_argv(["-m", str(model), *args]).settings, devices).layer_device[meta.hparams.n_layer]
    assert per[mtp_dev]["draft_kv"] > 0 and per[mtp_dev]["draft_compute"] > 0  # where the MTP block is
    other = next(d.key for d in devices if d.key != mtp_dev)
    assert per[other]["draft_kv"] == 0
    assert res.report.target.pipeline_parallel and res.report.target.sched_copies == 4
    assert per[HOST]["weights"] > 0  # token_embd stays on the host


def test_memreport_matches_the_log_lines(server_bin: Path, tiny_models: dict[str, Path]) -> None:
    res = probe_launch(server_bin, ["-m", str(tiny_models["tiny-moe-mtp"]), "-c", "4096", "-np", "2",
                                    "--spec-type", "draft-mtp", *COMMON], timeout_s=120)
    assert res.ready
    rep = res.report
    line_re = re.compile(r"(load_tensors|llama_kv_cache|llama_memory_recurrent|sched_reserve|llama_context):\s+(\S+)\s+"
                         r"(model|KV|RS|compute|output) buffer size =\s+([\d.]+) MiB")
    in_draft = False
    expected: dict[tuple[str, str, str], float] = {}
    for line in res.log.splitlines():
        if "creating MTP draft context" in line:
            in_draft = True
        m = line_re.search(line)
        if not m:
            continue
        ctx = "draft" if in_draft else "target"
        kind, buf, val = m.group(3), m.group(2), float(m.group(4))
        key = (ctx if kind != "model" else "model", kind, buf)
        expected[key] = expected.get(key, 0.0) + val if kind == "model" else val  # compute: last wins
    assert expected, res.log[-2000:]
    got: dict[tuple[str, str, str], float] = {}
    for b, v in rep.weights.items():
        got[("model", "model", b)] = v
    for ctx_name, ctx in (("target", rep.target), ("draft", rep.draft)):
        assert ctx is not None
        for kind, d in (("KV", ctx.kv), ("RS", ctx.recurrent), ("compute", ctx.compute), ("output", ctx.output)):
            for b, v in d.items():
                got[(ctx_name, kind, b)] = v
    assert got == expected
    assert rep.target.param_int("n_seq_max") == 2 and rep.draft.param_int("n_outputs_max") == 2
    assert all(device_of(b) == HOST for b in rep.weights)
