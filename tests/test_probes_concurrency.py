"""Concurrency, fast tier: the aggregation (aggregate TG over the concurrent phase, per-request TG and
acceptance), the slots a concurrency takes (-np N, the context per slot kept), the runner's
concurrent send against a stand-in client that proves N requests are in flight at once, and the
/metrics bracket around each pass's concurrent phase (acceptance by draft position at N > 1)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from tui.core.options.settings import Settings
from tui.core.probes import hygiene
from tui.core.probes.compare import RunView
from tui.core.probes.concurrency import (
    concurrency_summary, pass_aggregate, phase_wall_s, stored_phase_deltas, slots_memory_text, slots_problem,
    stream_order, with_slots,
)
from tui.core.probes.positions import DraftPositions, position_key
from tui.core.probes.records import RequestRecord, pass_stats, summarize_run
from tui.core.probes.run_types import ProbeProgress, RunConfig
from tui.core.probes.runner import ProbeRunner
from tui.core.probes.suites import ProbePrompt, Suite
from tui.core.server.client_errors import ServerGone
from tui.core.server.metrics import Metrics
from tui.core.results.store import Store
from tui.core.server.replies import CompletionResult


def rec(seq: int, repeat: int, start: float, wall_s: float, tokens: int, tps: float, drafted: int = 0,
        accepted: int = 0, error: str | None = None) -> RequestRecord:
    timings = {"predicted_n": tokens, "predicted_per_second": tps, "draft_n": drafted, "draft_n_accepted": accepted}
    return RequestRecord(seq=seq, prompt=f"p{seq}", kind="tg", repeat=repeat, n_predict=tokens, started_at=start,
                         wall_ms=wall_s * 1000.0, timings=None if error else timings, error=error)


# --------------------------------------------------------------------------- aggregation


def test_aggregate_tg_is_all_tokens_over_the_concurrent_phase() -> None:
    # Two requests side by side: 0..2 s and 0.5..3 s -> the phase is 3 s, 100 + 200 tokens.
    pass0 = [rec(0, 0, 100.0, 2.0, 100, 50.0, 10, 8), rec(1, 0, 100.5, 2.5, 200, 80.0, 20, 10)]
    assert phase_wall_s(pass0) == pytest.approx(3.0)
    agg = pass_aggregate(pass0, 0)
    assert agg["tokens"] == 300 and agg["requests"] == 2
    assert agg["aggregate_tg_tps"] == pytest.approx(100.0)
    # Higher than either request's own speed: what N users get together, not what one sees.
    assert agg["aggregate_tg_tps"] > 80.0


def test_summary_gives_aggregate_per_pass_and_per_request_medians_and_spread() -> None:
    records = [
        rec(0, 0, 0.0, 2.0, 100, 50.0, 10, 5), rec(1, 0, 0.0, 2.0, 100, 60.0, 10, 10),  # pass 0: 200 tok / 2 s
        rec(2, 1, 10.0, 4.0, 100, 40.0, 10, 6), rec(3, 1, 10.0, 4.0, 100, 70.0, 10, 9),  # pass 1: 200 tok / 4 s
        rec(4, 1, 10.0, 1.0, 5, 1.0, error="HTTP 500: boom"),  # a failed request counts nowhere
    ]
    s = concurrency_summary(records, 2)
    assert s["n"] == 2
    assert [p["aggregate_tg_tps"] for p in s["passes"]] == pytest.approx([100.0, 50.0])
    agg = s["aggregate_tg_tps"]
    assert (agg["n"], agg["median"], agg["min"], agg["max"]) == (2, 75.0, 50.0, 100.0)
    assert agg["spread"] == pytest.approx(50.0 / 75.0)
    tg = s["request_tg_tps"]
    assert (tg["n"], tg["median"], tg["min"], tg["max"]) == (4, 55.0, 40.0, 70.0)
    acc = s["request_acceptance"]
    assert (acc["median"], acc["min"], acc["max"]) == pytest.approx((0.75, 0.5, 1.0))


def test_summary_without_requests_or_drafts_and_old_runs() -> None:
    s = concurrency_summary([], 3)
    assert s == {"n": 3, "aggregate_tg_tps": None, "request_tg_tps": None, "request_acceptance": None, "passes": []}
    no_mtp = concurrency_summary([rec(0, 0, 0.0, 1.0, 10, 10.0)], 1)
    assert no_mtp["request_acceptance"] is None and no_mtp["aggregate_tg_tps"]["median"] == pytest.approx(10.0)


def test_stream_order_rotates_so_streams_start_on_different_prompts() -> None:
    assert stream_order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert stream_order(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert stream_order(["a", "b", "c"], 4) == ["b", "c", "a"]
    assert stream_order(["only"], 3) == ["only"]  # a one-request shape: N copies of it at once


# --------------------------------------------------------------------------- the slots


def test_with_slots_keeps_each_slots_context() -> None:
    s = Settings(model="m.gguf", ctx_size=4096)
    four = with_slots(s, 4)
    assert (four.parallel, four.ctx_size) == (4, 16384)
    assert with_slots(s, 1) is s
    assert with_slots(Settings(model="m.gguf", ctx_size=0), 2).ctx_size == 0  # the model's own context, per slot
    unified = Settings(model="m.gguf", ctx_size=4096, extra_args=["--kv-unified"])
    assert with_slots(unified, 2).ctx_size == 4096  # shared cells: -c is not split
    given = Settings(model="m.gguf", ctx_size=4096, parallel=8)
    assert with_slots(given, 4) is given  # the user's -np is kept


def test_slots_problem_names_the_flag_and_the_fix() -> None:
    assert slots_problem(None, 4) is None and slots_problem(4, 4) is None and slots_problem(1, 1) is None
    why = slots_problem(2, 4)
    assert why is not None and "-np 2" in why and "2 slots" in why and "concurrency 4" in why and "-np 4" in why
    assert slots_problem(-1, 4) is None and slots_problem(-1, 5) is not None  # auto is 4 slots


class FakePlan:
    def __init__(self, totals: dict[str, float]) -> None:
        self.totals = totals

    def to_dict(self) -> dict[str, Any]:
        return {"totals": self.totals}


def test_slots_memory_text_plans_one_slot_with_the_same_context_per_slot() -> None:
    asked: list[tuple[int | None, int | None]] = []

    def plan_of(s: Settings) -> FakePlan:
        asked.append((s.parallel, s.ctx_size))
        k = float(s.parallel or 1)
        return FakePlan({"kv_mib": 100.0 * k, "draft_kv_mib": 10.0 * k, "recurrent_mib": 5.0 * k, "weights_mib": 999.0})

    text = slots_memory_text(with_slots(Settings(model="m.gguf", ctx_size=1024), 4), plan_of)
    assert sorted(asked) == [(1, 1024), (4, 4096)]
    assert text == ("planned KV + recurrent state at -np 4: 460 MiB (+345 MiB over -np 1: KV +300, draft KV +30, "
                    "recurrent +15 MiB)")
    assert slots_memory_text(Settings(model="m.gguf", parallel=4), lambda s: None) is None  # no plan, no line
    assert slots_memory_text(Settings(model="m.gguf"), plan_of) is None  # one slot costs nothing extra


def test_hygiene_expects_as_many_slots_as_the_concurrency() -> None:
    assert hygiene.check_parallel(4, None, concurrency=4) == []
    (w,) = hygiene.check_parallel(8, None, concurrency=4)
    assert "-np 8" in w.message and "concurrency 4" in w.message and "-np 4" in w.message


# --------------------------------------------------------------------------- the runner's concurrent send


class StandIn:
    """A client whose requests all wait until `n` are in flight at once (bounded), then answer."""

    def __init__(self, n: int, slots: int | None = None, die_on: int | None = None) -> None:
        self.n, self.n_slots, self.die_on = n, slots if slots is not None else n, die_on
        self.in_flight = self.peak = self.sent = 0
        self._all_in: asyncio.Event | None = None
        self.metrics_calls = 0

    async def _request(self) -> CompletionResult:
        self._all_in = self._all_in or asyncio.Event()
        self.sent += 1
        if self.die_on is not None and self.sent == self.die_on:
            raise ServerGone("the server went away", "http://127.0.0.1:1", "stream")
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self.n:
            self._all_in.set()
        try:
            await asyncio.wait_for(self._all_in.wait(), timeout=5.0)
        finally:
            self.in_flight -= 1
        if self.in_flight == 0:
            self._all_in.clear()
        timings = {"predicted_n": 8, "predicted_per_second": 20.0, "prompt_n": 4, "prompt_ms": 1.0,
                   "predicted_ms": 400.0, "draft_n": 4, "draft_n_accepted": 3}
        return CompletionResult("text", timings, 0.01, 0.4, {}, True)

    async def chat(self, messages: Any, **kw: Any) -> CompletionResult:
        return await self._request()

    async def complete(self, prompt: Any, **kw: Any) -> CompletionResult:
        if kw.get("n_predict") == 8 and prompt == "Name three primary colours.":
            return CompletionResult("w", {"predicted_n": 1}, 0.0, 0.0, {}, True)  # the warm-up, alone
        return await self._request()

    async def metrics(self) -> Metrics:
        self.metrics_calls += 1
        return Metrics()

    async def props(self) -> dict[str, Any]:
        return {"total_slots": self.n_slots}

    async def slots(self) -> list[dict[str, Any]]:
        return []


SUITE = Suite("two", (ProbePrompt("a", raw="one"), ProbePrompt("b", raw="two")), "two raw prompts")


def test_runner_keeps_n_requests_in_flight_and_reports_the_aggregate() -> None:
    client = StandIn(3)
    run = asyncio.run(ProbeRunner(client, SUITE, RunConfig(repeat=2, n_predict=8, concurrency=3)).run())
    assert run.status == "ok", run.error
    assert client.peak == 3  # every request waited for the other two: all three were in flight at once
    assert len(run.requests) == 2 * 2 * 3 and len({r.seq for r in run.requests}) == 12
    assert all(r.metrics_delta is None for r in run.requests)  # server-wide counters: no per-request bracket
    block = run.summary["concurrency"]
    assert block["n"] == 3 and [p["requests"] for p in block["passes"]] == [6, 6]
    assert block["request_acceptance"]["median"] == pytest.approx(0.75)
    assert run.config.to_json()["concurrency"] == 3
    assert not [w for w in run.warnings if w.code == hygiene.PARALLEL]


class Counting(StandIn):
    """A stand-in whose /metrics counters grow, server-wide, as each request (the warm-up too) ends:
    `steps` drafts of `n_max` tokens, position i accepted `accepted[i]` times, as llama-server counts.
    Between the two scrapes of a pass every request of it ends, so any bracket narrower than the
    pass would miss or double-count its neighbours."""

    STEPS, ACCEPTED = 10, (8, 5, 2)

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.counters = {"steps": 0, "drafted": 0, "pos": [0, 0, 0]}
        self.scrapes: list[int] = []  # requests finished at each scrape

    def _count(self, steps: int, accepted: tuple[int, ...]) -> None:
        self.counters["steps"] += steps
        self.counters["drafted"] += steps * len(accepted)
        self.counters["pos"] = [a + b for a, b in zip(self.counters["pos"], accepted)]

    async def _request(self) -> CompletionResult:
        res = await super()._request()
        self._count(self.STEPS, self.ACCEPTED)
        acc = sum(self.ACCEPTED)
        return CompletionResult(res.text, {**res.timings, "draft_n": self.STEPS * 3, "draft_n_accepted": acc},
                                res.ttft_s, res.wall_s, {}, True)

    async def complete(self, prompt: Any, **kw: Any) -> CompletionResult:
        if kw.get("n_predict") == 8 and prompt == "Name three primary colours.":
            self._count(3, (3, 3, 3))  # the warm-up drafts too: it must stay out of every figure
        return await super().complete(prompt, **kw)

    async def metrics(self) -> Metrics:
        self.scrapes.append(self.sent)
        c = self.counters
        samples = {"llamacpp:spec_decode_num_drafts_total": float(c["steps"]),
                   "llamacpp:spec_decode_num_draft_tokens_total": float(c["drafted"]),
                   "llamacpp:spec_decode_num_accepted_tokens_total": float(sum(c["pos"]))}
        per_pos = {(("position", str(i)),): float(v) for i, v in enumerate(c["pos"])}
        return Metrics(samples, {"llamacpp:spec_decode_num_accepted_tokens_per_pos_total": per_pos})


def test_a_concurrent_pass_is_bracketed_whole_so_positions_and_advice_exist_at_n() -> None:
    client = Counting(2)
    events: list[ProbeProgress] = []
    run = asyncio.run(ProbeRunner(client, SUITE, RunConfig(repeat=2, n_predict=8, concurrency=2),
                                  progress=events.append).run())
    assert run.status == "ok", run.error
    assert client.scrapes == [0, 4, 4, 8]  # once before each pass's 4 requests start, once after all ended
    assert all(r.metrics_delta is None for r in run.requests)  # no request has a bracket of its own
    s = run.summary
    # Exact: 8 requests of 10 drafts each, nothing of the warm-up's, nothing counted twice.
    pos = DraftPositions.from_json(s["positions"])
    assert pos == DraftPositions(80, 240, (64, 40, 16))
    assert sum(pos.accepted) == s["draft_n_accepted"] and pos.steps == s["verify_steps"] == 80
    assert s["mean_accept_len"] == pytest.approx(1 + 120 / 80)
    assert [p["mean_accept_len"] for p in s["passes"]] == pytest.approx([2.5, 2.5])
    assert s["draft_advice"]["n_max"] == 3 and s["draft_advice"]["text"]
    # Each pass keeps its delta in the concurrency block, and announced it as the pass ended.
    c = s["concurrency"]
    assert [DraftPositions.from_delta(p["metrics_delta"]) for p in c["passes"]] == [DraftPositions(40, 120, (32, 20, 8))] * 2
    done = [e for e in events if e.event == "pass_done"]
    assert [(e.repeat, e.done) for e in done] == [(0, 4), (1, 8)] and done[0].metrics_delta == c["passes"][0]["metrics_delta"]


def test_the_stored_pass_deltas_give_the_same_figures_back(tmp_path: Any) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        run = asyncio.run(ProbeRunner(Counting(2), SUITE, RunConfig(repeat=2, n_predict=8, concurrency=2),
                                      sink=store).run())
        row = store.require(run.run_id or 0)
    deltas = stored_phase_deltas(row.summary)
    assert sorted(deltas) == [0, 1]
    recs = [RequestRecord.from_json(d) for d in row.requests]
    again = summarize_run(recs, ["a", "b"], deltas)
    assert again["positions"] == run.summary["positions"] and again["verify_steps"] == 80
    # The comparison of stored runs reads them too: its passes have the mean acceptance length.
    assert [p.mean_accept_len for p in RunView.from_row(row).passes] == pytest.approx([2.5, 2.5])
    assert [p.mean_accept_len for p in pass_stats(recs, ["a", "b"])] == [None, None]  # without them: unknown
    assert stored_phase_deltas(None) == {} and stored_phase_deltas({"concurrency": {"n": 2, "passes": [{"repeat": 0}]}}) == {}


def test_a_pass_cut_short_has_no_delta_and_the_others_keep_theirs() -> None:
    """A pass that did not end whole (the server went away in pass 2) has no bracket: its requests
    count nowhere in the per-position figures, pass 1's still do."""
    client = Counting(2)
    client.die_on = 7  # pass 2's third request
    run = asyncio.run(ProbeRunner(client, SUITE, RunConfig(repeat=2, n_predict=8, concurrency=2, warmup=False)).run())
    assert run.status == "failed"
    assert [p.get("metrics_delta") is not None for p in run.summary["concurrency"]["passes"]] == [True, False]
    assert DraftPositions.from_json(run.summary["positions"]) == DraftPositions(40, 120, (32, 20, 8))


