"""The runs view. Its controller, the screen's one door to the results store: listing, opening,
comparing and exporting answer a result or one sentence, never a traceback, also when the store
cannot be opened. Its screen, through the real app: a comparison resolves llama-server's defaults and
spells differences as llama-server options, Enter opens a run with its notes in full."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import DataTable, Static

from tests.helpers import ui_samples as samples
from tests.test_quality_index import measured
from tui.core.quality import index
from tui.core.quality.index import figures_text, where_text
from tui.core.gpu.profiles import PROFILES
from tui.core.options.settings import Settings, mtp_from_settings, settings_json
from tui.core.probes.positions import position_key
from tui.core.probes.records import records_from_json, summarize_run
from tui.core.results.store import Store, StoreError, default_path
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.options import AppOptions
from tui.ui.runs.controller import RunsController, export
from tui.ui.runs.detail_screen import RunDetailScreen
from tui.ui.runs.preview import RunsPreview
from tui.ui.runs.screen import RunsScreen
from tui.ui.runs.views import RunRow

REQ = {"seq": 0, "prompt": "p", "kind": "chat", "repeat": 0, "timings": {"predicted_per_second": 30.0}}


def _stored(store: Store, tg: float, mtp: bool) -> int:
    run_id = store.begin_run(suite="tasks", mtp=mtp, settings={"ubatch_size": 512, "spec_draft_n_max": 2 if mtp else None})
    store.add_request(run_id, REQ)
    store.finish_run(run_id, "ok", summary={"tg_tps_median": tg, "pp_tps_median": 400.0, "n_requests": 1})
    return run_id


def test_lists_compares_and_exports_stored_runs(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        off, on = _stored(store, 20.0, False), _stored(store, 30.0, True)
        runs = RunsController(lambda: store)
        rows, error = runs.list_runs()
        assert error is None and [r.run_id for r in rows] == [on, off]
        assert rows[0] == RunRow(on, rows[0].when, "MTP n-max 2 · ub 512", 30.0, 400.0, None, 1)
        detail, error = runs.detail(on)  # stored without per-position figures: nothing to draw
        assert error is None and detail is not None and detail.positions == () and detail.advice == ""
        view, error = runs.compare(str(off), str(on))  # the screen's ids may be strings
        assert error is None and view is not None and view.rows
        assert {r.verdict for r in view.rows} <= {"better", "worse", "same", "inconclusive"}
        assert view.changes == ("--spec-draft-n-max (default 3) → 2",)  # B judged against A, A's side first
        path, error = export(store, (off, on), "csv", tmp_path / "out")
        assert error is None and path is not None and Path(path).read_text(encoding="utf-8").count("\n") >= 3


def test_a_missing_run_or_store_is_one_sentence(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        runs = RunsController(lambda: store)
        assert runs.compare(1, 2)[1] and runs.detail(1)[1] and runs.export((9,), "md")[1]

    def broken() -> Store:
        raise StoreError("the results database /x/results.sqlite is damaged")

    runs = RunsController(broken)
    assert runs.list_runs() == ((), "the runs could not be read: the results database /x/results.sqlite is damaged")
    assert runs.compare(1, 2) == (None, "the results database /x/results.sqlite is damaged")
    assert runs.detail(1) == (None, "the results database /x/results.sqlite is damaged")
    assert runs.export((1,), "json") == (None, "the results database /x/results.sqlite is damaged")


def test_an_opened_run_says_what_its_kv_costs_when_measured_on_its_model(tmp_path: Path,
                                                                        tiny_models: dict[str, Path]) -> None:
    """From the quality index by the model file's header digest; "not measured" otherwise, never guessed."""
    model = tiny_models["tiny-mtp"]
    m = measured(model, "q8_0")
    index.record(m)
    with Store(tmp_path / "r.sqlite") as store:
        def quality(model_path: Path | str, kv: str | None) -> str:
            run_id = store.begin_run(suite="tasks", model=str(model_path), mtp=False,
                                     settings=settings_json(Settings(model=str(model_path), cache_type_k=kv,
                                                                     cache_type_v=kv)))
            store.finish_run(run_id, "ok", summary={})
            detail, error = RunsController(lambda: store).detail(run_id)
            assert error is None and detail is not None
            return dict(detail.measurements)["quality of the K/V (KLD vs f16)"]

        assert quality(model, "q8_0") == f"q8_0/q8_0: {figures_text(m)} ({where_text(m)})"
        assert quality(model, "q4_0") == "q4_0/q4_0: not measured"
        assert quality(model, None) == "f16/f16: reference"
        assert quality(tmp_path / "gone.gguf", "q8_0") == "q8_0/q8_0: not measured"  # no file to read: not guessed


# --- through the real app: the runs view over a store, a run opened, two compared ---------------------

MODEL = "/models/qwen3.gguf"
LONG_NOTE = ("generations shorter than 400 tokens understate MTP's gain (n_predict 192); the table shows only a "
             "count of this warning, the opened run shows every word of it, down to this last one: END")


def _probe_run(store: Store, settings: dict, tg: float, *, warnings: list | None = None, label: str | None = None,
               accepted: tuple[int, ...] = ()) -> int:
    """A finished three-pass run as a probe stores it: requests, the summary built from them, warnings;
    `accepted`: each request's accepted tokens per draft position over 100 full drafts (its /metrics delta)."""
    delta = {"spec_decode_num_drafts_total": 100.0, "spec_decode_num_draft_tokens_total": 100.0 * len(accepted),
             **{position_key(i): float(v) for i, v in enumerate(accepted)}} if accepted else None
    reqs = [{"seq": i, "prompt": "p", "kind": "tg", "repeat": i, "n_predict": 512, "ttft_ms": 100.0,
             "timings": {"prompt_n": 800, "prompt_ms": 1000.0, "prompt_per_second": 800.0, "predicted_n": 512,
                         "predicted_ms": 511 / (tg + i) * 1000.0, "predicted_per_second": tg + i},
             "metrics_delta": delta} for i in range(3)]
    run_id = store.begin_run(suite="tasks", model=MODEL, mtp=mtp_from_settings(settings), settings=settings,
                             label=label, config={"repeat": 3, "n_predict": 512, "suite": {"prompts": [{"name": "p"}]}})
    for r in reqs:
        store.add_request(run_id, r)
    store.finish_run(run_id, "ok", summary=summarize_run(records_from_json(reqs), ["p"]), warnings=warnings or [])
    return run_id


