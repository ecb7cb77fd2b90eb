"""MTP on vs off against the real llama-server: the verdict's direction both ways, the interleaved
order and labels in the results store, cancelling mid-request, and a side that cannot start.

A model that accepts no draft pays for every one, so MTP must lose (checked on 25 MB variants of the
tiny models: their per-token compute stands well above a loaded host's jitter). tiny-mtp accepts every
draft, yet on the CPU backend MTP still loses TG here (measured: -12 % on tiny-mtp, -31 % on a
360 MB variant, acceptance 1.00), so the "MTP wins" direction is checked on the maths
(tests/test_tuning_verdict.py) and here only that full acceptance beats none.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tui.core.options.settings import Settings
from tui.core.results.store import Store
from tui.core.lab.launcher import SupervisorLauncher
from tui.core.demo.tiny_model import preset, write_tiny_model
from tui.core.lab.ab import mtp_sides, run_ab
from tui.core.lab.ranking import MTP
from tui.core.lab.events import LabEvent

pytestmark = pytest.mark.timeout(240)

SUITE = """
name = "ab-mini"
[[prompts]]
name = "story"
prompt = "Write a short story about a fox and a dog."
n_predict = 96
"""


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    p = tmp_path / "ab-mini.toml"
    p.write_text(SUITE)
    return p


def base(model: Path) -> Settings:
    return Settings(model=str(model), ctx_size=2048, parallel=1, threads=1, threads_batch=1, spec_draft_n_max=3)


def test_ab_passes_are_interleaved_stored_and_labelled(server_bin: Path, tiny_models: dict[str, Path],
                                                       suite_file: Path, tmp_path: Path) -> None:
    events: list[LabEvent] = []
    with Store(tmp_path / "results.sqlite") as store:
        v = run_ab(*mtp_sides(base(tiny_models["tiny-mtp"])), str(suite_file), (20, 400), passes=2, pair=MTP,
                   server_bin=server_bin, store=store, on_event=events.append)
        print(v.answer)
        assert v.status == "complete", v.error
        assert v.b.acceptance is not None and v.b.acceptance.median == pytest.approx(1.0)
        assert v.a.acceptance is None  # no drafts without MTP
        assert v.b.passes == v.a.passes == 2
        assert v.b.tg_tps is not None and v.a.tg_tps is not None and v.b.pp_tps is not None
        rows = sorted(store.list_runs(), key=lambda r: r.id)
        assert [r.id for r in rows] == v.run_ids and len(rows) == 4
        assert [r.mtp for r in rows] == [False, True, False, True]  # A B A B
        # Labelled from the server's running settings (the supervisor's record of the launch).
        assert [r.label.split(" ", 2)[2] for r in rows] == ["MTP off: no MTP pass 1/2", "MTP on: MTP n3 pass 1/2",
                                                            "MTP off: no MTP pass 2/2", "MTP on: MTP n3 pass 2/2"]
        assert len({r.label.split(" ")[1] for r in rows}) == 1  # one A/B id ties the four runs together
        assert all(r.status == "ok" for r in rows)
        # Labelled from what the server ran: only the spec type differs between the sides.
        assert rows[0].settings["spec_type"] == [] and rows[1].settings["spec_type"] == ["draft-mtp"]
        assert {k: v2 for k, v2 in rows[0].settings.items() if k != "spec_type"} == \
            {k: v2 for k, v2 in rows[1].settings.items() if k != "spec_type"}
    kinds = [e.kind for e in events]
    assert kinds[0] == "started" and kinds[-1] == "finished" and kinds.count("pass_done") == 4
    etas = [e.eta_s for e in events if e.kind == "pass_done"]
    assert etas[-1] == 0.0 and all(x is not None for x in etas)
    # Another workload from the same samples, nothing re-run: the verdict follows the break-even.
    assert v.for_workload(20, 400).to_json() == v.to_json()
    other = v.for_workload(5000, 10)
    assert other.samples == v.samples and other.workload == (5000, 10) and other.a.e2e_s != v.a.e2e_s


@pytest.fixture(scope="module")
def small_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """25 MB variants: per-token compute well above the scheduler's jitter on a loaded host."""
    out = tmp_path_factory.mktemp("small-ab")
    return {name: write_tiny_model(out / f"{name}.gguf", preset("small-mtp-q8_0", **kw))
            for name, kw in (("full", {}), ("random", {"mode": "random"}))}


def test_mtp_loses_when_nothing_is_accepted(server_bin: Path, small_models: dict[str, Path], suite_file: Path) -> None:
    full = run_ab(*mtp_sides(base(small_models["full"])), str(suite_file), (20, 400), passes=2, pair=MTP,
                  server_bin=server_bin, store=None)
    v = run_ab(*mtp_sides(base(small_models["random"])), str(suite_file), (20, 400), passes=2, pair=MTP,
               server_bin=server_bin, store=None)
    print(v.answer)
    assert v.status == "complete", v.error
    assert v.b.acceptance is not None and v.b.acceptance.median == pytest.approx(0.0)
    assert v.label == "b_loses", v.answer
    assert v.tg.rel_change is not None and v.tg.rel_change < 0  # (the TG label alone may be "same" on a loaded host)
    assert v.break_even.wins in ("never", "below")
    # Full acceptance makes the MTP side much faster than no acceptance (same model shape).
    assert full.b.tg_tps is not None and v.b.tg_tps is not None
    assert full.b.tg_tps.min > v.b.tg_tps.max, (full.answer, v.answer)


def test_cancel_mid_request_stops_the_server(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    suite = tmp_path / "long.toml"
    suite.write_text(SUITE.replace("n_predict = 96", "n_predict = 4000"))  # long enough to be in flight
    cancel = threading.Event()
    in_flight = threading.Event()
    launcher = SupervisorLauncher(server_bin)

    def on_event(e: LabEvent) -> None:
        if e.kind == "probe" and e.probe is not None and e.probe.event == "first_token":
            in_flight.set()

    box: dict[str, Any] = {}
    with Store(tmp_path / "results.sqlite") as store:
        t = threading.Thread(target=lambda: box.update(v=run_ab(*mtp_sides(base(tiny_models["tiny-mtp"])), str(suite),
                                                                 passes=2, pair=MTP,
                                                                 launcher=launcher, store=store, on_event=on_event,
                                                                 cancel=cancel)))
        t.start()
        assert in_flight.wait(60), "the first request never streamed"
        t0 = time.monotonic()
        cancel.set()
        t.join(30)
        assert not t.is_alive()
        print(f"cancel -> run_ab returned in {time.monotonic() - t0:.2f} s")
        v = box["v"]
        assert v.status == "cancelled" and v.label == "inconclusive"
        (row,) = store.list_runs()
        assert row.status == "cancelled"
    sup = launcher._sup
    assert sup is not None and sup.state.final  # the server was stopped, not left running
    launcher.close()


def test_a_side_that_cannot_start_fails_the_run(server_bin: Path, tiny_models: dict[str, Path], suite_file: Path) -> None:
    v = run_ab(*mtp_sides(base(tiny_models["tiny-nomtp"])), str(suite_file), passes=2, pair=MTP, server_bin=server_bin,
               store=None)
    assert v.status == "failed" and v.error and v.error.startswith("MTP on did not start")
    assert "MTP" in v.error and v.a.passes == 1 and v.b.passes == 0
    assert v.label == "inconclusive" and "failed" in v.answer
