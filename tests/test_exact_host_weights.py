"""Exact mode's host weights are llama.cpp's (issue 22, item 1): the mapped range and the repacked
buffer from the placement llama.cpp printed in its dry run, equal to what a real load then reports
(0.01 MiB, the log's precision); a wrong closed form never shows through, and where the placement
cannot be derived llama.cpp's floored figures stand, marked as such."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.archshapes import write_arch_shape
from tests.helpers.launch import probe_launch
from tui.core.options.argv import settings_from_argv
from tui.core.planning import accounting
from tui.core.planning.breakdown import Measurement, Row
from tui.core.planning.devices import HOST, DeviceSpec
from tui.core.planning.exact import ExactResult, exact_plan
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.hostweights import exact_host_weights
from tui.core.planning.plan import plan
from tui.core.planning.resolve import resolve
from tui.core.planning.standin import RpcServers
from tui.core.server.memreport import MemoryReport

COMMON = ["-t", "1", "-tb", "1", "--no-warmup", "-c", "4096"]
TOL = 0.01


@pytest.fixture(scope="module")
def qat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Gemma-3-1B's shape with every matrix Q4_0: the x86 CPU backend repacks part of it."""
    return write_arch_shape("gemma3-1b-qat", tmp_path_factory.mktemp("qat") / "gemma3-1b-qat.gguf")


def _exact(model: Path, args: list[str], server_bin: Path, root: Path, devices: list[DeviceSpec] | None = None,
           **kw: object) -> ExactResult:
    s = settings_from_argv(["-m", str(model), *args]).settings
    res = exact_plan(s, devices or [], server_bin, use_cache=False, timeout_s=90, root=root, **kw)  # type: ignore[arg-type]
    assert res.status == "exact", res.reason
    return res


def _same_buffers(res: ExactResult, real: MemoryReport) -> None:
    """The host's model buffers, each as the real load printed it."""
    host = {b: v for b, v in real.weights.items() if b.startswith("CPU")}
    got = res.sources[HOST].buffers
    assert set(got) == set(host), (got, host)
    assert all(abs(got[b] - host[b]) <= TOL for b in host), (got, host)
    assert abs(res.plan.device(HOST).components["weights"] - sum(host.values())) <= 2 * TOL  # type: ignore[union-attr]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [[], ["-lm", "none"]], ids=["mmap", "load-mode-none"])
def test_host_buffers_equal_a_real_load(mode: list[str], qat: Path, server_bin: Path, tmp_path: Path) -> None:
    args = [*mode, *COMMON]
    res = _exact(qat, args, server_bin, tmp_path)
    real = probe_launch(server_bin, ["-m", str(qat), *args], timeout_s=120)
    assert real.ready, real.log[-2000:]
    assert real.report.weights.get("CPU_REPACK", 0) > 100  # the case is about a repacked buffer
    _same_buffers(res, real.report)
    notes = res.sources[HOST].by_formula
    assert ("weights (mapped range from the file's offsets)" in notes) == (not mode)


@pytest.mark.slow
def test_a_wrong_closed_form_never_shows_in_exact_mode(qat: Path, server_bin: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real_add = accounting.add_weights

    def wrong(meta, r, dplans, layer_dev):  # noqa: ANN001, ANN202 - the formula, ten times too big on the host
        real_add(meta, r, dplans, layer_dev)
        dplans[HOST].components["weights"] *= 10

    monkeypatch.setattr(accounting, "add_weights", wrong)
    s = settings_from_argv(["-m", str(qat), *COMMON]).settings
    est = plan(read_gguf(qat), s, [])
    res = _exact(qat, COMMON, server_bin, tmp_path)
    real = probe_launch(server_bin, ["-m", str(qat), *COMMON], timeout_s=120)
    assert real.ready, real.log[-2000:]
    reported = sum(v for b, v in real.report.weights.items() if b.startswith("CPU"))
    assert est.device(HOST).components["weights"] > 9 * reported  # type: ignore[union-attr]
    _same_buffers(res, real.report)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [[], ["-lm", "none"]], ids=["mmap", "load-mode-none"])
