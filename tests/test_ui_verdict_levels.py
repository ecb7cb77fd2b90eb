"""The MTP on/off verdict from the TUI at the probe panel's concurrency: at N > 1 `a` runs the A/B at 1
and at N (the core's `run_ab_levels`), reports its progress as one run, and the verdict screen shows
N's verdict in full with both side by side (re-judged together for another workload)."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import DataTable, Input

from tests.helpers import tuning_samples
from tests.helpers import ui_samples as samples
from tui.core.lab.ab_load import LoadVerdict
from tui.core.lab.events import LabEvent
from tui.core.lab.ranking import PassSample, decide
from tui.core.options.settings import Settings
from tui.ui.app import make_app
from tui.ui.lab import experiments, verdict_levels
from tui.ui.lab.verdict_screen import VerdictScreen
from tui.ui.widgets.question import Question
from tests.helpers.ready_backend import Ready
from tui.ui.options import AppOptions


def _level(off_tg: float, on_tg: float, acc: float) -> Any:
    samples_ = []
    for i in range(3):
        samples_.append(PassSample("off", i, 2 * i, 400.0 + i, off_tg + 0.1 * i, None, 10 + 2 * i))
        samples_.append(PassSample("on", i, 2 * i + 1, 390.0 + i, on_tg + 0.1 * i, acc, 11 + 2 * i))
    return decide(samples_, (1000, 500), settings={"model": "m.gguf"}, run_ids=[])


def load_verdict() -> LoadVerdict:
    """MTP wins for one user (TG 26 -> 40) and loses for four (each request 20 -> 12 t/s)."""
    return LoadVerdict([(1, _level(26.0, 40.0, 0.8)), (4, _level(20.0, 12.0, 0.8))])


def levels_text(screen: VerdictScreen) -> list[list[str]]:
    t = screen.query_one("#verdict-levels", DataTable)
    return [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]


def push_levels(pilot: Any) -> Any:
    v = load_verdict()
    view = experiments.verdict_view(v, done=12, total=12, message="MTP on vs off: complete")
    return pilot.app.push_screen(VerdictScreen(pilot.app.lab, fixed=view, fixed_verdict=v))


async def test_both_verdicts_side_by_side_and_rejudged_together() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        await push_levels(pilot)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, VerdictScreen) and screen.query_one("#verdict-levels").display
        rows = levels_text(screen)
        assert [(r[0], r[1]) for r in rows] == [("1", "MTP WINS"), ("4", "MTP LOSES")]
        assert rows[0][2:] == ["21.65", "15.03", "-30.6%", "26.1 → 40.1", "0.80"]
        assert "MTP LOSES AT 4 REQUESTS AT ONCE" in str(screen.query_one("#verdict-headline").render())  # the main table is N's
        assert screen.view is not None and screen.view.answer.startswith("At concurrency 1: ")
        assert "At concurrency 4: " in screen.view.answer
        screen.query_one("#verdict-out", Input).value = "5000"  # both levels judged for the new shape
        await pilot.pause()
        assert len(levels_text(screen)) == 2 and screen.view.workload == (1000, 5000)


async def test_a_verdict_at_one_request_has_no_levels_table() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        await tuning_samples.push_verdict()(pilot)
        assert not app.screen.query_one("#verdict-levels").display


def test_the_levels_report_progress_as_one_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Passes counted across the levels, each message naming its concurrency, and the first level's
    end not taken for the run's (the screen would stop saying it runs)."""
    import tui.core.lab.ab_load as ab_load

    asked: dict[str, Any] = {}

    def fake(a: Any, b: Any, suite: Any, workload: Any, passes: int, levels: list[int], **kw: Any) -> LoadVerdict:
        asked.update(a=a, b=b, levels=levels, passes=passes, pair=kw["pair"])
        for _ in levels:
            for kind, done in (("started", 0), ("pass_done", 1), ("finished", 2)):
                kw["on_event"](LabEvent(kind, float(done), 2, 0.0, message=kind))
        return load_verdict()

    monkeypatch.setattr(ab_load, "run_ab_levels", fake)
    seen: list[LabEvent] = []
    v, error = verdict_levels.run(Settings(model="m.gguf", port=8080), suite="tasks", workload=(1000, 500), passes=1,
                                  n_predict=64, concurrency=4, server_bin=None, on_event=seen.append,  # type: ignore[arg-type]
                                  cancel=None)  # type: ignore[arg-type]
    assert error is None and v.concurrency == 4 and asked["levels"] == [1, 4] and asked["pair"].a == "off"
    # MTP off (A) and on (B) of the settings on screen, without the user's port
    assert asked["a"].settings.port is None and asked["b"].settings.spec_type == ["draft-mtp"]
    assert [(e.kind, e.done, e.total) for e in seen] == [
        ("started", 0, 4), ("pass_done", 1, 4), ("pass_done", 2, 4),
        ("started", 2, 4), ("pass_done", 3, 4), ("finished", 4, 4)]
    assert seen[0].message == "1 at once: started" and seen[-1].message == "4 at once: finished"


async def test_a_starts_at_the_panels_concurrency_and_g_runs_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    options = AppOptions(cursor_blink=False, settings=Settings(model="m.gguf", ctx_size=4096, parallel=1))
    app = make_app(options, Ready(options, Settings(model="m.gguf", ctx_size=4096, parallel=1)))
    runs: list[int] = []

    def fake_run(settings: Settings, **kw: Any) -> tuple[Any, str | None]:
        runs.append(kw["concurrency"])
        return load_verdict(), None

    monkeypatch.setattr(verdict_levels, "run", fake_run)
    async with app.run_test(size=(120, 40)) as pilot:
        lab = app.main.lab
        monkeypatch.setattr(lab, "blocked", lambda: None)
        monkeypatch.setattr(lab, "stops_server", lambda: False)
        app.query_one("#probe-concurrency", Input).value = "4"
        app.main.action_mtp_ab()
        await pilot.pause()
        question = app.screen
        assert isinstance(question, Question)
        assert any("with 4 requests at once" in line and "side by side" in line for line in question.lines)
        await pilot.press("y")
        for _ in range(200):
            if lab.running is None and runs:
                break
            await pilot.pause(0.02)
        assert runs == [4] and lab.verdict_view is not None and len(lab.verdict_view.levels) == 2
        assert lab.rerun_ab() is None  # g: the same concurrency again
        for _ in range(200):
            if lab.running is None and len(runs) == 2:
                break
            await pilot.pause(0.02)
        assert runs == [4, 4]


def test_a_verdict_knows_its_concurrency() -> None:
    """`a` shows a verdict already there only when it was run at the concurrency asked now."""
    assert verdict_levels.concurrency_of(load_verdict()) == 4 and verdict_levels.concurrency_of(_level(1, 2, 0.5)) == 1


def test_levels_snapshot(snap_compare) -> None:  # noqa: ANN001 - the syrupy fixture
    async def run_before(pilot: Any) -> None:
        await push_levels(pilot)
        await pilot.pause()

    assert snap_compare(make_app(samples.fixed_options("idle")), run_before=run_before, terminal_size=(120, 40))
