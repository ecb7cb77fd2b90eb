"""The cockpit probes N requests at once: the panel's "at once" field reaches the core runner, a server
with fewer slots is one line (or, for a server mtp-tune launched, the offer to put -np N in the form),
the live rows carry the aggregate TG and the per-position figures from each pass's /metrics bracket,
MTP on is judged against MTP off at the same concurrency, and the panel shows the aggregate line."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, Select, Static

from tests.helpers import ui_samples as samples
from tests.helpers.ready_backend import Ready
from tui.core.config.paths import config_dir
from tui.core.gpu.profiles import PROFILES
from tui.core.options.settings import Settings
from tui.core.probes.positions import DraftPositions, position_key
from tui.core.probes.records import RequestRecord
from tui.core.probes.run_types import ProbeProgress
from tui.ui.app import make_app
from tui.ui.cockpit.probe_panel import load_line
from tui.ui.cockpit.probing import _Progress, verdict_text
from tui.ui.cockpit.views import ProbeState, ProbeSummary
from tui.ui.options import AppOptions
from tui.ui.widgets.question import Question


async def _press_probe(pilot: Any, app: Any, at_once: str) -> None:
    app.query_one("#probe-concurrency", Input).value = at_once
    await pilot.press("f8")  # the probe key that works from any field too
    await pilot.pause()


async def test_the_field_reaches_the_runner_and_too_few_slots_offers_np_in_the_form() -> None:
    options = AppOptions(cursor_blink=False, settings=Settings(model="m.gguf", ctx_size=4096, parallel=2))
    backend = Ready(options, Settings(model="m.gguf", ctx_size=4096, parallel=2))
    app = make_app(options, backend)
    async with app.run_test(size=(120, 40)) as pilot:
        app.main.server.status = backend.status()
        await _press_probe(pilot, app, "2")
        for _ in range(100):
            if app.main.probes.runs_finished:
                break
            await pilot.pause(0.02)
        assert backend.asked == [("tasks", 2)]  # two slots take two at once: the run goes

        await _press_probe(pilot, app, "0")
        assert [n.message for n in app._notifications][-1] == "at once: a whole number of requests (1 or more), not '0'."

        await _press_probe(pilot, app, "4")
        question = app.screen
        assert isinstance(question, Question) and question.title_text == "4 requests at once need 4 slots"
        assert question.lines[0] == "-np 2 gives 2 slots, fewer than the concurrency 4: restart it with -np 4."
        assert "-np 4 and -c 8192 (4096 tokens per slot, as now)" in question.lines[1]
        await pilot.press("y")
        await pilot.pause()
        assert backend.asked == [("tasks", 2)]  # nothing ran, nothing restarted
        assert (app.main.plan.settings.parallel, app.main.plan.settings.ctx_size) == (4, 8192)  # r restarts with it


def test_a_watched_server_with_too_few_slots_is_one_line() -> None:
    from tui.ui.cockpit.probes import ProbeController

    probes = ProbeController
    why = probes.too_few_slots(Settings(parallel=1), 3, "relaunch it with -np 3, or probe fewer at once")
    assert why == "-np 1 gives 1 slot, fewer than the concurrency 3: relaunch it with -np 3, or probe fewer at once."
    assert probes.too_few_slots(Settings(), 4, "x") is None  # no -np: llama-server's automatic 4 slots
    assert probes.too_few_slots(Settings(), 5, "x") is not None
    assert probes.too_few_slots(None, 8, "x") is None  # nothing runs: the refusal says so first


def _record(seq: int, repeat: int, start: float) -> RequestRecord:
    timings = {"predicted_n": 64, "predicted_per_second": 20.0 + seq, "predicted_ms": 3000.0, "prompt_n": 8,
               "prompt_ms": 10.0, "draft_n": 30, "draft_n_accepted": 12}
    return RequestRecord(seq, "p", "tg", repeat, 64, timings=timings, started_at=start, wall_ms=2000.0)


def test_live_rows_at_n_have_the_aggregate_and_the_positions_of_each_pass() -> None:
    shown: list[ProbeState] = []
    track = _Progress(ProbeState(), "MTP n3 ×2", "tasks", shown.append, concurrency=2)
    for seq in range(2):
        track(ProbeProgress("request_done", seq + 1, 2, 5, record=_record(seq, 0, 100.0)))
    assert not shown[-1].summaries[-1].positions  # no request has a bracket of its own at N > 1
    delta = {"spec_decode_num_drafts_total": 20.0, "spec_decode_num_draft_tokens_total": 60.0,
             "spec_decode_num_accepted_tokens_total": 24.0, position_key(0): 14.0, position_key(1): 8.0,
             position_key(2): 2.0}
    track(ProbeProgress("pass_done", 2, 2, 5, repeat=0, metrics_delta=delta))
    row = shown[-1].summaries[-1]
    assert row.positions == DraftPositions(20, 60, (14, 8, 2)).shares and row.advice
    assert row.concurrency == 2 and row.aggregate_tg == (64.0, 64.0, 64.0)  # 128 tokens over the 2 s phase
    assert row.request_tg == (20.5, 20.0, 21.0)
    assert load_line(row) == "×2 together 64.0 (64.0–64.0) t/s · per-request spread 5 %"


def _row(config: str, n: int) -> ProbeSummary:
    return ProbeSummary(config, 3, 10.0, 9.0, 11.0, None, None, None, None, concurrency=n)


def test_mtp_on_is_judged_against_off_at_the_same_concurrency() -> None:
    def tg(*v: float) -> dict[str, Any]:
        return {"median": v[1], "min": v[0], "max": v[2], "n": 3, "spread": (v[2] - v[0]) / v[1]}

    raw = {"no MTP": {"tg_tps": tg(10, 10.1, 10.2)}, "no MTP ×4": {"tg_tps": tg(5, 5.1, 5.2),
                                                                   "concurrency": {"n": 4, "aggregate_tg_tps": tg(20, 20.2, 20.4)}},
           "MTP n3 ×4": {"tg_tps": tg(6, 6.1, 6.2), "concurrency": {"n": 4, "aggregate_tg_tps": tg(24, 24.2, 24.4)}}}
    rows = (_row("no MTP", 1), _row("no MTP ×4", 4), _row("MTP n3 ×4", 4))
    text = verdict_text(rows, raw)
    assert text.startswith("MTP n3 ×4 vs no MTP ×4: aggregate TG +19.8% better · TG +19.6% better"), text
    # One user against four is not the same workload: no verdict rather than a wrong one.
    assert verdict_text((_row("no MTP", 1), _row("MTP n3 ×4", 4)), raw) == ""


async def test_the_panel_shows_the_load_line_only_at_n() -> None:
    app = make_app(samples.fixed_options("probes-load"))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        box = app.query_one("#probe-load", Static)
        lines = str(box.render()).splitlines()
        assert box.display and lines == ["■ ×4 together 80.2 (78.9–81.0) t/s · per-request spread 2 %",
                                         "■ ×4 together 97.5 (90.3–102) t/s · per-request spread 19 %"]
        assert app.query_one("#probe-positions", Static).display  # the bars, from the passes' brackets
        app.main.probe_panel.show(samples.probes_running())  # one request at a time: no such line
        await pilot.pause()
        assert not box.display


async def test_the_run_button_runs_the_probe_action() -> None:
    """The panel's buttons named app actions the App does not have: a click did nothing."""
    app = make_app(samples.fixed_options("ready"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.click("#probe-run")
        await pilot.pause()
        assert [n.message for n in app._notifications] == ["this is a fixed preview; nothing runs"]


async def test_two_at_once_against_the_real_server(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """The whole path on a real llama-server launched with -np 2: the field's 2 reaches the runner, the
    row is the ×2 series with its aggregate, and the bars come from the passes' /metrics brackets."""
    suites = config_dir() / "suites"
    suites.mkdir(parents=True, exist_ok=True)
    (suites / "one.toml").write_text('name = "one"\n[[prompts]]\nname = "count"\nprompt = "Count to ten."\n')
    settings = Settings(model=str(tiny_models["tiny-mtp"]), ctx_size=2048, parallel=2, threads=1, threads_batch=1,
                        spec_type=["draft-mtp"], spec_draft_n_max=3)
    options = AppOptions(settings=settings, server_bin=server_bin, hardware=PROFILES["rtx3060-laptop-6g"], simulate=True,
                         cursor_blink=False, server_log_dir=tmp_path / "logs", probe_repeat=2, probe_n_predict=48,
                         sample_interval_s=0.5)
    app = make_app(options)
    async with app.run_test(size=(120, 40)) as pilot:
        app.query_one("#probe-suite", Select).value = str(suites / "one.toml")
        await pilot.press("l")
        deadline = time.monotonic() + 90.0
        while app.main.server.status.state != "ready" and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert app.main.server.status.state == "ready", app.main.server.status
        await _press_probe(pilot, app, "2")
        deadline = time.monotonic() + 90.0
        while not app.main.probes.runs_finished and time.monotonic() < deadline:
            await pilot.pause(0.05)
        state = app.main.probes.state
        assert app.main.probes.runs_finished == 1 and not state.running, [n.message for n in app._notifications]
        (row,) = state.summaries
        assert row.config.endswith("×2") and row.concurrency == 2 and row.n == 4  # 2 passes of 2 at once
        assert row.aggregate_tg is not None and row.aggregate_tg[0] > 0
        assert len(row.positions) == 3 and row.positions[0] == pytest.approx(1.0)  # the tiny draft always agrees
        stored = DraftPositions.from_json(state.raw_summaries[row.config]["positions"])
        assert stored is not None and stored.steps > 0
        assert app.query_one("#probe-load", Static).display and app.query_one("#probe-positions", Static).display
        await pilot.press("s")
