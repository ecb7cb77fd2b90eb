"""`tune --gpus SPEC --stand-ins` (issue 21): simulated GPUs launched for real on loopback
ggml-rpc-servers whose address space is capped at the GPU's free memory, with the real llama-server
and a tiny MTP model whose 262144-token context needs more than the simulated GPU has."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.supervisor_util import servers_of
from tui.cli import main
from tui.core.demo.tiny_model import preset, write_tiny_model
from tui.core.options.settings import Settings
from tui.core.planning.devices import devices_now
from tui.core.planning.standin import StandIns, host_total_mib
from tui.core.lab.launcher import SupervisorLauncher

pytestmark = pytest.mark.timeout(240)

LONG = ["-c", "262144", "-b", "2048", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "auto", "-np", "1", "-t", "1"]


@pytest.fixture(scope="module")
def long_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("standin") / "long-ctx.gguf",
                            preset("tiny-mtp", ctx=262144, head_dim=64))


def _settings(model: Path, **kw: Any) -> Settings:
    base = dict(model=str(model), ctx_size=262144, batch_size=2048, cache_type_k="q8_0", cache_type_v="q8_0",
                flash_attn="on", parallel=1, threads=1)
    return Settings(**{**base, **kw})


def test_a_capped_stand_in_runs_out_of_memory_for_real_and_the_margin_is_translated(
        server_bin: Path, rpc_server_bin: Path, long_model: Path, tmp_path: Path) -> None:
    sim = [d for d in devices_now("1x700MiB").devices if not d.remote]
    with StandIns(rpc_server_bin, sim, capped=True) as si:
        be = SupervisorLauncher(server_bin, stand_ins=si, ready_timeout=60, log_dir=tmp_path / "logs")
        try:
            moved = be.translate(_settings(long_model, fit_target=[256]))
            assert moved.rpc == [si.endpoints] and moved.fit_target == [host_total_mib() - 700 + 256]
            # everything on the 700 MiB device: the micro-batch 2048 compute buffer (~1 GiB) cannot be allocated
            big = be.launch(_settings(long_model, fit=False, n_gpu_layers="all", ubatch_size=2048), threading.Event())
            assert not big.ok and big.memory_failure and big.memory_on_device, big.reason
            be.stop()
            small = be.launch(_settings(long_model, fit=False, n_gpu_layers="all", ubatch_size=256), threading.Event())
            assert small.ok, small.reason
        finally:
            be.close()
    assert servers_of(long_model) == []


def test_a_tune_on_stand_ins_searches_the_fit_target_by_real_launches(
        server_bin: Path, long_model: Path, capsys: pytest.CaptureFixture[str], launched: list[Settings]) -> None:
    rc = main(["tune", "-m", str(long_model), *LONG, "--spec-draft-n-max", "3", "--workload", "64:32",
               "--axis", "ubatch=512,2048", "--fixed", "draft-kv=q8_0", "--ab-passes", "0",
               "--gpus", "1x700MiB", "--stand-ins", "--json", "--server-bin", str(server_bin)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    d = json.loads(out.out)
    assert any("stand-ins capped at the simulated GPUs' free memory" in n for n in d["notes"]), d["notes"]
    host = host_total_mib()
    rpc = {tuple(s.rpc) for s in launched}
    assert len(rpc) == 1 and len(next(iter(rpc))) == 1  # one stand-in for the whole tune
    assert all(s.fit_target and s.fit_target[0] >= host - 700 for s in launched if s.fit is not False)
    measured = [r for r in d["result"]["records"] if r["status"] in ("ok", "eliminated")]
    assert measured and all(r["fit_target"] is not None and 0 <= r["fit_target"] <= 1024 for r in measured)
    assert all(r["finding"] is not None or r["launches"] <= 1 for r in measured)  # searched, or remembered
    assert servers_of(long_model) == []


def test_stand_ins_need_simulated_gpus(capsys: pytest.CaptureFixture[str], long_model: Path) -> None:
    assert main(["tune", "-m", str(long_model), "--workload", "64:32", "--stand-ins"]) == 2
    assert "--stand-ins plays simulated GPUs: give them with --gpus SPEC" in capsys.readouterr().err
