"""Concurrency as a workload property (fast tier): the tune's workload at N sizes N slots' context and
keeps the ids of tunes at 1; the verdict at 1 and N side by side reads, writes and words both levels
with the lab's one noise rule; the tune's options refuse a -np that cannot serve N."""

from __future__ import annotations

import pytest

from tui.core.lab.ab_load import LoadVerdict, levels_for
from tui.core.lab.ranking import PassSample, decide
from tui.core.options.settings import Settings
from tui.core.probes.concurrency import rescale_slots, with_slots
from tui.core.tune.workload import Workload, WorkloadError, parse_workload, placeholder


def test_a_workload_at_n_gives_every_slot_the_longest_request() -> None:
    one = Workload("2000:500", 2000.0, 500.0, 2500)
    four = Workload("2000:500", 2000.0, 500.0, 2500, concurrency=4)
    assert one.ctx_needed() == 2560 and four.ctx_needed() == 4 * 2560
    assert one.to_json() == {"label": "2000:500", "in_tokens": 2000.0, "out_tokens": 500.0, "longest": 2500}
    assert Workload.from_json(four.to_json()) == four
    assert Workload.from_json(one.to_json()).concurrency == 1  # a tune state saved before concurrency


def test_parse_workload_carries_the_concurrency_and_keeps_old_ids() -> None:
    spec = parse_workload("128:64", 3)
    assert spec.concurrency == 3 and spec.shape is not None and spec.shape.concurrency == 3
    assert placeholder(parse_workload("tasks", 2)).concurrency == 2
    assert spec.identity()["concurrency"] == 3
    assert "concurrency" not in parse_workload("128:64").identity()  # a tune at 1 keeps the id it had
    assert parse_workload("tasks", 2).sized(Workload("tasks", 10.0, 20.0, 30)).concurrency == 2
    with pytest.raises(WorkloadError, match="--concurrency 0"):
        parse_workload("128:64", 0)


def test_rescaling_slots_keeps_the_context_per_slot_both_ways() -> None:
    one = Settings(model="m.gguf", ctx_size=2048, parallel=1)
    four = with_slots(one, 4)
    assert (four.parallel, four.ctx_size) == (4, 8192)
    back = rescale_slots(four, 4, 1)
    assert (back.parallel, back.ctx_size) == (1, 2048)


def test_levels() -> None:
    assert levels_for(1) == [1] and levels_for(4) == [1, 4]


def _samples(off: list[tuple[float, float]], on: list[tuple[float, float]]) -> list[PassSample]:
    out = []
    for i, ((pp0, tg0), (pp1, tg1)) in enumerate(zip(off, on)):
        out += [PassSample("off", i, 2 * i, pp0, tg0, None), PassSample("on", i, 2 * i + 1, pp1, tg1, 0.9)]
    return out


def test_the_verdict_at_one_and_at_n_side_by_side() -> None:
    # One request: MTP's TG +50 % wins; four at once: the batch ate the spare compute, MTP's TG -20 %.
    at1 = decide(_samples([(1000.0, 20.0), (1010.0, 20.2), (990.0, 19.8)], [(990.0, 30.0), (1000.0, 30.3), (985.0, 29.7)]),
                 (100, 500))
    at4 = decide(_samples([(500.0, 15.0), (505.0, 15.1), (495.0, 14.9)], [(495.0, 12.0), (500.0, 12.1), (490.0, 11.9)]),
                 (100, 500))
    lv = LoadVerdict([(1, at1), (4, at4)])
    assert (at1.label, at4.label) == ("b_wins", "b_loses") and lv.status == "complete"
    table = lv.table()
    assert table[0].startswith("concurrency  1: MTP wins") and table[1].startswith("concurrency  4: MTP loses")
    assert "TG per request 15.0 [14.9-15.1] -> 12.0 [11.9-12.1] t/s" in table[1]
    assert lv.answer().startswith("At concurrency 1: 100 tokens in, 500 out: MTP wins")
    back = LoadVerdict.from_json(lv.to_json())
    assert [(n, v.label) for n, v in back.levels] == [(1, "b_wins"), (4, "b_loses")]
    assert back.at(4) is not None and back.at(4).e2e.label == at4.e2e.label and back.at(2) is None  # type: ignore[union-attr]
    assert lv.to_json()["levels"][1]["concurrency"] == 4
    # Recomputed for another shape without running anything, per level.
    assert [n for n, _ in lv.for_workload(10, 10).levels] == [1, 4]


def test_an_unfinished_level_makes_the_whole_unfinished() -> None:
    at1 = decide(_samples([(1000.0, 20.0)], [(990.0, 30.0)]), status="cancelled")
    assert LoadVerdict([(1, at1)]).status == "cancelled"


def test_the_tune_screen_reads_its_at_once_field_and_words_the_levels() -> None:
    from types import SimpleNamespace

    from tui.ui.lab import tune_ops
    from tui.ui.lab.tune_views import TuneSetup

    options = SimpleNamespace(server_bin="/nonexistent/llama-server")
    why = tune_ops.prepare(Settings(model="m.gguf"), TuneSetup(workload="64:32", concurrency="four"), options)
    assert why == "at once: a whole number of requests (1 or more), not 'four'."
    why = tune_ops.prepare(Settings(model="m.gguf"), TuneSetup(workload="64:32", concurrency="0"), options)
    assert why == "at once: a whole number of requests (1 or more), not '0'."
    at1 = decide(_samples([(1000.0, 20.0), (1010.0, 20.2)], [(990.0, 30.0), (1000.0, 30.3)]), (100, 500))
    text = tune_ops.levels_text(LoadVerdict([(1, at1), (4, at1)]))
    assert text.startswith(" By concurrency: 1: MTP WINS (") and "; 4: MTP WINS (" in text
    assert tune_ops.levels_text(None) == ""
