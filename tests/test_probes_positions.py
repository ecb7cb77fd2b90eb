"""Acceptance by draft position: /metrics parsing, per-request deltas, run totals, the stored form, and
the advice's arithmetic (where drafting stops paying)."""

from __future__ import annotations

import pytest

from tui.cli.probe import position_lines
from tui.core.probes.draft_advice import DEFAULT_DRAFT_COST, MIN_GAIN, advise, measured_cost
from tui.core.probes.positions import DraftPositions, position_counters, position_key, shares_text, total
from tui.core.probes.records import RequestRecord, summarize_run
from tui.core.probes.transport import counter_delta, metric_counters
from tui.core.server.metrics import parse_prometheus

#: What llama-server b11434 printed after one request on the tiny model (n-max 3, agreement 0.5).
SCRAPE = """\
# HELP llamacpp:spec_decode_num_drafts_total Number of speculative verification steps.
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_draft_tokens_total 181
llamacpp:spec_decode_num_accepted_tokens_total 66
llamacpp:spec_decode_num_drafts_total 61
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 36
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 20
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 10
"""


def test_a_scrape_carries_the_per_position_counters() -> None:
    c = metric_counters(parse_prometheus(SCRAPE))
    assert c[position_key(0)] == 36 and c[position_key(2)] == 10
    assert c["spec_decode_num_drafts_total"] == 61
    assert position_counters(parse_prometheus("llamacpp:spec_decode_num_drafts_total 0\n")) == {}


def test_a_request_delta_gives_its_counts_even_when_the_series_appears_with_it() -> None:
    # Before the first speculative request the series is absent: its delta is the whole count.
    before = metric_counters(parse_prometheus("llamacpp:spec_decode_num_drafts_total 0\n"))
    after = metric_counters(parse_prometheus(SCRAPE))
    pos = RequestRecord(0, "p", "tg", 0, 128, metrics_delta=counter_delta(before, after)).positions
    assert pos == DraftPositions(61, 181, (36, 20, 10))
    assert sum(pos.accepted) == 66  # the server's accepted total: positions add up to it
    # A second request: only its own counts.
    later = metric_counters(parse_prometheus(SCRAPE.replace(" 36", " 50").replace("total 61", "total 80")
                                             .replace(" 181", " 240")))
    second = DraftPositions.from_delta(counter_delta(after, later))
    assert second == DraftPositions(19, 59, (14, 0, 0))


def test_no_positions_without_drafts_or_metrics() -> None:
    assert RequestRecord(0, "p", "tg", 0, 8).positions is None  # no /metrics
    assert DraftPositions.from_delta({"spec_decode_num_drafts_total": 0.0}) is None  # MTP off
    assert DraftPositions.from_delta({"spec_decode_num_drafts_total": 5.0}) is None  # an older build: no series


def test_shares_conditional_and_drafted_by_position() -> None:
    pos = DraftPositions(61, 181, (36, 20, 10))
    assert pos.n_max == 3
    assert pos.shares == pytest.approx((36 / 61, 20 / 61, 10 / 61))
    assert pos.conditional == pytest.approx((36 / 61, 20 / 36, 10 / 20))
    # 183 full-draft tokens, 181 drafted: the two missing come off the last position.
    assert not pos.drafted_exact and pos.drafted_by_position == (61, 61, 59)
    assert DraftPositions(10, 30, (5, 2, 1)).drafted_by_position == (10, 10, 10)
    # Never below what was accepted there: the shortfall moves to earlier positions.
    assert DraftPositions(10, 21, (9, 8, 2)).drafted_by_position == (10, 9, 2)
    assert shares_text(pos) == "1: 59 %  2: 33 %  3: 16 %"
    assert shares_text(None) == "-"


def test_counts_add_over_requests_and_round_trip() -> None:
    a, b = DraftPositions(10, 30, (5, 2, 1)), DraftPositions(4, 8, (3, 1))
    assert a + b == DraftPositions(14, 38, (8, 3, 1))
    assert total([None, a, None, b]) == a + b and total([None]) is None
    assert DraftPositions.from_json(a.to_json()) == a
    for bad in (None, {}, {"steps": "x", "drafted": 1, "accepted": [1]}, {"steps": 0, "drafted": 0, "accepted": []}):
        assert DraftPositions.from_json(bad) is None


def test_the_run_summary_keeps_positions_and_advice() -> None:
    def rec(seq: int, steps: int, drafted: int, acc: tuple[int, ...]) -> RequestRecord:
        delta = {"spec_decode_num_drafts_total": float(steps), "spec_decode_num_draft_tokens_total": float(drafted),
                 "spec_decode_num_accepted_tokens_total": float(sum(acc))}
        delta |= {position_key(i): float(v) for i, v in enumerate(acc)}
        return RequestRecord(seq, f"p{seq}", "tg", 0, 64, metrics_delta=delta,
                             timings={"predicted_n": 64, "predicted_ms": 100.0, "draft_n": drafted,
                                      "draft_n_accepted": sum(acc)})

    s = summarize_run([rec(0, 30, 90, (20, 10, 4)), rec(1, 31, 91, (16, 10, 6))])
    assert DraftPositions.from_json(s["positions"]) == DraftPositions(61, 181, (36, 20, 10))
    assert s["draft_advice"]["n_max"] == 3 and s["draft_advice"]["text"]
    # Without /metrics (an attached server started without --metrics) there is nothing to say.
    plain = summarize_run([RequestRecord(0, "p", "tg", 0, 8, timings={"predicted_n": 8, "predicted_ms": 10.0})])
    assert plain["positions"] is None and plain["draft_advice"] is None


