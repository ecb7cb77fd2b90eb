"""The A/B verdict's maths (MTP on/off, or any two sides): break-even length, the noise rule and its own label
for "the same within the noise", recomputing for a new workload."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, strategies as st

from tui.core.probes.breakeven import break_even, crossing
from tui.core.options.settings import Settings
from tui.core.lab.ab import interleaved, with_mtp
from tui.core.lab.ranking import AB, MTP, AbVerdict, PassSample, decide


def samples(off: list[tuple[float, float]], on: list[tuple[float, float]], acc: float = 0.9) -> list[PassSample]:
    """(pp, tg) per pass for each side, interleaved off/on."""
    out = []
    for i, ((pp0, tg0), (pp1, tg1)) in enumerate(zip(off, on)):
        out.append(PassSample("off", i, 2 * i, pp0, tg0, None))
        out.append(PassSample("on", i, 2 * i + 1, pp1, tg1, acc))
    return out


# PP loses 20 %, TG gains 50 %: MTP pays for long outputs only.
OFF = [(1000.0, 20.0), (1010.0, 20.2), (990.0, 19.8)]
ON = [(800.0, 30.0), (808.0, 30.3), (792.0, 29.7)]


def test_break_even_where_pp_loss_equals_tg_gain() -> None:
    be = break_even(8000, 1000.0, 20.0, 800.0, 30.0)
    # PP loss 8000 * (1/800 - 1/1000) = 2 s; TG gain 1/20 - 1/30 per token: 2 / (1/60) = 120 tokens.
    assert be.wins == "above" and be.tokens == pytest.approx(120.0)
    assert "longer than 120 tokens" in be.text()
    assert crossing(be) == pytest.approx(120.0)


@given(n_in=st.integers(1, 100_000), pp0=st.floats(10, 1e4), tg0=st.floats(1, 500), pp1=st.floats(10, 1e4),
       tg1=st.floats(1, 500))
def test_break_even_agrees_with_end_to_end_times(n_in: int, pp0: float, tg0: float, pp1: float, tg1: float) -> None:
    assume(abs(tg1 - tg0) > 0.01 * tg0 and abs(pp1 - pp0) > 0.01 * pp0)
    be = break_even(n_in, pp0, tg0, pp1, tg1)

    def on_faster(length: float) -> bool:
        return n_in / pp1 + length / tg1 < n_in / pp0 + length / tg0

    if be.wins == "above":
        assert be.tokens is not None and be.tokens > 0
        assert on_faster(be.tokens * 2 + 2) and not on_faster(be.tokens / 2 - 1 if be.tokens > 4 else 0)
    elif be.wins == "below":
        assert be.tokens is not None and not on_faster(be.tokens * 2 + 2)
    elif be.wins == "always":
        assert on_faster(0) and on_faster(10_000)
    else:
        assert be.wins == "never" and not on_faster(0) and not on_faster(10_000)


def test_break_even_other_cases() -> None:
    assert break_even(1000, 1000.0, 20.0, 1200.0, 30.0).wins == "always"  # no PP loss
    assert break_even(1000, 1000.0, 30.0, 900.0, 20.0).wins == "never"  # loses both
    below = break_even(1000, 1000.0, 30.0, 2000.0, 29.0)  # better PP, worse TG
    assert below.wins == "below" and below.tokens and below.tokens > 0 and "shorter than" in below.text()
    assert break_even(1000, None, 20.0, 800.0, 30.0).wins == "unknown"
    assert break_even(0, None, 20.0, None, 30.0).wins == "always"  # no prompt: PP does not matter


def test_long_output_mtp_wins_long_prompt_mtp_loses() -> None:
    s = samples(OFF, ON)
    long_out = decide(s, (500, 2000))
    assert long_out.label == "b_wins" and long_out.conclusive and long_out.headline == "MTP wins"
    assert "MTP wins" in long_out.answer and "longer than" in long_out.answer
    long_in = decide(s, (13000, 50))
    assert long_in.label == "b_loses" and long_in.headline == "MTP loses"
    assert "the PP loss outweighs the TG gain" in long_in.answer
    # Both are the same measurements: only the workload changed, and the break-even moved with it.
    assert long_in.break_even.tokens == pytest.approx(13000 * (1 / 800 - 1 / 1000) / (1 / 20 - 1 / 30), rel=0.02)
    assert long_in.b.acceptance is not None and long_in.b.acceptance.median == pytest.approx(0.9)
    assert long_in.b.tg_tps is not None and long_in.b.tg_tps.median == pytest.approx(30.0)
    assert (long_in.a.name, long_in.b.name) == ("MTP off", "MTP on")
    assert long_in.tg.label == "better" and long_in.pp.label == "worse"


def test_for_workload_recomputes_from_the_stored_samples() -> None:
    v = decide(samples(OFF, ON), (500, 2000), run_ids=[1, 2, 3, 4, 5, 6])
    w = v.for_workload(13000, 50)
    assert w.label == "b_loses" and w.samples == v.samples and w.run_ids == v.run_ids
    assert w.to_json() == decide(samples(OFF, ON), (13000, 50), run_ids=v.run_ids).to_json()
    back = AbVerdict.from_json(v.to_json())
    assert back.to_json() == v.to_json()


def test_overlapping_ranges_are_the_same_within_the_noise_with_their_own_label() -> None:
    """The label is the rule's zone: a tune report said both "the same within the noise" and
    "inconclusive" of one A/B when `same` was folded into `inconclusive`."""
    noisy_off = [(1000.0, 20.0), (1000.0, 26.0), (1000.0, 23.0)]
    noisy_on = [(1000.0, 21.0), (1000.0, 27.0), (1000.0, 24.0)]  # +4 % with 26 % spread
    v = decide(samples(noisy_off, noisy_on), (100, 500))
    assert v.e2e.label == "same" and v.label == "same" and v.conclusive
    assert v.headline == "the same within the noise" and "the same within the noise" in v.answer
    assert "inconclusive" not in v.answer and "overlap" in v.answer
    assert AbVerdict.from_json(v.to_json()).label == "same"


def test_apart_within_the_noise_or_one_pass_is_inconclusive() -> None:
    off = [(1000.0, 20.0), (1000.0, 22.0), (1000.0, 21.0)]
    on = [(1000.0, 22.5), (1000.0, 24.5), (1000.0, 23.5)]  # ranges apart, +12 % against a 19 % spread
    v = decide(samples(off, on), (0, 500))
    assert v.e2e.label == "inconclusive" and v.label == "inconclusive" and not v.conclusive
    assert v.headline == "inconclusive" and "within the noise" in v.answer
    one = decide(samples(OFF[:1], ON[:1]), (500, 2000))  # one pass per side: the noise is unknown
    assert one.label == "inconclusive" and "noise unknown" in one.answer


def test_any_two_sides_are_named_in_the_answer_with_what_differs() -> None:
    s = [PassSample(side, i, 2 * i + (side == "B"), pp, tg, None)
         for i, ((pp0, tg0), (pp1, tg1)) in enumerate(zip(OFF, ON)) for side, pp, tg in (("A", pp0, tg0), ("B", pp1, tg1))]
    v = decide(s, (500, 2000), pair=AB, differs=("--cache-type-k (default f16) -> q8_0",))
    assert v.label == "b_wins" and v.headline == "B wins" and v.answer.startswith("500 tokens in, 2000 out: B wins (A ")
    assert "B wins for outputs longer than" in v.answer and "MTP" not in v.answer
    assert "A -> B: --cache-type-k (default f16) -> q8_0." in v.answer
    assert "TG 20.0 [19.8-20.2] -> 30.0 [29.7-30.3] t/s (+50.0%, better)" in v.answer  # each side's spread, its verdict
    back = AbVerdict.from_json(v.to_json())
    assert back.pair == AB and back.differs == v.differs and back.to_json() == v.to_json()
    # A verdict stored before pairs existed (a tune's journal) reads as MTP off/on.
    old = {k: x for k, x in decide(samples(OFF, ON), (500, 2000)).to_json().items() if k not in ("pair", "differs")}
    assert AbVerdict.from_json(old).pair == MTP


def test_missing_sides_and_bad_workload() -> None:
    v = decide([PassSample("off", 0, 0, 1000.0, 20.0, None)], (100, 100))
    assert v.label == "inconclusive" and "not enough data" in v.answer
    with pytest.raises(ValueError, match="token counts"):
        decide([], (-1, 10))


def test_with_mtp_changes_only_the_spec_type() -> None:
    base = Settings(model="m.gguf", ctx_size=4096, spec_type=["ngram-mod"], spec_draft_n_max=2, ubatch_size=256)
    on, off = with_mtp(base, True), with_mtp(base, False)
    assert on.spec_type == ["draft-mtp", "ngram-mod"] and on.mtp_enabled
    assert off.spec_type == ["ngram-mod"] and not off.mtp_enabled
    assert with_mtp(Settings(spec_type=["none"]), True).spec_type == ["draft-mtp"]
    assert with_mtp(Settings(spec_type=["draft-mtp"]), False).spec_type == []
    for s in (on, off):
        assert (s.ctx_size, s.spec_draft_n_max, s.ubatch_size, s.model) == (4096, 2, 256, "m.gguf")
    assert interleaved(2, MTP) == [("off", 0), ("on", 0), ("off", 1), ("on", 1)]
    assert interleaved(1) == [("A", 0), ("B", 0)]
