"""Probes from the UI against a real llama-server: progress, the live plot's series (MTP on and off
side by side), results with spread, the verdict; then the runs view compares and exports them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Select

from tui.core.gpu.profiles import PROFILES
from tui.core.config.paths import config_dir
from tui.core.options.settings import Settings
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.options import AppOptions
from tui.ui.runs.screen import RunsScreen
from tui.ui.widgets.probe_plot import ProbePlot


SUITE = """\
name = "ui-test"
[[prompts]]
name = "count"
prompt = "Count from one to twenty in words."
[[prompts]]
name = "capital"
prompt = "What is the capital of France? Answer in one sentence."
"""


async def until(pilot, predicate, timeout: float = 90.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await pilot.pause(0.05)
    return bool(predicate())


async def run_suite(pilot, app: MtpTuneApp) -> None:  # noqa: ANN001
    done = app.main.probes.runs_finished
    await pilot.press("p")
    assert await until(pilot, lambda: app.main.probes.runs_finished > done), [n.message for n in app._notifications]
    assert not app.main.probes.state.running


async def test_probe_mtp_on_and_off(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    suites = config_dir() / "suites"
    suites.mkdir(parents=True)
    (suites / "ui-test.toml").write_text(SUITE)
    settings = Settings(model=str(tiny_models["tiny-mtp"]), ctx_size=1024, parallel=1, threads=1, threads_batch=1,
                        spec_type=["draft-mtp"], spec_draft_n_max=3)
    options = AppOptions(settings=settings, server_bin=server_bin, hardware=PROFILES["rtx3060-laptop-6g"],
                         simulate=True, cursor_blink=False, server_log_dir=tmp_path / "logs",
                         probe_repeat=2, probe_n_predict=24, sample_interval_s=0.5)
    app = make_app(options)
    async with app.run_test(size=(120, 40)) as pilot:
        app.query_one("#probe-suite", Select).value = str(suites / "ui-test.toml")
        await pilot.press("l")
        assert await until(pilot, lambda: app.main.server.status.state == "ready"), app.main.server.status
        await run_suite(pilot, app)
        on = app.main.probes.state
        assert [s.config for s in on.summaries] == ["MTP n3 c1024"]
        first = on.summaries[0]
        assert first.n == 4 and first.tg_median and first.tg_median > 0
        assert first.acceptance == pytest.approx(1.0)  # the tiny model's draft always agrees
        # By draft position, live beside the plots: every draft's first token accepted (the last positions
        # of a request's final drafts are cut by its end, so later shares may fall a little short of 1).
        assert len(first.positions) == 3 and first.positions[0] == pytest.approx(1.0) and min(first.positions) > 0.8
        assert app.query_one("#probe-positions").display and first.advice and "assumed" in first.advice
        assert first.tg_min is not None and first.tg_min <= first.tg_median <= first.tg_max
        assert len(on.points) == 4
        # Reconciled memory appeared once the launch was ready.
        assert app.main.server.status.reconcile and "predicted→reported" in str(app.query_one("#server-reconcile").render())

        # MTP off: clear spec-type, restart, run again: two series side by side, and a verdict.
        field = app.query_one("#f-spec_type", Input)
        field.focus()
        await pilot.press("end", *["backspace"] * len(field.value), "escape", "r")
        assert await until(pilot, lambda: app.main.server.status.state == "ready" and app.backend.running_settings is not None
                           and not app.backend.running_settings.mtp_enabled)
        await run_suite(pilot, app)
        configs = [s.config for s in app.main.probes.state.summaries]
        assert configs == ["MTP n3 c1024", "no MTP c1024"]
        mtp_row = app.main.probes.state.summaries[0]  # its draft cost now measured against the MTP-off run
        assert mtp_row.positions == first.positions and "measured against MTP off" in mtp_row.advice
        assert {p.config for p in app.main.probes.state.points} == set(configs)
        off = app.main.probes.state.summaries[1]
        assert off.acceptance is None
        assert "no MTP" in app.main.probes.state.verdict or "MTP" in app.main.probes.state.verdict
        plot = app.query_one("#plot-tg", ProbePlot)
        assert plot.data == app.main.probes.state.points
        table = app.query_one("#probe-results", DataTable)
        assert table.row_count == 2

        # The runs view: both runs stored; compare them; export the pair.
        await pilot.press("h")
        assert await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen._rows)
        screen = app.screen
        assert len(screen._rows) == 2
        await pilot.press("space", "down", "space", "c")
        assert await until(pilot, lambda: screen.query_one("#compare-table", DataTable).row_count > 0)
        metrics = [str(screen.query_one("#compare-table", DataTable).get_row_at(i)[0])
                   for i in range(screen.query_one("#compare-table", DataTable).row_count)]
        assert any(m.startswith("TG") for m in metrics)
        await pilot.press("e")
        assert await until(pilot, lambda: "exported to" in str(screen.query_one("#runs-status").render()))
        path = Path(str(screen.query_one("#runs-status").render()).split("exported to ", 1)[1].strip())
        assert path.suffix == ".md" and "| run |" in path.read_text().lower().replace("run ", "run ")
        await pilot.press("escape", "q")
        assert await until(pilot, lambda: not app.is_running, timeout=30)
