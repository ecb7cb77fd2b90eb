"""`mtp-tune quality` on the real llama-perplexity (beside the test llama-server) with real models:
Gemma 3 270M from PyPI and the generated tiny models. Short on purpose: -c 512 (256 for the tiny
models), 2 chunks. What must hold: the figures are llama-perplexity's own printed values, f16 K/V
against its own reference is exactly 0 and 100 %, q4_0 costs more than q8_0, a repeat gives the same
figures from the cache, and a new setting costs one pass, never a second reference pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers.third_party import gemma3_270m  # noqa: F401  (a fixture)
from tui.core.demo.tiny_model import PRESETS, write_tiny_model
from tui.core.quality import budget, cache
from tui.core.quality.measure import QualityReport, QualityRequest, measure
from tui.core.quality.oracle import OracleInfo, oracle_info
from tui.core.quality.request import KvPair, parse_kv_list
from tui.core.quality.text import QualityText, corpus
from tui.core.server import provision


@pytest.fixture(scope="session")
def oracle(server_bin: Path) -> OracleInfo:
    """The llama-perplexity of the test server's own build (beside it, else the cached build)."""
    found = provision.companion_for(server_bin, provision.PERPLEXITY_NAME)
    if found is None:
        pytest.fail(f"no llama-perplexity beside {server_bin} or in the cached build; `mtp-tune doctor --build` builds both")
    return oracle_info(found.path)


def _by_kv(report: QualityReport) -> dict[str, object]:
    return {r.kv.label: r for r in report.results}


def test_gemma_cache_types_against_f16_are_llama_perplexitys_own_figures(
        gemma3_270m: Path, oracle: OracleInfo) -> None:  # noqa: F811
    req = QualityRequest(model=gemma3_270m, server_args=("-m", str(gemma3_270m), "-t", "2"),
                         kv=tuple(parse_kv_list("f16,q8_0,q4_0")), text=corpus(), ctx=512, chunks=2)
    first = measure(req, oracle)
    assert (first.passes["reference"], first.passes["settings"]) == (1, 3)
    assert (first.ctx, first.chunks, first.tokens) == (512, 2, 2 * 255)
    assert first.ref_bytes == budget.ref_bytes(262144, 512, 2) == first.ref_path.stat().st_size  # type: ignore[union-attr]
    got = _by_kv(first)
    f16, q8, q4 = (got[k].figures for k in ("f16", "q8_0", "q4_0"))  # type: ignore[attr-defined]
    # printed as 0.000000 and 100.000 %; the maximum is the reference's 16-bit rounding of log-probabilities
    assert f16.kld_mean.value == 0 and f16.same_top_pct.value == 100 and f16.kld_max < 1e-3
    assert 0 < q8.kld_mean.value < q4.kld_mean.value, (q8.kld_mean, q4.kld_mean)
    assert q4.same_top_pct.value < 100 and q8.kld_p99 <= q8.kld_max

    # The same q8_0 pass run by hand prints exactly the figures the report holds.
    argv = [str(oracle.path), "-m", str(gemma3_270m), "-t", "2", "-c", "512", "-ctk", "q8_0", "-ctv", "q8_0",
            "--kl-divergence-base", str(first.ref_path), "--kl-divergence"]
    for _ in range(3):  # llama.cpp's logger can lose the end of its output at exit (ggml-org/llama.cpp#22142)
        printed = subprocess.run(argv, capture_output=True, text=True, timeout=300).stdout
        if "Same top p:" in printed:
            break
    for line in (f"Mean    KLD: {q8.kld_mean.value:10.6f} ± {q8.kld_mean.uncertainty:10.6f}",
                 f"Maximum KLD: {q8.kld_max:10.6f}", f"99.0%   KLD: {q8.kld_p99:10.6f}",
                 f"Mean    Δp: {q8.dp_mean_pct.value:6.3f} ± {q8.dp_mean_pct.uncertainty:5.3f} %",
                 f"Same top p: {q8.same_top_pct.value:6.3f} ± {q8.same_top_pct.uncertainty:5.3f} %"):
        assert line in printed, (line, printed[-3000:])

    again = measure(req, oracle)
    assert again.passes == {"reference": 0, "settings": 0, "repeated": 0}, "a repeat runs nothing"
    assert all(r.cached for r in again.results) and again.ref_cached
    assert [r.figures for r in again.results] == [r.figures for r in first.results]

    more = measure(replace(req, kv=(KvPair("q8_0", "q4_0"), KvPair("q4_0", "q4_0"))), oracle)
    assert (more.passes["reference"], more.passes["settings"]) == (0, 1), "a new setting: one pass, the reference cached"
    pair = _by_kv(more)
    assert pair["q4_0"].cached and not pair["q8_0/q4_0"].cached  # type: ignore[attr-defined]
    assert pair["q8_0/q4_0"].figures.kld_mean.value > 0  # type: ignore[attr-defined]


