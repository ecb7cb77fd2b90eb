"""The one ranking rule (`lab.ranking`): the three-zone verdict decides ties, the cheapest of the
leader's ties is the best in the sweep as in the tune, and a tune's answer on MTP on against off is
its final A/B's when it ran one (so the answer and the A/B cannot disagree)."""

from __future__ import annotations

from tui.core.lab import ranking
from tui.core.probes.stats import summarize
from tui.core.lab.trial import Samples, Trial
from tui.core.tune.result import ReportFacts, build_result, render_report
from tui.core.lab.ranking import PassSample, decide
from tui.core.tune.workload import shape


def rec(n: int, mtp: bool, ub: int, e2e: list[float]) -> Trial:
    return Trial(f"k{n}", number=n, memory_key=f"m{n}", values={"mtp": mtp, "ubatch": ub}, settings={"ubatch_size": ub},
                 mtp=mtp, stage="t",
                       samples=Samples([1000.0] * len(e2e), [50.0] * len(e2e), [], list(e2e)))


def test_best_of_is_the_cheapest_of_the_leaders_ties_for_either_direction() -> None:
    rows = [("a", [10.0, 10.2, 10.4], 1024), ("b", [10.3, 10.5, 10.6], 512), ("c", [12.0, 12.1, 12.2], 256)]
    score = {k: summarize(v) for k, v, _ in rows}
    cost = {k: ranking.cost_order(mtp=False, ubatch=ub, vram_mib=None, draft_n_max=None, then=None) for k, _, ub in rows}
    best, lead, tied = ranking.best_of([k for k, _, _ in rows], score.get, cost.__getitem__, higher_is_better=False)
    assert (best, lead, tied) == ("b", "a", ["a"])  # "c" is cheaper still, but clearly slower: never a tie
    best, lead, tied = ranking.best_of([k for k, _, _ in rows], score.get, cost.__getitem__, higher_is_better=True)
    assert (best, lead, tied) == ("c", "c", [])  # as a speed, "c" is clearly the highest


def test_the_leader_prefers_candidates_measured_to_the_last_rung() -> None:
    short = rec(1, False, 512, [5.0, 5.1])
    full = rec(2, False, 512, [6.0, 6.1, 6.0, 6.2])
    assert ranking.leader([short, full]) is full
    assert ranking.leader([short]) is short


def test_a_faster_candidate_whose_range_is_apart_but_within_the_noise_is_confirmed() -> None:
    lead = rec(1, False, 512, [10.0, 10.1, 10.2, 14.0])  # one slow pass: wide noise
    cand = rec(2, True, 512, [9.5, 9.6])
    assert ranking.versus(lead, cand).label == ranking.INCONCLUSIVE
    assert ranking.next_step(lead, cand) == (2, "faster than #1 within the noise: confirm")


def ab(on_e2e_slower: bool) -> object:
    off, on = ((500.0, 40.0), (505.0, 41.0), (498.0, 40.5)), ((200.0, 30.0), (202.0, 30.5), (199.0, 29.8))
    if not on_e2e_slower:
        on = ((490.0, 80.0), (495.0, 81.0), (492.0, 79.0))
    samples = []
    for i in range(3):
        samples += [PassSample("off", i, 2 * i, *off[i], None), PassSample("on", i, 2 * i + 1, *on[i], 0.7)]
    return decide(samples, (1000, 200))


def test_a_tunes_answer_reports_its_final_ab_not_the_trials_own_comparison() -> None:
    wl = shape(1000, 200)
    off = rec(1, False, 512, [10.0, 10.1, 10.2, 14.0])
    on = rec(2, True, 512, [10.5, 10.6, 10.6, 10.7])  # the trials: the same within the noise
    alone = build_result([off, on], ranking.RUNGS, 2, 2, "converged", 1.0, wl)
    assert alone.mtp_vs_off is not None and alone.mtp_vs_off["source"] == "trials"
    assert alone.mtp_vs_off["label"] == ranking.SAME and "the same within the noise" in alone.message
    v = ab(on_e2e_slower=True)
    assert v.label == "b_loses"  # type: ignore[attr-defined]
    res = build_result([off, on], ranking.RUNGS, 2, 2, "converged", 1.0, wl, v)  # type: ignore[arg-type]
    assert res.mtp_vs_off is not None and res.mtp_vs_off["source"] == "ab" and res.mtp_vs_off["label"] == ranking.WORSE
    assert "MTP on against off (interleaved A/B, 3 passes each): MTP loses" in res.message
    assert "same within the noise" not in res.message
    win = build_result([off, on], ranking.RUNGS, 2, 2, "converged", 1.0, wl, ab(on_e2e_slower=False))  # type: ignore[arg-type]
    assert "MTP wins" in win.message and win.mtp_vs_off["label"] == ranking.BETTER  # type: ignore[index]


def test_a_tune_report_says_one_thing_of_an_ab_within_the_noise() -> None:
    """The A/B's label was "inconclusive" for overlapping ranges, so one report said both "the same within the
    noise" (its answer) and "inconclusive" (its label); "same" is now the label's own."""
    off, on = ((500.0, 40.0), (505.0, 44.0), (498.0, 42.0)), ((499.0, 41.0), (503.0, 45.0), (497.0, 43.0))
    v = decide([s for i in range(3) for s in (PassSample("off", i, 2 * i, *off[i], None),
                                              PassSample("on", i, 2 * i + 1, *on[i], 0.7))], (1000, 200))
    assert v.label == "same" and v.e2e.label == ranking.SAME
    wl = shape(1000, 200)
    trials = [rec(1, False, 512, [10.0, 10.1, 10.2, 10.3]), rec(2, True, 512, [10.1, 10.2, 10.2, 10.4])]
    res = build_result(trials, ranking.RUNGS, 2, 2, "converged", 1.0, wl, v)
    md = render_report(res, ReportFacts("m.gguf", wl, ab=v, ab_note="#2 (MTP on) against #1 (MTP off), 3 passes each"))
    ab_line = next(line for line in md.splitlines() if line.startswith("Interleaved A/B"))
    assert "**the same within the noise**" in ab_line and "inconclusive" not in ab_line, ab_line
    assert "MTP on against off (interleaved A/B, 3 passes each): the same within the noise." in res.message
