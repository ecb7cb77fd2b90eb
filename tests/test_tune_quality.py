"""The tune's KLD budget and its model-file axis (issue 32), with the measurement stubbed at its seam:
quality's results are injected (`tune.kld.Measurer`), no llama-perplexity runs. What must hold: a
main K/V type over `--max-kld` is not searched and said with its figure, the draft's types are free
of it, a file over it is not tried, a file's combinations are measured against the one reference
(the file and its K/V together) and a combination over it is never launched; every trial of the
search carries its figure to the report and the JSON; the folder of quants reads like llama.cpp."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.test_tuning_tuner import BASE, WL, Fake
from tui.core.lab.events import LabError
from tui.core.options.settings import Settings, settings_from_json
from tui.core.quality.measure import QualityError, QualityRequest, SettingResult
from tui.core.quality.models import ModelError
from tui.core.quality.parse import Figure, KldFigures
from tui.core.quality.text import corpus
from tui.core.tune.files import model_files, reference, split_models
from tui.core.tune.identity import tune_definition, tune_id
from tui.core.tune.kld import KldError, QualityAsk, tune_quality
from tui.core.tune.result import ReportFacts, render_report
from tui.core.tune.run import TuneRequest, TuneRun
from tui.core.tune.search import TuneOptions, tune
from tui.core.tune.space import Floors, build_space, quality_key
from tui.core.tune.workload import parse_workload

KV = ("f16", "q8_0", "q8_0/q4_0", "q4_0")  # the Fake machine knows these types
BUDGET = Floors(kv=None, max_kld=0.05)


def figures(kld: float) -> KldFigures:
    return KldFigures(Figure(kld, kld / 20), kld * 8, kld * 4, Figure(100 - 100 * kld, 0.4), Figure(-0.1, 0.01), 8, 256)


class Injected:
    """The seam: what llama-perplexity would print, by (file name, K, V); every request kept."""

    def __init__(self, table: dict[tuple[str, str, str], float]) -> None:
        self.table, self.asked = table, []  # type: list[QualityRequest]

    def __call__(self, req: QualityRequest) -> list[SettingResult]:
        self.asked.append(req)
        return [SettingResult(kv, figures(self.table[(req.model.name, kv.k, kv.v)]), 1.0, False) for kv in req.kv]


ONE = {("m.gguf", "f16", "f16"): 0.0, ("m.gguf", "q8_0", "q8_0"): 0.002, ("m.gguf", "q8_0", "q4_0"): 0.031,
       ("m.gguf", "q4_0", "q4_0"): 0.116}


def space(floors: Floors = BUDGET, **kw: Any) -> Any:
    vals = {"batch": (2048,), "kv": KV, **kw.pop("values", {})}
    return build_space(BASE, WL, has_mtp=True, floors=floors, values=vals, **kw)


def test_a_type_over_the_budget_is_not_searched_and_every_trial_carries_its_figure() -> None:
    seam = Injected(ONE)
    book, within = tune_quality(QualityAsk(0.05, (Path("m.gguf"),), corpus()), space(), BASE, seam)
    assert within == {"kv": ("f16", "q8_0", "q8_0/q4_0")}  # the asymmetric pair is within, q4_0 is not
    assert book.notes == ["q4_0: KLD 0.116 > 0.05, not searched."] and book.refused == {}
    assert len(seam.asked) == 1 and seam.asked[0].ref_model is None  # one pass per type, the model its own reference
    assert [kv.label for kv in seam.asked[0].kv] == list(KV)  # the main types only: the draft's are free of it
    sp = space(values=within, refused=book.refused)
    axes = {a.name: a.values for a in sp.axes}
    assert axes["kv"] == within["kv"] and axes["draft-kv"] == ("f16", "q8_0", "q4_0")
    pair = sp.point({"kv": "q8_0/q4_0"}, True).settings
    assert (pair.cache_type_k, pair.cache_type_v) == ("q8_0", "q4_0")

    res = tune(sp, WL, Fake(0).machine(), TuneOptions())
    assert res.best is not None
    for r in res.records:
        cost = book.of_trial(r)
        assert cost is not None and cost.kld <= 0.05, (r.values, cost)
        assert cost.kv.label == "/".join(dict.fromkeys(quality_key(settings_from_json(r.settings))[1:]))
    md = render_report(res, ReportFacts("m.gguf", WL, quality=book))
    answer = md.split("## Answer")[1].split("## Quality")[0]
    best = book.of_trial(res.best)
    assert best is not None and f"Its quality cost: {best.text()} ({best.kv.label} K/V on m.gguf" in answer
    assert "| m.gguf | q4_0 | 0.116 ± 0.0058 | 88.4 ± 0.4 | over the budget |" in md
    trials = md.split("## Trials")[1].split("##")[0]
    assert "| quality |" in trials.splitlines()[2]
    assert all(book.trial_text(r) in trials for r in res.records)
    records = res.to_json(book)["records"]
    assert all(rec["quality"]["kld_mean"] <= 0.05 and "same_top_pct" in rec["quality"] for rec in records)
    unmeasured = render_report(res, ReportFacts("m.gguf", WL, quality=type(book)(0.05, Path("m.gguf"))))
    assert "not measured" in unmeasured.split("## Trials")[1]


def test_a_fixed_type_is_kept_and_no_type_left_is_an_error() -> None:
    fixed = Settings(model="m.gguf", cache_type_k="q4_0", cache_type_v="q4_0")
    sp = build_space(fixed, WL, has_mtp=True, floors=BUDGET, values={"batch": (2048,)})
    book, within = tune_quality(QualityAsk(0.05, (Path("m.gguf"),), corpus()), sp, fixed, Injected(ONE))
    assert within == {} and book.notes == ["q4_0 on m.gguf: KLD 0.116 > 0.05, kept: it is a fixed flag."]
    with pytest.raises(KldError, match=r"every main K/V type is over --max-kld 0.001 \(q8_0: KLD 0.002 > 0.001; "
                                       r"q4_0: KLD 0.116 > 0.001\); raise --max-kld"):
        tune_quality(QualityAsk(0.001, (Path("m.gguf"),), corpus()), space(values={"kv": ("q8_0", "q4_0")}), BASE,
                     Injected(ONE))


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    out = []
    for name, size in (("big.gguf", 300), ("mid.gguf", 200), ("low.gguf", 100)):
        (tmp_path / name).write_bytes(b"\0" * size)
        out.append(tmp_path / name)
    return out[0], out[1], out[2]


def test_each_file_against_the_reference_and_the_combinations_over_the_budget_are_never_launched(tmp_path: Path) -> None:
    big, mid, low = _files(tmp_path)
    table = {**{(f, k, v): x for (_m, k, v), x in ONE.items() for f in ("big.gguf",)},
             ("mid.gguf", "f16", "f16"): 0.012, ("mid.gguf", "q8_0", "q8_0"): 0.015, ("mid.gguf", "q8_0", "q4_0"): 0.061,
             ("mid.gguf", "q4_0", "q4_0"): 0.2, ("low.gguf", "f16", "f16"): 0.3}
    files = model_files([str(tmp_path)])
    assert files == [big, mid, low] and reference(files, None) == big
    seam = Injected(table)
    sp = space(values={"model": tuple(map(str, files))})
    book, within = tune_quality(QualityAsk(0.05, tuple(files), corpus()), sp, Settings(model=str(big)), seam)
    assert within == {"model": (str(big), str(mid)), "kv": ("f16", "q8_0", "q8_0/q4_0")}
    assert book.notes == ["q4_0: KLD 0.116 on big.gguf, 0.2 on mid.gguf > 0.05, not searched.",
                          "low.gguf: KLD 0.3 > 0.05 with f16 K/V against big.gguf, not tried.",
                          "q8_0/q4_0 with mid.gguf: KLD 0.061 > 0.05, not tried."]
    # every file against the one reference; low.gguf, over the budget with f16 K/V, measured no further
    assert {(r.model.name, r.ref_model.name if r.ref_model else None) for r in seam.asked} == \
        {("mid.gguf", "big.gguf"), ("low.gguf", "big.gguf"), ("big.gguf", None)}
    assert [len(r.kv) for r in seam.asked if r.model == low] == [1]
    assert book.cost(Settings(model=str(mid), cache_type_k="q8_0", cache_type_v="q8_0")).kld == 0.015  # type: ignore[union-attr]

    sp = space(values={"batch": (2048,), **within}, refused=book.refused)
    refused = sp.point({"model": str(mid), "kv": "q8_0/q4_0"}, True)
    assert refused.invalid is not None and "KLD 0.061 > 0.05 (--max-kld) for q8_0/q4_0 with mid.gguf" in refused.invalid
    assert "model=mid.gguf" in refused.label and str(tmp_path) not in refused.label
    assert sp.point({"model": str(big), "kv": "q8_0/q4_0"}, True).invalid is None
    assert all(c.invalid is None and not book.over(book.cost(c.settings)) for c in sp.grid())
    res = tune(sp, WL, Fake(1).machine(), TuneOptions())
    assert all(book.of_trial(r) is not None for r in res.records)
    assert all(not (r.settings["model"] == str(mid) and r.settings["cache_type_v"] == "q4_0" and r.launches)
               for r in res.records)
    with pytest.raises(KldError, match="every model file is over --max-kld 0.001 with f16 K/V against big.gguf"):
        tune_quality(QualityAsk(0.001, (mid, low), corpus(), ref=big), sp, Settings(model=str(mid)), Injected(table))


def test_a_folder_gives_its_models_like_llama_cpp(tmp_path: Path) -> None:
    for name, size in (("a-Q4_K_M.gguf", 40), ("a-Q8_0.gguf", 80), ("mmproj-a-f16.gguf", 500), ("imatrix.gguf", 9),
                       ("b-00001-of-00002.gguf", 60), ("b-00002-of-00002.gguf", 60), ("notes.txt", 1)):
        (tmp_path / name).write_bytes(b"\0" * size)
    got = model_files([str(tmp_path), str(tmp_path / "a-Q8_0.gguf")])
    assert [p.name for p in got] == ["b-00001-of-00002.gguf", "a-Q8_0.gguf", "a-Q4_K_M.gguf"]  # a split set: all parts
    assert reference(got, str(tmp_path / "a-Q4_K_M.gguf")) == tmp_path / "a-Q4_K_M.gguf"
    (tmp_path / "empty").mkdir()
    for given, said in (([str(tmp_path / "empty")], "holds no model GGUF"), ([str(tmp_path / "x.gguf")], "no such file")):
        with pytest.raises(ModelError, match=said):
            model_files(given)
    assert split_models(["-m", "a.gguf", "-c", "256", "--model", "b.gguf"]) == (["a.gguf", "b.gguf"], ["-c", "256"])


def _run(model: Path, floors: Floors = BUDGET, measured: bool = True) -> TuneRun:
    ask = QualityAsk(floors.max_kld, (model,), corpus()) if measured else None
    req = TuneRequest(Settings(model=str(model), batch_size=2048), parse_workload("64:32"), Path("llama-server"), floors,
                      {"kv": KV}, gpus="cpu", quality=ask)
    return TuneRun(req)


def test_the_run_measures_before_any_launch_and_a_cancel_stops_it(tiny_models: dict[str, Path]) -> None:
    model = tiny_models["tiny-mtp"]
    run = _run(model)
    said: list[str] = []
    run.on_event = lambda ev: said.append(ev.message)
    run.measurer = Injected({(model.name, k, v): x for (_m, k, v), x in ONE.items()})
    run._measure_quality()
    assert run._values["kv"] == ("f16", "q8_0", "q8_0/q4_0") and run.quality is not None
    assert said[0].startswith("quality: measuring against tiny-mtp.gguf") and "quality: q4_0: KLD 0.116 > 0.05, not searched." in said

    def cancelled(req: QualityRequest) -> list[SettingResult]:
        again.cancel.set()  # what quality.measure raises when its pass is cancelled
        raise QualityError("llama-perplexity cancelled.")

    again = _run(model)
    again.measurer = cancelled
    with pytest.raises(LabError, match="cancelled while measuring quality; nothing was tuned yet"):
        again._measure_quality()
    assert isinstance(again.cancel, threading.Event) and again.quality is None


def test_the_budget_and_the_files_are_part_of_the_tunes_identity(tiny_models: dict[str, Path]) -> None:
    model = tiny_models["tiny-mtp"]
    plain = _run(model, Floors(), measured=False).definition
    assert "quality" not in plain  # a tune without quality keeps the id it had before
    assert plain == tune_definition(Settings(model=str(model), batch_size=2048), parse_workload("64:32"), Floors(),
                                    {"kv": KV}, plain["hardware"], rungs=plain["rungs"])
    ids = {tune_id(plain), tune_id(_run(model).definition), tune_id(_run(model, Floors(kv=None, max_kld=0.1)).definition)}
    assert len(ids) == 3


def test_the_tui_setup_takes_a_max_kld_like_the_cli(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    from dataclasses import replace

    from tests.test_ui_tune import SMALL, live_options
    from tui.ui.lab import tune_ops

    opts = live_options(tiny_models["tiny-mtp"], None, tmp_path)
    ok = tune_ops.prepare(opts.settings, replace(SMALL, max_kld="0.05", axes=(*SMALL.axes, ("kv", "q8_0,q4_0"))), opts)
    assert not isinstance(ok, str), ok
    assert ok.request.floors == Floors(kv=None, min_ctx=ok.request.floors.min_ctx, max_kld=0.05)
    assert ok.request.quality is not None and ok.request.quality.max_kld == 0.05
    assert ok.request.values["kv"] == ("q8_0", "q4_0")  # no floor: q4_0 waits for its measured figure
    assert ok.summary.endswith("main KV measured first, max KLD 0.05"), ok.summary
    for setup, said in ((replace(SMALL, max_kld="0.05", kv_floor="q8_0"), "give one of them, not both"),
                        (replace(SMALL, max_kld="much"), "--max-kld 'much': give a mean KL divergence above 0")):
        got = tune_ops.prepare(opts.settings, setup, opts)
        assert isinstance(got, str) and said in got, got


def test_the_real_measurer_finds_llama_perplexity_once_and_keeps_chunks_out_of_the_log(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from tui.core.server.provision import ProvisionError
    from tui.core.tune import kld

    said: list[str] = []
    ticks: list[str] = []

    def measure(req: QualityRequest, oracle: Any, *, progress: Any, cancel: Any) -> Any:
        for msg in ("reference: m.gguf with f16 K/V at -c 256, 8 chunks (1 MB of logits)", "q8_0: chunk 1/8",
                    "q8_0: measuring against the reference"):
            progress(msg)
        return SimpleNamespace(results=[SettingResult(req.kv[0], figures(0.002), 1.0, True)])

    monkeypatch.setattr(kld, "ensure_perplexity", lambda *a, **kw: SimpleNamespace(path=Path("llama-perplexity")))
    monkeypatch.setattr(kld, "oracle_info", lambda path: "oracle")
    monkeypatch.setattr(kld, "measure", measure)
    run = kld.find_measurer(None, Path("llama-server"), said.append, None, tick=ticks.append)
    req = QualityRequest(model=Path("m.gguf"), server_args=(), kv=(kld.F16,), text=corpus())
    assert [r.figures.kld_mean.value for r in run(req)] == [0.002]
    assert ticks == ["q8_0: chunk 1/8"]
    assert said == ["reference: m.gguf with f16 K/V at -c 256, 8 chunks (1 MB of logits)",
                    "q8_0: measuring against the reference"]

    def missing(*a: Any, **kw: Any) -> Any:
        raise ProvisionError("no llama-perplexity beside llama-server")

    monkeypatch.setattr(kld, "ensure_perplexity", missing)
    with pytest.raises(QualityError, match="no llama-perplexity to measure with: no llama-perplexity beside"):
        kld.find_measurer(None, Path("llama-server"), said.append, None)
