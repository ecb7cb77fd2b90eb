"""Concurrency 2 against the real llama-server (tiny MTP model, -np 2): both slots are busy at once
while the probe runs, as the server's own /slots says, and the run reports the aggregate TG of each
pass's concurrent phase beside per-request TG and acceptance, and the acceptance by draft position
from /metrics bracketing each pass whole: exactly the server's own counters' growth over the run."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.llama import Running, llama_server
from tui.core.probes.concurrency import phase_wall_s
from tui.core.probes.positions import DraftPositions
from tui.core.probes.run_types import RunConfig
from tui.core.probes.runner import run_probe_sync
from tui.core.probes.suites import ProbePrompt, Suite
from tui.core.probes.transport import counter_delta, metric_counters
from tui.core.server.metrics import parse_prometheus

N_PREDICT = 256
N_MAX = 3
SUITE = Suite("one", (ProbePrompt("story", raw="Once upon a time"),), "one raw prompt")


@pytest.fixture(scope="module")
def two_slot_server(server_bin: Path, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    extra = ["-np", "2", "-c", "1024", "--spec-type", "draft-mtp", "--spec-draft-n-max", str(N_MAX)]
    with llama_server(server_bin, tiny_models["tiny-mtp"], extra, tmp_path_factory.mktemp("np2")) as srv:
        yield srv


def busy_slots(srv: Running) -> int:
    return sum(1 for s in json.loads(srv.get("/slots", timeout=5.0)) if s.get("is_processing"))


def counters(srv: Running) -> dict[str, float]:
    return metric_counters(parse_prometheus(srv.get("/metrics", timeout=5.0)))


def test_concurrency_two_fills_both_slots_and_reports_the_aggregate(two_slot_server: Running) -> None:
    srv = two_slot_server
    box: dict[str, Any] = {}
    done = threading.Event()
    before = counters(srv)  # no warm-up below: the probe's passes are all the server does in between

    def probe() -> None:
        try:
            box["run"] = run_probe_sync(srv.url, SUITE, RunConfig(repeat=2, n_predict=N_PREDICT, ignore_eos=True,
                                                                  concurrency=2, warmup=False))
        finally:
            done.set()

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    peak, polls, deadline = 0, 0, time.monotonic() + 120.0
    while not done.is_set() and time.monotonic() < deadline:  # each poll is one bounded GET; the wait below is
        peak = max(peak, busy_slots(srv))  # the run's own end, so no sleep stands in for the server's state
        polls += 1
        if peak == 2:
            break
        done.wait(0.01)
    done.wait(120.0)
    worker.join(5.0)
    print(f"/slots polled {polls} times; at most {peak} slot(s) busy at once")
    assert peak == 2, f"the server never had both slots busy ({polls} polls of /slots)"

    run = box["run"]
    assert run.status == "ok", run.error
    assert len(run.requests) == 4 and all(r.predicted_n == N_PREDICT for r in run.requests)
    c = run.summary["concurrency"]
    assert c["n"] == 2 and [p["requests"] for p in c["passes"]] == [2, 2]
    for p in c["passes"]:
        mine = [r for r in run.requests if r.repeat == p["repeat"]]
        a, b = sorted(mine, key=lambda r: r.started_at or 0.0)
        assert (b.started_at or 0.0) < (a.started_at or 0.0) + (a.wall_ms or 0.0) / 1000.0  # the two overlapped
        assert p["tokens"] == 2 * N_PREDICT
        assert p["aggregate_tg_tps"] == pytest.approx(2 * N_PREDICT / (phase_wall_s(mine) or 1.0))
    tg, acc = c["request_tg_tps"], c["request_acceptance"]
    assert tg["n"] == 4 and tg["min"] <= tg["median"] <= tg["max"]
    assert acc is not None and acc["n"] == 4 and acc["median"] > 0.9  # the tiny model's draft always agrees
    print(f"aggregate TG {c['aggregate_tg_tps']}; per request TG {tg}; acceptance {acc}")

    # Acceptance by draft position at N = 2: each pass's /metrics bracket around its whole concurrent
    # phase. Exact: the run's counts are the server's own per-position counters' growth over the run,
    # they add up to the accepted tokens the requests' timings report, and each pass's do to its own.
    server = DraftPositions.from_delta(counter_delta(before, counters(srv)))
    pos = DraftPositions.from_json(run.summary["positions"])
    assert server is not None and pos == server and pos.n_max == N_MAX
    assert sum(pos.accepted) == run.summary["draft_n_accepted"] and pos.steps == run.summary["verify_steps"]
    assert pos.drafted == run.summary["draft_n"]
    for p in c["passes"]:
        mine = DraftPositions.from_delta(p["metrics_delta"])
        assert mine is not None and sum(mine.accepted) == sum(r.draft_n_accepted for r in run.requests
                                                               if r.repeat == p["repeat"])
    assert run.summary["draft_advice"]["n_max"] == N_MAX
    print(f"by draft position at N = 2: {pos.to_json()}")