def _app() -> MtpTuneApp:
    return make_app(AppOptions(settings=Settings(model=MODEL), hardware=PROFILES["rtx3060-laptop-6g"], simulate=True,
                               exact=False, cursor_blink=False))


async def until(pilot: Pilot, predicate: Callable[[], object], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return bool(predicate())


def _text(screen: Screen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def _open_runs(pilot: Pilot, app: MtpTuneApp, n: int) -> RunsScreen:
    await pilot.press("h")
    assert await until(pilot, lambda: isinstance(app.screen, RunsScreen) and len(app.screen._rows) == n)
    assert isinstance(app.screen, RunsScreen)
    return app.screen


async def test_compare_resolves_defaults_and_spells_the_difference_as_llama_server() -> None:
    """A run with llama-server's defaults left out and the same with them typed out ran the same
    server: no difference, no "things differ"; turning MTP on reads as the flags a user would type."""
    with Store(default_path()) as store:
        left_out = _probe_run(store, settings_json(Settings(model=MODEL, ubatch_size=512)), 30.0)
        typed_out = _probe_run(store, settings_json(Settings(model=MODEL, ubatch_size=512, batch_size=2048,
                                                             ctx_size=0, fit=True, flash_attn="auto"), only_set=False), 30.2)
        mtp = _probe_run(store, settings_json(Settings(model=MODEL, ubatch_size=512, batch_size=2048, ctx_size=0,
                                                       fit=True, flash_attn="auto", spec_type=["draft-mtp"],
                                                       spec_draft_n_max=2), only_set=False), 40.0)
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open_runs(pilot, app, 3)  # newest first: mtp, typed_out, left_out
        await pilot.press("down", "down", "space", "up", "space", "c")
        assert await until(pilot, lambda: _text(screen, "#compare-title") == f"Run {left_out} (A) vs run {typed_out} (B)")
        note = _text(screen, "#compare-note")
        assert "things differ" not in note and "batch_size" not in note and "None" not in note
        assert _text(screen, "#compare-changes") == (
            "settings: the same for llama-server (a value left out equals its default typed out)")

        await pilot.press("up", "space", "c")  # marks typed_out and mtp
        assert await until(pilot, lambda: _text(screen, "#compare-title") == f"Run {typed_out} (A) vs run {mtp} (B)")
        assert _text(screen, "#compare-changes") == (
            "settings A → B: --spec-type (not given) → draft-mtp · --spec-draft-n-max (default 3) → 2")
        assert "things differ" not in _text(screen, "#compare-note")


async def test_enter_opens_a_run_with_its_notes_in_full_and_escape_goes_back() -> None:
    with Store(default_path()) as store:
        _probe_run(store, settings_json(Settings(model=MODEL)), 30.0)
        opened = _probe_run(store, settings_json(Settings(model=MODEL, spec_type=["draft-mtp"], api_key="sk-secret")),
                            40.0, label="MTP on", warnings=[{"code": "short", "message": LONG_NOTE, "severity": "warn"}],
                            accepted=(82, 51, 12, 4))
    app = _app()
    async with app.run_test(size=(100, 30)) as pilot:
        runs = await _open_runs(pilot, app, 2)
        assert "⚠ 1" in str(runs.query_one("#runs-table", DataTable).get_row_at(0)[-1])  # the table: a count only
        for back in ("escape", "q"):
            await pilot.press("enter")
            assert await until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
            detail = app.screen
            assert _text(detail, "#run-title") == f"Run #{opened} MTP on"
            assert LONG_NOTE in _text(detail, "#run-notes").replace("\n", " ")
            command = _text(detail, "#run-command")
            assert command.startswith(f"llama-server --model {MODEL} --spec-type draft-mtp") and "sk-secret" not in command
            table = detail.query_one("#run-measurements", DataTable)
            assert [str(table.get_row_at(i)[0]) for i in range(table.row_count)][0] == "TG (generation) t/s"
            bars = _text(detail, "#run-positions")  # the share per position, and where drafting stops paying
            assert [ln.split()[-2] for ln in bars.splitlines()] == ["82", "51", "12", "4"]
            assert _text(detail, "#run-advice").replace("\n", " ").startswith(
                "positions 3-4 accept 12 % and 4 % of drafts: n-max 2 would draft 47 % fewer tokens")
            await pilot.press(back)
            assert await until(pilot, lambda: app.screen is runs)
        assert app.is_running  # q went back, it did not quit


async def test_the_fixed_preview_goes_through_the_controller() -> None:
    """The preview (snapshots, screenshots) is the controller's preview: compared at once, a run opens."""
    app = make_app(samples.fixed_options("runs"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("h")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RunsScreen) and isinstance(screen.runs, RunsPreview)
        assert _text(screen, "#compare-title") == "Run 6 (A) vs run 7 (B)"
        await pilot.press("enter")
        assert await until(pilot, lambda: isinstance(app.screen, RunDetailScreen))
        assert _text(app.screen, "#run-title").startswith("Run #7 MTP n-max 2")
