"""The plan panel's quality line and the quality-vs-memory view (fast tier: the tiny model, a simulated
GPU, the measurement stubbed at the quality controller's seam). The line says what the K/V types on
screen cost when the index knows it, "reference" for f16/f16, "not measured — press d" otherwise; `d`
measures in the background (progress on the line), `d` again or Escape cancels, a failure is one line.
The view puts the planner's KV memory per type beside the measured KLD, and says "not measured"."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.test_quality_index import FIGURES, measured
from tui.core.options.settings import Settings
from tui.core.quality import index
from tui.core.quality.request import KvPair
from tui.core.server import provision
from tui.ui.app import MtpTuneApp, in_flight, make_app
from tui.ui.cockpit.measuring import CANCELLED
from tui.ui.cockpit.quality_screen import QualityMemoryScreen, cells
from tui.ui.cockpit.vram_bars import VramBars
from tui.ui.lab.verdict_screen import VerdictScreen
from tui.ui.options import AppOptions
from tests.test_ui_exact import until
from tests.test_ui_plan import TINY_GPU, settle

DEADLINE_S = 30.0


class StubMeasure:
    """The controller's measurement, stubbed: says one progress line, then waits for `release` (or
    the cancel) and returns `result` (a callable gets the K/V)."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.release = threading.Event()
        self.calls: list[tuple[KvPair, list[str]]] = []
        self.cancelled = threading.Event()

    def __call__(self, settings: Settings, kv: KvPair, server_bin: Any, cancel: threading.Event,
                 progress: Callable[[str], None]) -> Any:
        self.calls.append((kv, [settings.model or "", str(settings.ctx_size)]))
        progress(f"{kv.label}: chunk 1/2")
        deadline = time.monotonic() + DEADLINE_S
        while not (self.release.is_set() or cancel.is_set()) and time.monotonic() < deadline:
            cancel.wait(0.02)
        if cancel.is_set():
            self.cancelled.set()
            return CANCELLED
        return self.result(kv) if callable(self.result) else self.result


def app_for(model: Path, kv: str | None) -> MtpTuneApp:
    settings = Settings(model=str(model), ctx_size=512, parallel=1, fit=False, fit_target=[8],
                        cache_type_k=kv, cache_type_v=kv)
    return make_app(AppOptions(settings=settings, hardware=TINY_GPU, simulate=True, cursor_blink=False,
                               sample_interval_s=60.0))


def line(app: MtpTuneApp) -> str:
    widget = app.query_one(VramBars).query_one("#quality-line")
    return str(widget.render()) if widget.display else ""


async def started(pilot, app: MtpTuneApp) -> None:  # noqa: ANN001 - Pilot
    """The plan and the lookup answered, the focus out of the form (so `d` is the key, not a letter)."""
    await settle(pilot, app)
    assert await until(pilot, lambda: line(app) != "")
    app.main.set_focus(None)
    await pilot.pause()


async def test_reference_and_measured_from_the_index_without_running(tiny_models: dict[str, Path]) -> None:
    model = tiny_models["tiny-mtp"]
    index.record(measured(model, "q8_0"))
    stub = StubMeasure([])
    app = app_for(model, None)
    async with app.run_test(size=(120, 40)) as pilot:
        app.main.quality.measure_fn = stub
        await started(pilot, app)
        assert line(app).startswith("quality f16/f16: reference")
        await pilot.press("d")  # the reference is 0 by definition: nothing runs
        await pilot.pause()
        assert stub.calls == [] and any("reference" in n.message for n in app._notifications)
        app.main.form.load(dataclasses.replace(app.main.plan.settings, cache_type_k="q8_0", cache_type_v="q8_0"))
        assert await until(pilot, lambda: "q8_0/q8_0" in line(app))
        assert line(app) == f"quality q8_0/q8_0: KLD 0.0081, same top {FIGURES.same_top_pct.value:.1f} % (measured, -c {FIGURES.ctx})"
        assert stub.calls == []


async def test_d_measures_in_the_background_and_the_line_follows(tiny_models: dict[str, Path]) -> None:
    model = tiny_models["tiny-mtp"]
    stub = StubMeasure(lambda kv: [measured(model, kv.label, 0.0123)])
    app = app_for(model, "q4_0")
    async with app.run_test(size=(120, 40)) as pilot:
        app.main.quality.measure_fn = stub
        await started(pilot, app)
        assert line(app) == "quality q4_0/q4_0: not measured — press d"
        await pilot.press("d")
        assert await until(pilot, lambda: "chunk 1/2" in line(app))
        assert line(app) == "quality q4_0/q4_0: measuring: chunk 1/2 (d or Esc cancels)"
        assert stub.calls == [(KvPair("q4_0", "q4_0"), [str(model), "512"])]  # the form's flags
        assert any("quality measurement of q4_0 is stopped" in s for s in in_flight(app))  # quitting would ask
        stub.release.set()
        assert await until(pilot, lambda: "KLD" in line(app))
        assert line(app).startswith("quality q4_0/q4_0: KLD 0.0123, same top")
        assert app.main.quality.running is None