def test_partial_offload_and_overrides_over_a_loopback_rpc_device(mode: list[str], qat: Path, server_bin: Path,
                                                                   rpc_server_bin: Path, tmp_path: Path) -> None:
    """-ngl 10 (the last 9 blocks and the output on the device) and two blocks' FFN up moved to the
    host by -ot: the mapped range spans the host blocks, the repacked buffer holds the moved Q4_0s."""
    args = [*mode, "-ngl", "10", "-ot", r"blk\.2[0-1]\.ffn_up=CPU", *COMMON]
    sim = [DeviceSpec("CUDA0", "simulated", 24576, 20000)]
    res = _exact(qat, args, server_bin, tmp_path, sim, stand_in=True, rpc_bin=rpc_server_bin)
    assert res.fit is not None and not res.fit.changed
    with RpcServers(rpc_server_bin, 1) as rpc:
        real = probe_launch(server_bin, ["-m", str(qat), "--rpc", rpc.endpoints, *args, "-fit", "off"], timeout_s=180)
    assert real.ready, real.log[-2000:]
    assert any(b.startswith("RPC0") for b in real.report.weights)
    _same_buffers(res, real.report)


def _measurement(host_model: int, repack_model: int | None, layers: dict[int, str]) -> Measurement:
    m = Measurement("target", [Row("host", "Host", "", host_model, 0, 0)])
    if repack_model is not None:
        m.rows.append(Row("buffer_type", "CPU_REPACK", "", repack_model, 0, 0))
    m.detail.layer_device.update(layers)
    return m


def test_llama_cpps_floors_stand_where_the_placement_disagrees(tiny_models: dict[str, Path]) -> None:
    """The 9999-against-4000 case: a placement whose sums llama.cpp's rows contradict is not used;
    llama.cpp's figure is, and the note says the mapped range was not derived."""
    meta = read_gguf(tiny_models["tiny-mtp"])
    r = resolve(settings_from_argv(["-m", str(tiny_models["tiny-mtp"])]).settings, meta.hparams)
    all_cpu = {i: "CPU" for i in range(meta.hparams.n_layer_all + 1)}
    weights, bufs, notes = exact_host_weights(meta, r, _measurement(4000, None, all_cpu))
    assert weights == 4000.5 and bufs == {"CPU_Mapped": 4000.5}
    assert notes and "not derived" in notes[0]
    weights, bufs, notes = exact_host_weights(meta, r, _measurement(4000, 12, {}))  # no -lv 5 placement lines
    assert weights == 4013.0 and bufs == {"CPU_Mapped": 4000.5, "CPU_REPACK": 12.5}
    assert "printed no placement" in notes[0]


def test_the_placement_lines_are_parsed() -> None:
    rep = MemoryReport()
    rep.feed("load_tensors: layer  12 assigned to device RPC0[127.0.0.1:50052], is_swa = 1")
    rep.feed("tensor blk.20.ffn_up.weight (4 MiB q4_0) buffer type overridden to CPU_REPACK")
    assert rep.layer_device == {12: "RPC0[127.0.0.1:50052]"}
    assert rep.buft_overrides == {"blk.20.ffn_up.weight": "CPU_REPACK"}


def test_the_cache_keeps_the_host_buffers(qat: Path, server_bin: Path, tmp_path: Path) -> None:
    s = settings_from_argv(["-m", str(qat), *COMMON]).settings
    first = exact_plan(s, [], server_bin, root=tmp_path)
    second = exact_plan(s, [], server_bin, root=tmp_path)
    assert second.cached and second.sources[HOST].buffers == pytest.approx(first.sources[HOST].buffers, abs=0.005)
    assert set(first.sources[HOST].buffers) == {"CPU_Mapped", "CPU_REPACK"}
    assert second.sources[HOST].by_formula == first.sources[HOST].by_formula
