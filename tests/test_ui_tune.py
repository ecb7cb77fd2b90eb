"""The tune screen (`T`, issue 21): the key opens its setup over the settings on screen, the setup is
checked as `mtp-tune tune` checks its flags, the table and the PP-vs-TG plot show every trial with the
best, the best MTP-off and the Pareto front marked, `x` cancels the worker; and one real tiny tune
from the screen, end to end, against the real llama-server."""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Checkbox, DataTable, Input

from tests.helpers import tune_samples
from tests.helpers import ui_samples as samples
from tests.helpers.supervisor_util import servers_of
from tui.core.gpu.profiles import parse_gpus_spec
from tui.core.options.settings import Settings
from tui.core.lab.events import LabEvent
from tui.core.tune.space import Floors
from tui.ui.lab import tune_ops as adapter
from tui.ui.lab.confirm import ConfirmStop, RestartPrompt
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.widgets.question import Question
from tui.ui.options import AppOptions
from tui.ui.lab.tune_screen import TuneScreen
from tui.ui.lab.tune_views import TuneSetup
from tui.ui.lab.charts import TuneChart

#: The form's settings of the tests that run (or fake) a tune: everything but MTP and ubatch fixed.
FORM = dict(batch_size=512, cache_type_k="f16", cache_type_v="f16", cache_type_k_draft="f16", cache_type_v_draft="f16",
            flash_attn="auto", spec_type=["draft-mtp"], spec_draft_n_max=3, parallel=1, threads=1, threads_batch=1)
#: A 2x2 space: MTP on/off x two micro-batches, the other axes left empty (the form's values, fixed).
SMALL = TuneSetup(workload="64:32", budget="", axes=(("mtp", "on,off"), ("ubatch", "128,256")), ab_passes=2,
                  save_as="ui-tuned")