@pytest.mark.parametrize("key", ["escape", "d"])
async def test_the_same_key_or_escape_cancels(tiny_models: dict[str, Path], key: str) -> None:
    model = tiny_models["tiny-mtp"]
    stub = StubMeasure([measured(model, "q4_0")])
    app = app_for(model, "q4_0")
    async with app.run_test(size=(120, 40)) as pilot:
        app.main.quality.measure_fn = stub
        await started(pilot, app)
        await pilot.press("d")
        assert await until(pilot, lambda: "chunk" in line(app))
        await pilot.press(key)
        assert await until(pilot, lambda: "cancelled" in line(app))
        assert line(app) == "quality q4_0/q4_0: not measured (cancelled) — press d"
        assert stub.cancelled.wait(DEADLINE_S)  # the pass was told to stop
        await pilot.pause()
        assert line(app) == "quality q4_0/q4_0: not measured (cancelled) — press d"  # its late answer is ignored


async def test_the_real_measurement_without_a_binary_says_so(tiny_models: dict[str, Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The seam's default, not stubbed: no llama-perplexity anywhere is one sentence, never a traceback."""
    monkeypatch.setattr(provision, "find_perplexity", lambda *a, **k: None)
    app = app_for(tiny_models["tiny-mtp"], "q8_0")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await pilot.press("d")
        assert await until(pilot, lambda: "no llama-perplexity" in line(app))
        said = line(app)
        assert said.startswith("quality q8_0/q8_0: not measured (no llama-perplexity beside llama-server")
        assert said.endswith("as does the first `mtp-tune quality`) — press d") and "\n" not in said


async def test_quality_vs_memory_puts_the_planned_kv_beside_the_measured_kld(tiny_models: dict[str, Path]) -> None:
    model = tiny_models["tiny-mtp"]
    index.record(measured(model, "q8_0", 0.002))
    index.record(measured(model, "q8_0/q4_0", 0.02))
    app = app_for(model, "q8_0")
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await pilot.press("D")
        assert await until(pilot, lambda: isinstance(app.screen, QualityMemoryScreen) and bool(app.screen.view)
                           and bool(app.screen.view.rows))
        view = app.screen.view
        assert view is not None and not view.error and "at -c 512" in view.title
        rows = {r.kv.label: r for r in view.rows}
        assert {"f16", "q8_0", "q4_0", "q8_0/q4_0"} <= set(rows)
        panel = app.main.plan.view
        assert panel is not None
        shown_kv = sum(d.kv_mib for d in (*panel.devices, *((panel.host,) if panel.host else ())))
        assert rows["q8_0"].current and rows["q8_0"].kv_mib == pytest.approx(shown_kv)  # the plan panel's figure
        assert rows["f16"].said == "reference" and rows["f16"].kld == 0 and rows["f16"].saving_mib == 0
        assert rows["q8_0"].kld == 0.002 and rows["q8_0"].saving_mib > 0 and rows["q8_0"].said.startswith("measured")
        assert rows["q4_0"].kld is None and rows["q4_0"].said == "not measured"
        assert cells(rows["q4_0"])[3:5] == ["—", "—"]
        assert rows["q8_0/q4_0"].kv_mib < rows["q8_0"].kv_mib  # a smaller V saves more
        assert [r.kv_mib for r in view.rows] == sorted((r.kv_mib for r in view.rows), reverse=True)
        await pilot.press("escape")
        assert await until(pilot, lambda: app.screen is app.main)


@pytest.mark.parametrize(("kv", "said"), [("q8_0", "q8_0/q8_0: KLD 0.0081"), ("q4_0", "q4_0/q4_0: not measured")])
async def test_the_mtp_verdict_says_what_its_kv_costs(tiny_models: dict[str, Path], kv: str, said: str) -> None:
    model = tiny_models["tiny-mtp"]
    index.record(measured(model, "q8_0"))
    app = app_for(model, kv)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await pilot.press("a")
        assert await until(pilot, lambda: any(isinstance(s, VerdictScreen) for s in app.screen_stack))
        screen = next(s for s in app.screen_stack if isinstance(s, VerdictScreen))
        shown = screen.query_one("#verdict-quality")
        assert shown.display and str(shown.render()).startswith(
            f"quality of the main K/V, the same with MTP on and off: {said}")


async def test_d_measures_with_the_real_llama_perplexity(server_bin: Path, tiny_models: dict[str, Path]) -> None:
    """Not stubbed: the llama-perplexity beside the test server, the tiny model at the form's -c 256; the
    line then says llama-perplexity's own figures, as the index recorded them."""
    model = tiny_models["tiny-mtp"]
    settings = Settings(model=str(model), ctx_size=256, threads=2, parallel=1, fit=False, fit_target=[8],
                        cache_type_k="q8_0", cache_type_v="q4_0")
    app = make_app(AppOptions(settings=settings, server_bin=server_bin, hardware=TINY_GPU, simulate=True,
                              exact=False, cursor_blink=False, sample_interval_s=60.0))
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        assert line(app) == "quality q8_0/q4_0: not measured — press d"
        await pilot.press("d")
        assert await until(pilot, lambda: app.main.quality.running is None and "measuring" not in line(app))
        found = index.measured_on(model) or []
        assert [m.kv for m in found] == [KvPair("q8_0", "q4_0")] and found[0].ctx == 256
        assert line(app) == f"quality q8_0/q4_0: {index.figures_text(found[0])} (measured, -c 256)"