def test_a_weight_quant_against_a_higher_quant_of_the_same_model(
        tiny_models: dict[str, Path], oracle: OracleInfo, tmp_path: Path) -> None:
    # the random-weight tiny model: its next-token distribution is broad enough for q8_0 weights to show
    f16 = tiny_models["tiny-mtp-random"]
    q8 = write_tiny_model(tmp_path / "random-q8_0.gguf", replace(PRESETS["tiny-mtp-random"], dtype="q8_0"))
    req = QualityRequest(model=q8, server_args=("-m", str(q8), "-t", "2"), kv=tuple(parse_kv_list("f16,q4_0")),
                         text=corpus(), ref_model=f16, ctx=256, chunks=2)
    report = measure(req, oracle)
    assert report.reference.path == f16 and (report.passes["reference"], report.passes["settings"]) == (1, 2)
    weights, both = (r.figures for r in report.results)
    assert weights.kld_mean.value > 0 and weights.same_top_pct.value < 100, "q8_0 weights are not the f16 ones"
    assert both.kld_mean.value > weights.kld_mean.value, "a q4_0 cache on top of q8_0 weights costs more"
    assert (weights.ctx, weights.chunks) == (256, 2)


def _cli(server_bin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MTP_TUNE_LLAMA_SERVER=str(server_bin))
    return subprocess.run([sys.executable, "-m", "tui.cli", "quality", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def test_the_command_measures_then_answers_from_the_cache(tiny_models: dict[str, Path], server_bin: Path,
                                                         oracle: OracleInfo) -> None:
    model = tiny_models["tiny-mtp"]
    args = ("-m", str(model), "-c", "256", "-t", "2", "--spec-type", "draft-mtp", "--kv", "f16,q8_0/q4_0",
            "--chunks", "2")
    out = _cli(server_bin, *args, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["passes"]["reference"], data["passes"]["settings"]) == (1, 2)
    assert [r["kv"] for r in data["results"]] == ["f16", "q8_0/q4_0"]
    assert data["results"][0]["kld_mean"] == 0 and data["results"][0]["same_top_pct"] == 100
    assert data["ctx"] == 256 and data["chunks"] == 2 and data["tokens"] == 2 * 127
    assert data["dropped_flags"] == ["--spec-type"] and data["perplexity"]["path"] == str(oracle.path)
    assert Path(data["reference"]["logits"]).parent == cache.root() / "refs"
    again = _cli(server_bin, *args)
    assert again.returncode == 0, again.stderr
    assert "0 reference passes, 0 setting passes (2 settings from the cache)" in again.stdout, again.stdout
    rows = [ln for ln in again.stdout.splitlines() if ln.startswith(("f16 ", "q8_0/q4_0 "))]
    assert len(rows) == 2 and all(ln.endswith("cached") for ln in rows), again.stdout
    assert f"{data['results'][1]['kld_mean']:.6f}" in rows[1]


def test_a_text_shorter_than_it_looks_lowers_the_context_and_says_so(
        gemma3_270m: Path, oracle: OracleInfo, tmp_path: Path) -> None:  # noqa: F811
    # ~21 bytes per word but one or two Gemma tokens each: the estimate (4 bytes a token) allows -c 512,
    # the tokenizer counts fewer than the 1024 tokens two contexts need; planned again on its count
    text = QualityText("--text words.txt", " ".join(["internationalization", "counterrevolutionaries"] * 150))
    req = QualityRequest(model=gemma3_270m, server_args=("-m", str(gemma3_270m), "-t", "2"),
                         kv=(KvPair("q8_0", "q8_0"),), text=text, ctx=512, chunks=2)
    report = measure(req, oracle)
    assert (report.passes["reference"], report.passes["settings"]) == (2, 1), "the short pass counts too"
    assert report.ctx == 256 and any("not 512" in n and "two contexts" in n for n in report.notes), report.notes
    assert report.results[0].figures.ctx == 256