def test_passes_mix_request_and_phase_deltas_by_pass() -> None:
    """`summarize_run` takes each pass's own bracket where it has one, each request's elsewhere."""
    def delta(steps: int, acc: tuple[int, ...]) -> dict[str, float]:
        return {"spec_decode_num_drafts_total": float(steps), "spec_decode_num_draft_tokens_total": float(3 * steps),
                "spec_decode_num_accepted_tokens_total": float(sum(acc)),
                **{position_key(i): float(v) for i, v in enumerate(acc)}}

    one = rec(0, 0, 0.0, 1.0, 10, 10.0, 3, 3)
    one.metrics_delta = delta(2, (2, 1, 0))
    two = [rec(1, 1, 5.0, 1.0, 10, 10.0, 3, 3), rec(2, 1, 5.0, 1.0, 10, 10.0, 3, 3)]
    two[0].metrics_delta = delta(99, (99, 99, 99))  # ignored: the pass's own bracket covers it
    s = summarize_run([one, *two], ["p0", "p1", "p2"], {1: delta(5, (4, 2, 1))})
    assert DraftPositions.from_json(s["positions"]) == DraftPositions(7, 21, (6, 3, 1))
    assert [p["mean_accept_len"] for p in s["passes"]] == pytest.approx([1 + 3 / 2, 1 + 7 / 5])