async def until(pilot: Any, predicate: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return bool(predicate())


def live_options(model: Path, server_bin: Path | None, tmp_path: Path) -> AppOptions:
    """A live App on a simulated CPU-only host (what `--gpus cpu` plans against)."""
    return AppOptions(settings=Settings(model=str(model), ctx_size=1024, **FORM), server_bin=server_bin or Path("/bin/false"),
                      hardware=None, simulate=True, cursor_blink=False, server_log_dir=tmp_path / "logs", exact=False,
                      sample_interval_s=0.5, ready_timeout_s=60.0)


async def open_tune(pilot: Any, app: MtpTuneApp, setup: TuneSetup = SMALL) -> TuneScreen:
    app.lab.tune_setup = setup
    await pilot.press("T")
    assert await until(pilot, lambda: isinstance(app.screen, TuneScreen))
    screen = app.screen
    assert isinstance(screen, TuneScreen)
    assert await until(pilot, lambda: screen.prepared is not None or screen.problem is not None)
    return screen


# --------------------------------------------------------------------------- the setup, unit


def test_the_first_setup_fixes_what_the_form_sets() -> None:
    setup = adapter.default_setup(Settings(model="m.gguf", ubatch_size=1024, cache_type_k="q8_0", spec_type=["draft-mtp"]))
    assert setup.workload == "tasks" and setup.budget == "30m" and setup.kv_floor == setup.draft_kv_floor == ""
    assert dict(setup.axes) == {"mtp": "on,off", "draft-n-max": "3,1,2,4,5,6", "ubatch": "", "batch": "2048,4096",
                                "kv": "", "draft-kv": "f16,q8_0,q4_0", "flash-attn": "auto,off"}
    assert setup.fit and setup.min_ctx == ""


def test_empty_axes_keep_the_form_and_axes_with_values_release_it(tiny_models: dict[str, Path]) -> None:
    form = Settings(model=str(tiny_models["tiny-mtp"]), ctx_size=8192, ubatch_size=512, **{k: v for k, v in FORM.items()
                                                                                           if k != "batch_size"})
    setup = TuneSetup(axes=(("mtp", "on,off"), ("ubatch", "128,256"), ("kv", "f16,q8_0,q4_0")), kv_floor="q8_0")
    base, values, notes = adapter.fixed_and_values(form, setup, Floors("q8_0"))
    assert base.spec_type == [] and base.ubatch_size is None and base.cache_type_k is None  # searched
    assert base.spec_draft_n_max == 3 and base.flash_attn == "auto"  # the form's, fixed
    assert base.ctx_size is None and base.port is None  # the context is sized to the workload
    assert values == {"ubatch": (128, 256), "kv": ("f16", "q8_0"), "batch": (2048,)}  # unset in the form: pinned
    assert notes == ["main KV: q4_0 below the floor q8_0, not searched."]
    off, _, _ = adapter.fixed_and_values(replace(form, spec_type=[]), TuneSetup(axes=()), Floors())
    assert off.spec_type == ["none"] and not off.mtp_enabled  # a form without MTP keeps it off
    with pytest.raises(ValueError, match="ubatch"):
        adapter.fixed_and_values(form, TuneSetup(axes=(("ubatch", "128,lots"),)), Floors())


def test_the_check_says_what_is_searched_and_refuses_what_the_cli_refuses(tiny_models: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    opts = live_options(tiny_models["tiny-mtp"], None, tmp_path)
    ok = adapter.prepare(opts.settings, SMALL, opts)
    assert not isinstance(ok, str), ok
    assert ok.grid == 4 and ok.request.gpus == "cpu" and ok.request.budget_s is None and ok.request.ab_passes == 2
    assert ok.summary.startswith("4 configurations: MTP off,on; ubatch 128,256 · workload 64:32"), ok.summary
    refused = adapter.prepare(opts.settings, replace(SMALL, stand_ins=True), opts)  # a CPU-only host: nothing to play
    assert isinstance(refused, str) and refused.startswith("--stand-ins plays simulated GPUs"), refused
    laptop = replace(opts, hardware=parse_gpus_spec("rtx3060-laptop-6g"))
    on = adapter.prepare(opts.settings, replace(SMALL, stand_ins=True), laptop)
    assert not isinstance(on, str) and on.request.stand_ins and on.request.gpus == "rtx3060-laptop-6g", on
    nothing = adapter.prepare(Settings(), SMALL, opts)
    assert isinstance(nothing, str) and nothing.startswith("tune needs a model: a file (the form's model field FILE.gguf)")
    for setup, words in ((replace(SMALL, workload="lots"), "--workload 'lots'"), (replace(SMALL, budget="soon"), "--budget"),
                         (replace(SMALL, kv_floor="q9"), "not a KV cache type"), (replace(SMALL, min_ctx="x"), "min ctx")):
        said = adapter.prepare(opts.settings, setup, opts)
        assert isinstance(said, str) and words in said, (setup, said)


# --------------------------------------------------------------------------- the screen, fixed samples


async def test_the_key_opens_the_setup_and_a_preview_runs_nothing() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        assert "Tune for me" in [c.title for c in app.get_system_commands(app.screen)]
        await pilot.press("T")
        assert await until(pilot, lambda: isinstance(app.screen, TuneScreen))
        screen = app.screen
        assert screen.query_one("#tune-workload", Input).value == "tasks"
        assert screen.query_one("#tune-budget", Input).value == "30m"
        assert screen.query_one("#tune-kv-floor", Input).value == ""  # no floor unless asked
        assert screen.query_one("#tune-min-ctx", Input).value == "16384"  # the form's context, at least
        # MTP on and off searched; what the form sets is fixed (its value the hint); what it leaves unset searched.
        axes = [screen.query_one(f"#tune-axis-{i}", Input) for i in range(7)]
        assert [a.value for a in axes] == ["on,off", "", "", "2048,4096", "", "", ""]
        assert axes[4].placeholder == "fixed: q8_0" and axes[2].placeholder == "fixed: 512"
        assert not screen.query_one("#tune-fit", Checkbox).value  # the form fixes --fit-target 512
        axes[4].value = "f16,q8_0"
        await pilot.pause()
        await pilot.press("g")
        await pilot.pause()
        assert app.lab.running is None and any("fixed preview" in n.message for n in app._notifications)
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, TuneScreen))
        assert app.lab.tune_setup is not None and app.lab.tune_setup.axis("kv") == "f16,q8_0"  # kept for next time


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_the_table_and_the_plot_show_every_trial(size: tuple[int, int]) -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=size) as pilot:
        await tune_samples.push_tune("done")(pilot)
        screen = app.screen
        assert isinstance(screen, TuneScreen)
        table = screen.query_one("#tune-table", DataTable)
        cells = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert [c[0] for c in cells] == [str(n) for n in range(1, 9)]
        assert cells[1][9] == "BEST" and cells[0][9] == "best off" and cells[2][9] == "~best"
        assert cells[1][2] == "ub=512 dkv=q8_0 fitt=512" and cells[1][3] == "tight 5342"
        assert cells[3][4] == "skip:oom" and cells[6][4] == "dropped" and cells[7][4] == "OOM decode"
        assert cells[1][8] == "30.4 ±4%" and cells[0][8] == "33.0 ±<1%" and cells[1][7] == "78 %"
        status = str(screen.query_one("#tune-status").render())
        assert status.startswith("8 trials: 6 measured, 1 pruned, 1 failed (grid 10) · 15 launches · best #2 30.4")
        answer = str(screen.query_one("#tune-answer").render())
        assert "A/B #2 (MTP on) against #1 (MTP off), 3 passes each: MTP WINS" in answer
        assert "Break-even output length (from the A/B): MTP wins for outputs longer than" in answer
        chart = screen.query_one(TuneChart)
        pts = {p.number: p for p in chart.data}
        assert sorted(pts) == [1, 2, 3, 5, 6, 7]  # every measured configuration, nothing pruned or failed
        assert {n for n, p in pts.items() if p.front} == {3, 6, 7} and pts[2].best and pts[2].mtp and not pts[1].mtp
        table.move_cursor(row=3)
        await pilot.pause()
        assert "needs 6150 MiB of 5652 MiB free" in str(screen.query_one("#tune-note").render())