# ---------------------------------------------------------------- the advice's arithmetic


def test_mean_length_and_drafted_per_n_max() -> None:
    a = advise(DraftPositions(100, 400, (82, 51, 12, 4)))
    assert a is not None
    assert a.length == pytest.approx((1.82, 2.33, 2.45, 2.49))  # L_m = 1 + r_1 + ... + r_m
    assert a.drafted == pytest.approx((1, 2, 3, 4))  # full drafts
    # n-max 2 against 4, for the same output: drafted tokens 2/2.33 against 4/2.49 per token...
    ch = a.change(2)
    assert ch["drafted"] == pytest.approx((2 / 2.33) / (4 / 2.49) - 1)
    assert ch["steps"] == pytest.approx(2.49 / 2.33 - 1)  # ...more verification steps...
    assert ch["accepted_per_step"] == pytest.approx(1.33 / 1.49 - 1)  # ...fewer accepted per step
    # ... and per token (1 + c D_m) / L_m decode steps.
    c = DEFAULT_DRAFT_COST
    assert ch["speed"] == pytest.approx(((1 + 4 * c) / 2.49) / ((1 + 2 * c) / 2.33) - 1)


def test_where_a_position_stops_paying() -> None:
    a = advise(DraftPositions(100, 400, (82, 51, 12, 4)))
    assert a is not None
    # Position 3 breaks even when (1 + 3c) / 2.45 == (1 + 2c) / 2.33: c = 0.12 / (2.33 - 2 * 0.12).
    c3 = 0.12 / (2.33 - 2 * 0.12)
    assert a.pays_below[2] == pytest.approx(c3)
    at = advise(DraftPositions(100, 400, (82, 51, 12, 4)), cost=c3)
    assert at is not None and at.step_cost(3) == pytest.approx(at.step_cost(2))
    # Below the default cost of 10 %, positions 3 and 4 lose: n-max 2 is the advice, with its evidence.
    assert a.best == 2
    assert a.text.startswith("positions 3-4 accept 12 % and 4 % of drafts: n-max 2 would draft 47 % fewer tokens")
    assert "mean length 2.49 -> 2.33" in a.text and "5.7 %" in a.text and "assumed" in a.text


def test_cheap_drafts_keep_the_n_max_and_a_strong_last_position_asks_for_more() -> None:
    pos = DraftPositions(100, 300, (95, 90, 85))
    a = advise(pos)
    assert a is not None and a.best == 3
    assert a.text.startswith("keep n-max 3") and "n-max 4 may pay too" in a.text
    # The same counts with a measured cost that makes every drafted token dear: n-max 1.
    dear = advise(pos, cost=0.9)
    assert dear is not None and dear.best == 1 and "measured against MTP off" in dear.text


def test_a_gain_under_the_threshold_keeps_what_ran() -> None:
    # Position 2 costs a little more than it brings at c = 0.1, but less than MIN_GAIN of the speed.
    pos = DraftPositions(1000, 2000, (800, 140))
    a = advise(pos)
    assert a is not None
    assert 1.0 < a.step_cost(2) / a.step_cost(1) < 1.0 + MIN_GAIN
    assert a.best == 2


def test_a_cost_that_drafting_cannot_repay_is_said() -> None:
    a = advise(DraftPositions(100, 100, (20,)), cost=0.5)
    assert a is not None and a.best == 1
    assert "does not pay at all" in a.text


def test_draft_cost_measured_from_mtp_off() -> None:
    pos = DraftPositions(100, 300, (60, 30, 10))  # L = 2.0, D = 3
    # TG on 100, off 75: 100 / 75 = 2 / (1 + 3c), so c = (2 * 0.75 - 1) / 3.
    assert measured_cost(pos, 75.0, 100.0) == pytest.approx(0.5 / 3)
    assert measured_cost(pos, 200.0, 100.0) == pytest.approx((2 * 2 - 1) / 3)
    assert measured_cost(pos, 30.0, 100.0) == 0.0  # faster than the model allows: noise, not a negative cost
    assert measured_cost(pos, None, 100.0) is None
    assert advise(None) is None and advise(DraftPositions(0, 0, (0,))) is None


def test_probe_output_says_the_positions_or_why_there_are_none() -> None:
    s = {"acceptance": 0.4, "verify_steps": 61, "positions": DraftPositions(61, 181, (36, 20, 10)).to_json(),
         "draft_advice": {"text": "keep n-max 3: position 3 accepts 16 % of drafts"}}
    shown = position_lines(s)
    assert shown[0] == "  by draft position  1: 59 %  2: 33 %  3: 16 %  (share of 61 drafts whose first i tokens were accepted)"
    assert shown[1] == "  advice: keep n-max 3: position 3 accepts 16 % of drafts"
    assert position_lines({"acceptance": None}) == []  # MTP off: nothing to say
    assert "--metrics" in position_lines({"acceptance": 0.4, "verify_steps": None})[0]
    assert "does not count" in position_lines({"acceptance": 0.4, "verify_steps": 61})[0]  # an older build