def test_runner_refuses_a_server_with_fewer_slots_in_one_sentence() -> None:
    run = asyncio.run(ProbeRunner(StandIn(4, slots=2), SUITE, RunConfig(repeat=1, concurrency=4)).run())
    assert run.status == "failed" and not run.requests
    assert run.error is not None and "2 slots" in run.error and "concurrency 4" in run.error and "-np 4" in run.error


def test_one_stream_failing_stops_the_others_and_fails_the_run() -> None:
    client = StandIn(2, die_on=3)
    t0 = time.monotonic()
    run = asyncio.run(ProbeRunner(client, SUITE, RunConfig(repeat=2, n_predict=8, concurrency=2, warmup=False)).run())
    assert run.status == "failed" and "went away" in (run.error or "")
    # The other stream's request (waiting for a partner that never comes) was abandoned at once, not
    # left to the stand-in's own 5 s bound.
    assert client.in_flight == 0 and time.monotonic() - t0 < 4.0


def test_cancel_stops_every_stream_within_the_poll() -> None:
    cancel = threading.Event()

    class Stuck(StandIn):
        async def _request(self) -> CompletionResult:
            self.in_flight += 1
            if self.in_flight == self.n:
                cancel.set()  # both in flight: now cancel
            try:
                await asyncio.sleep(30)  # never answers; the cancel must abandon it
            finally:
                self.in_flight -= 1
            raise AssertionError("not reached")

    client = Stuck(2)

    async def go() -> Any:
        return await asyncio.wait_for(ProbeRunner(client, SUITE, RunConfig(repeat=1, concurrency=2, warmup=False),
                                                  cancel=cancel).run(), timeout=5.0)

    run = asyncio.run(go())
    assert run.status == "cancelled" and client.in_flight == 0


# --------------------------------------------------------------------------- probe -m --concurrency N


def test_probe_launch_gets_n_slots_each_keeping_c_and_says_the_planned_cost(
        tiny_models: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    from tui.cli._common import check_server_args
    from tui.cli.probe import launch_slots
    from tui.core.options import reader

    args = ["-m", str(tiny_models["tiny-mtp"]), "-c", "1024", "--spec-type", "draft-mtp", "-t", "1"]
    out = launch_slots(args, check_server_args(args), 4, None)
    assert reader.value(out, "--parallel") == "4" and reader.value(out, "--ctx-size") == "4096"
    assert reader.values(out, "--ctx-size") == ["4096"]  # replaced, not given twice
    line = capsys.readouterr().err
    assert line.startswith("concurrency 4: launching with -np 4 -c 4096 (1024 tokens per slot); planned KV + "
                           "recurrent state at -np 4: "), line
    assert "over -np 1: KV +" in line and line.count("\n") == 1
