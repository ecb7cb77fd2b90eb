"""llama-perplexity's printed figures, read from real captured output (tests/data/quality/: Gemma 3 270M,
-c 512, 2 chunks of the bundled long document, b11434, stdout and stderr merged as mtp-tune reads them).
The values asserted are the printed ones, typed in by hand from those files: the product parses, it
never recomputes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.core.quality.parse import (
    Figure, KldFigures, ParseError, chunk_done, cut_short, last_error, parse_base, parse_kld, scored_tokens,
)

DATA = Path(__file__).resolve().parent / "data" / "quality"


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


def test_a_kl_divergence_pass_reads_as_printed() -> None:
    f = parse_kld(_lines("kld-q4_0-gemma3-270m.txt"))
    assert f.kld_mean == Figure(0.126125, 0.008837)
    assert (f.kld_p99, f.kld_max) == (0.789145, 3.299583)
    assert f.same_top_pct == Figure(82.353, 1.690)
    assert f.dp_mean_pct == Figure(-1.650, 0.344)
    assert (f.ctx, f.chunks, f.tokens) == (512, 2, 510)
    assert f.ppl == Figure(37.299475, 5.337400) and f.ppl_base == Figure(32.149800, 4.525380)
    assert f.all["Median KLD"] == Figure(0.084219) and f.all["0.1% KLD"] == Figure(0.000124)
    assert f.all["RMS Δp"] == Figure(7.929, 0.645) and f.all["Minimum Δp"] == Figure(-60.399)
    assert f.all["Cor(ln(PPL(Q)), ln(PPL(base)))"] == Figure(98.61)
    assert KldFigures.from_json(f.to_json()) == f, "the results cache gives back the same figures"


def test_progress_rows_and_the_reference_pass() -> None:
    rows = [n for n in map(chunk_done, _lines("kld-q4_0-gemma3-270m.txt")) if n is not None]
    assert rows == [1, 2]
    base = parse_base(_lines("base-gemma3-270m.txt"))
    assert (base.chunks, base.ctx, base.ppl, base.short_tokens) == (2, 512, Figure(32.1498, 4.52537), None)
    short = parse_base(_lines("base-short-gemma3-270m.txt"))
    assert (short.short_tokens, short.needed_tokens, short.chunks) == (2, 1024, None)


def test_missing_figures_quote_the_last_error() -> None:
    lines = ["0.01.0 I load: ...", "0.02.0 E llama_model_load: error loading model: tensor 'x' is corrupted", "main: done"]
    with pytest.raises(ParseError, match="printed no Mean KLD: .*error loading model: tensor 'x' is corrupted"):
        parse_kld(lines)
    assert last_error(["nothing", "at all"]) == "at all" and last_error([]) == "no output"
    assert not cut_short(lines), "an error is said, not retried"
    whole = _lines("kld-q4_0-gemma3-270m.txt")
    for end in (5, 8, 15):  # llama.cpp's logger thread can lose the output's end after any line
        assert cut_short(whole[:end]), whole[end - 1]
    assert scored_tokens(8192, 1) == 4095 and scored_tokens(512, 6) == 1530
