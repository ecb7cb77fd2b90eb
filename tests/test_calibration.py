"""The calibrated estimate (issue 22): fitting the graph terms, placing them per device, and the real
calibration of generated models by the real llama-server, checked on settings that are not design points
against llama.cpp's own dry-run figures (never against a plan that starts from the estimate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.archshapes import write_arch_shape
from tui.core.options.argv import settings_from_argv
from tui.core.planning import calibration as cal
from tui.core.planning.cache import attach, cached_calibration
from tui.core.planning.calibrate import calibrate
from tui.core.planning.devices import DeviceSpec
from tui.core.planning.exact import exact_plan
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.plan import plan

MiB = 2**20


def _f(T: int, n: int = 1, mask: float = 0.0, fa: bool = True, kq: float = 0.0, logits: float = 0.0) -> cal.Features:
    return cal.Features(T, n, fa, mask, kq, logits)


def _pt(term: str, mtp: bool = False) -> cal.DesignPoint:
    return cal.DesignPoint(term, (), mtp, term)


def test_fit_recovers_a_known_piecewise_buffer() -> None:
    """A synthetic buffer with an ffn slope, a floor over slots and the exact KQ term: the fit finds
    each term from the points where it is the peak and predicts unseen settings exactly."""
    def truth(f: cal.Features) -> float:
        return f.mask + max(100_000.0 * f.T, f.kq + 60_000.0 * f.T, 2e6 + 6e6 * f.n_seq + 50_000.0 * f.T)

    feats = [("ffn", _f(512, mask=4 * MiB)), ("ffn", _f(1024, mask=8 * MiB)),
             ("attention", _f(256, mask=8 * MiB, fa=False, kq=256 * MiB)),
             ("floor", _f(64, 1, 0.5 * MiB)), ("floor", _f(64, 4, 0.1 * MiB)), ("floor", _f(64, 8, 0.06 * MiB)),
             ("floor", _f(512, 8, 0.5 * MiB)), ("floor", _f(256, 2, 1 * MiB))]
    g = cal.fit_graph([(_pt(t), f, truth(f)) for t, f in feats], mask_in_ffn=True)
    assert g.ffn is not None and g.ffn[1] == pytest.approx(100_000.0)
    assert g.attn_nofa == pytest.approx(60_000.0)
    for f in (_f(128, 6, 2 * MiB), _f(2048, 1, 64 * MiB), _f(384, 3, 3 * MiB, fa=False, kq=96 * MiB), _f(96, 12)):
        assert g.predict(f) == pytest.approx(truth(f), rel=1e-6), f


def test_an_unconstrained_term_keeps_its_exact_lower_bound() -> None:
    """No design point put attention at the peak: the term is the mask and KQ alone, never a guess."""
    pts = [(_pt("ffn"), _f(512), 50 * MiB), (_pt("ffn"), _f(1024), 100 * MiB)]
    g = cal.fit_graph(pts, mask_in_ffn=True)
    assert g.attn_nofa is None and g.floor is None
    f = _f(256, mask=MiB, fa=False, kq=400 * MiB)
    assert g.predict(f) == pytest.approx(401 * MiB)


def test_calibration_round_trips_and_rejects_other_formats() -> None:
    c = cal.Calibration("CPU", "d" * 8, ["x", 1, 2], {"target": cal.GraphFit(True, (0.0, 1.0), None, 1.0, 2.0, (1, 2, 3, 4, 5, 6))},
                        split={"pp_first": 11.0})
    back = cal.Calibration.from_dict(json.loads(json.dumps(c.to_dict())))
    assert back is not None and back.to_dict() == c.to_dict()
    assert cal.Calibration.from_dict({**c.to_dict(), "format": cal.FORMAT - 1}) is None


def test_a_model_calibrated_by_llama_cpp_is_near_exact_on_settings_it_never_saw(
        server_bin: Path, rpc_server_bin: Path, tmp_path: Path) -> None:
    """qwen3 (an architecture no constant of the estimate was set on): calibrate, then compare the
    calibrated estimate with llama.cpp's dry run on settings that are not design points, host only
    and on two simulated GPUs played by stand-ins."""
    model = write_arch_shape("qwen3-8b", tmp_path / "qwen3-8b.gguf")
    meta = read_gguf(model)
    root = tmp_path / "exact"
    c = calibrate(meta, server_bin, root=root)
    assert isinstance(c, cal.Calibration), c
    assert c.runs >= len([p for p in cal.DESIGN if not p.mtp]) and c.split
    design = {tuple(cal.design_args(p, meta.hparams.n_ctx_train, meta.hparams.n_layer_all))
              for p in cal.DESIGN + cal.SPLIT_DESIGN}
    sim = [DeviceSpec(f"CUDA{i}", "simulated", 24576, 24000) for i in range(2)]
    cases = [(["-c", "12288", "-np", "3", "-ub", "384"], []), (["-c", "20000", "-np", "1", "-fa", "off", "-ub", "192"], []),
             (["-c", "6144", "-np", "2", "-ub", "768", "-b", "1024", "-ts", "2,1"], sim)]
    for args, devs in cases:
        assert tuple(args) not in design
        s = settings_from_argv(["-m", str(model), *args, "-fit", "off", "-nr"]).settings
        ref = exact_plan(s, devs, server_bin, meta=meta, stand_in=bool(devs), rpc_bin=rpc_server_bin, root=root,
                         use_cache=False)
        assert ref.available, ref.reason
        attach(meta, c)
        est = plan(meta, s, devs, apply_fit=False)
        attach(meta, None)
        assert est.calibrated
        for d in ref.plan.devices:  # type: ignore[union-attr]
            want = d.components["compute"]
            got = est.device(d.key).components["compute"]  # type: ignore[union-attr]
            assert abs(got - want) <= max(0.02 * want, 0.05), (args, d.key, got, want)
    # cached with exact's entries: found again without a dry run, invalidated by another binary
    assert cached_calibration(meta, server_bin, root) is not None
    other = tmp_path / "llama-server"
    other.write_bytes(b"not the same build")
    assert cached_calibration(meta, other, root) is None


def test_a_cpu_calibration_is_not_applied_to_a_real_gpu(tmp_path: Path) -> None:
    """A calibration measured on the CPU backend sets the host's and CPU-backed devices' compute, never a
    real GPU's (its backend allocates differently): that plan stays structural and says so."""
    model = write_arch_shape("qwen3-8b", tmp_path / "qwen3-8b.gguf")
    meta = read_gguf(model)
    fit = cal.GraphFit(True, (0.0, 1000.0))
    attach(meta, cal.Calibration("CPU", "x", [], {"target": fit}))
    s = settings_from_argv(["-m", str(model), "-c", "4096", "-np", "1", "-fit", "off"]).settings
    sim = plan(meta, s, [DeviceSpec("CUDA0", "simulated", 24576, 24000)], apply_fit=False)
    real = plan(meta, s, [DeviceSpec("CUDA0", "NVIDIA GPU", 24576, 24000, real_gpu=True)], apply_fit=False)
    attach(meta, None)
    structural = plan(meta, s, [DeviceSpec("CUDA0", "NVIDIA GPU", 24576, 24000, real_gpu=True)], apply_fit=False)
    assert sim.calibrated and not real.calibrated
    assert real.device("CUDA0").components["compute"] == structural.device("CUDA0").components["compute"]  # type: ignore[union-attr]
    assert sim.device("CUDA0").components["compute"] != structural.device("CUDA0").components["compute"]  # type: ignore[union-attr]