async def test_a_running_tune_shows_its_eta_and_budget_on_the_screen_and_the_main_line() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        app.lab.running, app.lab.tune_view = "tune", tune_samples.running_view()
        app.main.lab.changed()
        await pilot.pause()
        line = str(app.main.tuning_panel.render())
        assert line.startswith("◆ tune 5 trials: 4 measured, 1 pruned, 0 failed") and "ETA ~6:42" in line, line
        assert "budget left 14:43" in line and "T shows it" in line
        app.lab.running = None
        await tune_samples.push_tune("running")(pilot)
        assert "launch 7: no MTP -ub 1024" in str(app.screen.query_one("#tune-message").render())


# --------------------------------------------------------------------------- the worker, faked


class FakeRun:
    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.launches = 0

    def stop(self) -> None:
        self.cancel.set()


async def test_g_runs_the_worker_and_x_cancels_it(tiny_models: dict[str, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[FakeRun] = []

    def fake_run_tune(prepared: Any, *, store: Any, tracker: Any, started: Any) -> Any:
        run = FakeRun()
        runs.append(run)
        tracker.run = run
        started(run, run.stop)
        for rec in tune_samples.records(3):
            run.launches += 1
            tracker(LabEvent("trial", rec.number, 0, 2.0 * rec.number, 30.0, f"#{rec.number}: ok  |  the run's line",
                              trial=rec))
        run.cancel.wait(20)
        return None, replace(tracker.view, running=False, stopped="cancelled", message="tune cancelled"), None

    monkeypatch.setattr(adapter, "run_tune", fake_run_tune)
    app = make_app(live_options(tiny_models["tiny-mtp"], None, tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_tune(pilot, app)
        assert screen.prepared is not None and screen.prepared.grid == 4, screen.problem
        await pilot.press("g")
        assert await until(pilot, lambda: app.lab.running == "tune")
        table = screen.query_one("#tune-table", DataTable)
        assert await until(pilot, lambda: table.row_count == 3)
        assert app.lab.tune_view is not None and app.lab.tune_view.launches == 3
        assert "#3: ok" == str(screen.query_one("#tune-message").render())  # the run's own line cut off
        assert len(screen.query_one(TuneChart).data) == 3
        await pilot.press("g")  # one at a time
        assert any("a tune is running" in n.message for n in app._notifications)
        await pilot.press("x")
        assert await until(pilot, lambda: app.lab.finished["tune"] == 1)
        assert runs[0].cancel.is_set() and app.lab.running is None
        assert app.lab.tune_view is not None and app.lab.tune_view.stopped == "cancelled"
        assert table.row_count == 3  # what finished is kept on screen
        await pilot.press("escape", "q")
        assert await until(pilot, lambda: not app.is_running)


def test_an_hf_model_is_tuned_from_its_header_before_download(tiny_models: dict[str, Path], tmp_path: Path,
                                                             hub: Any) -> None:
    """-hf in the form: the space and the plans come from the header (over the loopback Hub; the real
    Hub is never reached), the launches keep -hf so llama-server downloads the file once."""
    hub.add_repo("org/model-GGUF", {"model-Q8_0.gguf": tiny_models["tiny-mtp"]})
    opts = live_options(tiny_models["tiny-mtp"], None, tmp_path)
    ok = adapter.prepare(replace(opts.settings, model=None, hf_repo="org/model-GGUF"), SMALL, opts)
    assert not isinstance(ok, str), ok
    assert ok.grid == 4 and ok.request.base.hf_repo == "org/model-GGUF" and ok.request.base.model is None
    assert ok.request.model is not None and ok.request.model.header == ok.request.model.path
    assert any("planned from its header" in n and "downloads model-Q8_0.gguf" in n for n in ok.notes), ok.notes
    assert not any(h.method == "GET" and not h.range for h in hub.hits("/blobs/"))  # ranges only: no download


async def test_an_hf_model_that_cannot_be_read_is_refused_before_anything_stops(tmp_path: Path, hub: Any) -> None:
    opts = AppOptions(settings=Settings(hf_repo="org/missing-GGUF", **FORM), server_bin=Path("/bin/false"), simulate=True,
                      cursor_blink=False, exact=False, server_log_dir=tmp_path / "logs")
    app = make_app(opts)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_tune(pilot, app)
        assert await until(pilot, lambda: screen.problem is not None)
        assert screen.problem is not None and "org/missing-GGUF" in screen.problem
        await pilot.press("g")  # refused on the screen's own check: nothing starts, nothing is stopped
        assert await until(pilot, lambda: any("org/missing-GGUF" in n.message for n in app._notifications))
        assert app.lab.finished["tune"] == 0 and app.lab.tune_outcome is None and app.lab.running is None
        await pilot.press("escape", "q")
        assert await until(pilot, lambda: not app.is_running)


# --------------------------------------------------------------------------- the real server


@pytest.mark.timeout(180)
async def test_a_real_tiny_tune_from_the_screen(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The main screen's server is stopped for the tune; a 2x2 space is searched, the A/B run, the best
    saved and the report written in one key each; no server is left. The GGUF header is read once, when
    the screen checks the setup: the run plans on that read."""
    import shutil

    from tui.core.planning import gguf_reader

    from tui.core.config.paths import config_dir

    model = tmp_path / "ui-tune-tiny.gguf"  # a path no other test uses, to find its servers
    shutil.copy(tiny_models["tiny-mtp"], model)
    app = make_app(live_options(model, server_bin, tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        assert await until(pilot, lambda: app.main.server.status.state == "ready", 60), app.main.server.status
        screen = await open_tune(pilot, app)
        assert screen.prepared is not None, screen.problem
        reads: list[tuple[str, str]] = []  # (path, where it was read from)
        real_read = gguf_reader.read_gguf

        def counting(path: str | Path) -> Any:
            reads.append((str(path), "".join(traceback.format_stack(limit=10))))
            return real_read(path)

        monkeypatch.setattr(gguf_reader, "read_gguf", counting)
        t0 = time.monotonic()
        await pilot.press("g")
        # The user's server runs: the tune says it will stop it, and starts only on yes.
        assert await until(pilot, lambda: isinstance(app.screen, ConfirmStop)), [n.message for n in app._notifications]
        await pilot.press("y")
        assert await until(pilot, lambda: app.lab.running == "tune" or app.lab.finished["tune"]), \
            [n.message for n in app._notifications]
        assert await until(pilot, lambda: app.lab.finished["tune"] == 1, 120), app.lab.tune_view
        wall = time.monotonic() - t0
        print(f"2x2 tune from the TUI: {wall:.1f} s")
        # Over: the offer to restart the server it stopped; keeping it stopped leaves it stopped.
        assert await until(pilot, lambda: isinstance(app.screen, RestartPrompt))
        await pilot.press("n")
        assert await until(pilot, lambda: not isinstance(app.screen, RestartPrompt))
        assert not app.main.server.status.alive  # stopped for the tune, not restarted behind it
        assert not [where for path, where in reads if path == str(model)]  # the run planned on the screen's read
        view = app.lab.tune_view
        assert view is not None and view.error is None and view.stopped == "converged", view
        assert view.grid_size == 4 and 1 <= view.trials <= 4 and view.best is not None and view.best_off is not None
        assert {r.mtp for r in view.rows} == {False, True} and all("ub=" in r.differs for r in view.rows)
        assert any(r.mark == "BEST" for r in view.rows) and view.points
        assert view.ab.startswith("A/B #") and view.break_even.startswith("Break-even output length")
        table = screen.query_one("#tune-table", DataTable)
        assert table.row_count == view.trials and screen.query_one(TuneChart).data == view.points
        await pilot.press("b")
        profile = config_dir() / "profiles" / "ui-tuned.toml"
        assert await until(pilot, lambda: profile.is_file()), [n.message for n in app._notifications]
        assert "[ui-tuned]" in (config_dir() / "presets.ini").read_text()
        await pilot.press("r")
        report = adapter.report_path(app.lab.tune_outcome)
        assert await until(pilot, lambda: report.is_file()), [n.message for n in app._notifications]
        assert "## Trials" in report.read_text() and "Interleaved A/B" in report.read_text()
        assert servers_of(model) == []  # no orphan

        # Another workload (another tune), cancelled while its first candidate generates: the server stops.
        screen.query_one("#tune-workload", Input).value = "64:4000"
        assert await until(pilot, lambda: screen.setup.workload == "64:4000" and screen.prepared is not None)
        await pilot.press("g")
        assert await until(pilot, lambda: bool(servers_of(model)) or app.lab.finished["tune"] == 2, 60)
        await pilot.press("x")
        assert await until(pilot, lambda: app.lab.finished["tune"] == 2, 30), app.lab.tune_view
        assert app.lab.tune_view is not None and app.lab.tune_view.stopped == "cancelled", app.lab.tune_view
        assert servers_of(model) == []
        await pilot.press("escape", "q")
        assert await until(pilot, lambda: not app.is_running)
    assert servers_of(model) == []


async def test_quitting_the_app_mid_tune_leaves_no_server(server_bin: Path, tiny_models: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """q while a tune's candidate generates (the tune screen left open behind the main screen): the
    app quits, the tune is cancelled and its server stopped; nothing outlives the app."""
    import shutil

    model = tmp_path / "ui-tune-quit-tiny.gguf"
    shutil.copy(tiny_models["tiny-mtp"], model)
    app = make_app(live_options(model, server_bin, tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_tune(pilot, app, replace(SMALL, workload="64:4000"))
        assert screen.prepared is not None, screen.problem
        await pilot.press("g")
        assert await until(pilot, lambda: bool(servers_of(model)) or app.lab.finished["tune"] == 1, 60)
        assert servers_of(model), app.lab.tune_view
        await pilot.press("escape")
        assert await until(pilot, lambda: not isinstance(app.screen, TuneScreen))
        assert app.lab.running == "tune"  # still running behind the main screen
        await pilot.press("q")  # a run in flight: quitting asks first, naming what is lost
        assert await until(pilot, lambda: isinstance(app.screen, Question))
        assert "resumes it" in app.screen.text
        await pilot.press("y")
        assert await until(pilot, lambda: not app.is_running, 60)
    assert servers_of(model) == []
