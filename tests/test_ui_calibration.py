"""The calibrated estimate in the TUI, against the real server in demo mode (the generated tiny MTP
model, a simulated 6 GB GPU played by a loopback stand-in): after the first exact result llama.cpp
measures the model in the background, the screen says "estimate (calibrated on this model)" and its
instant estimate is the planner's with that calibration attached; a cached calibration is attached
when the model is read, without a dry run; --no-exact runs none; a failure is one notification and a
new model stops the run in flight."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.test_ui_exact import CountingExact, app_with, current, demo_options, type_ctx, until
from tui.core.planning import calibrate as calibrate_mod
from tui.core.planning.cache import attach, cached_calibration
from tui.core.planning.calibrate import calibrate
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.plan import plan
from tui.ui.cockpit.planning import devices_for
from tui.ui.app import MtpTuneApp
from tui.ui.cockpit.views import CALIBRATED_LABEL, ESTIMATE_LABEL, EXACT_LABEL
from tui.ui.cockpit.settings_form import SettingsForm
from tui.ui.cockpit.vram_bars import TITLE, DeviceBar


DEADLINE_S = 60.0


class CountingCalibrate:
    """planning.calibrate.calibrate, counted (`result`: what to return instead of running; `hold`:
    wait for the cancel event first, up to the deadline)."""

    def __init__(self, result: Any = None, hold: bool = False) -> None:
        self.calls: list[Any] = []
        self.cancels: list[threading.Event] = []
        self.result, self.hold = result, hold
        self.started = threading.Event()

    def __call__(self, meta: Any, server_bin: Any, **kwargs: Any) -> Any:
        self.calls.append(str(meta.path))
        cancel = kwargs.get("cancel")
        if cancel is not None:
            self.cancels.append(cancel)
        self.started.set()
        if self.hold and cancel is not None:
            cancel.wait(DEADLINE_S)
            return "cancelled" if cancel.is_set() else "held past the deadline"
        return self.result if self.result is not None else calibrate(meta, server_bin, **kwargs)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> CountingCalibrate:
    spy = CountingCalibrate()
    monkeypatch.setattr(calibrate_mod, "calibrate", spy)
    return spy


def demo_app(server_bin: Path, model: Path, tmp_path: Path, gate: threading.Event | None = None,
             **changes: Any) -> tuple[MtpTuneApp, CountingExact]:
    """The demo app on `model` (options `changes` applied) and its counted exact mode."""
    fn = CountingExact(tmp_path / "exact", gate)
    return app_with(dataclasses.replace(demo_options(server_bin, model, tmp_path), **changes), fn), fn


def expected_plan(app: MtpTuneApp, model: Path, server_bin: Path) -> Any:
    """What the planner gives for the settings on screen, on a freshly read model with its cached
    calibration attached."""
    meta = read_gguf(model)
    cal = cached_calibration(meta, server_bin)
    assert cal is not None and cal.kind == "CPU" and cal.runs > 0
    attach(meta, cal)
    ds = devices_for(app.main.plan.snapshot, app.options, ())
    return plan(meta, app.main.plan.settings, list(ds.devices), host_total_mib=ds.host_total_mib,
                host_free_mib=ds.host_free_mib)


async def test_after_the_first_exact_result_the_estimate_is_calibrated_in_the_background(
        server_bin: Path, rpc_server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
        counted: CountingCalibrate) -> None:
    gate = threading.Event()
    gate.set()  # the first dry run goes through; later ones wait while the test looks at the estimate
    model = tiny_models["tiny-mtp"]
    app, fn = demo_app(server_bin, model, tmp_path, gate)
    async with app.run_test(size=(120, 40)) as pilot:
        seen: list[str] = []
        ctl = app.main.calibration
        progressed = ctl.progressed
        ctl.progressed = lambda m: (seen.append(m.text), progressed(m))[1]  # type: ignore[method-assign]
        try:
            est = None
            assert await until(pilot, lambda: (p := current(app)) is not None and p.exact == "exact")
            # the exact result started the calibration of this model (never the UI thread's)
            assert await until(pilot, lambda: str(model) in ctl.done and ctl.model is None)
            assert counted.calls == [str(model)]
            assert any(t.startswith("calibrating the estimate ") and "/" in t for t in seen), seen
            assert app.main.vram.border_title == TITLE  # the progress words are gone
            assert not [n for n in app._notifications if n.title == "Calibration"]
            # the exact figures stay on screen; the instant estimate behind them is now calibrated
            shown = current(app)
            assert shown is not None and shown.exact == "exact" and shown.devices[0].source == EXACT_LABEL
            est = app.main.plan.state.estimate
            assert est is not None and est.calibrated and est.seq == app.main.plan.seq
            want = expected_plan(app, model, server_bin)
            assert want.calibrated
            comp = want.device("CUDA0").components
            dev = est.devices[0]
            assert dev.source == CALIBRATED_LABEL
            assert (dev.weights_mib, dev.kv_mib, dev.compute_mib, dev.draft_compute_mib) == (
                comp["weights"], comp["kv"], comp["compute"], comp["draft_compute"])
            assert est.host is not None and est.host.compute_mib == want.device("Host").components["compute"]
            assert dev.error_band == tuple(sorted(want.error_band.items()))  # the core's band for this estimate
            # a keystroke: the instant estimate, calibrated and marked so, while llama.cpp measures again
            gate.clear()
            await type_ctx(pilot, app, "8192")
            assert await until(pilot, lambda: (p := current(app)) is not None and p.exact == "pending"
                               and app.main.plan.settings.ctx_size == 8192)
            now = current(app)
            assert now is not None and now.calibrated and now.devices[0].source == CALIBRATED_LABEL
            bar = app.query_one(DeviceBar)
            assert CALIBRATED_LABEL in bar.render().plain
            assert app.main.vram.border_subtitle == f"plan: {CALIBRATED_LABEL} · llama.cpp measuring…"
            want = expected_plan(app, model, server_bin)
            assert now.devices[0].compute_mib == want.device("CUDA0").components["compute"]
            gate.set()
            assert await until(pilot, lambda: (p := current(app)) is not None and p.exact == "exact")
            assert counted.calls == [str(model)]  # one calibration per model
        finally:
            gate.set()


async def test_a_cached_calibration_is_attached_on_load_without_a_dry_run(
        server_bin: Path, rpc_server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    model = tiny_models["tiny-mtp"]
    assert not isinstance(calibrate(read_gguf(model), server_bin), str)  # an earlier session's, cached
    spy = CountingCalibrate()
    gate = threading.Event()  # exact held: the estimate alone is on screen
    app, fn = demo_app(server_bin, model, tmp_path, gate)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(calibrate_mod, "calibrate", spy)
        async with app.run_test(size=(120, 40)) as pilot:
            try:
                assert await until(pilot, lambda: current(app) is not None and fn.started.is_set())
                est = current(app)
                assert est is not None and est.exact == "pending" and est.calibrated
                assert est.devices[0].source == CALIBRATED_LABEL
                assert app.main.vram.border_subtitle == f"plan: {CALIBRATED_LABEL} · llama.cpp measuring…"
                want = expected_plan(app, model, server_bin)
                assert est.devices[0].compute_mib == want.device("CUDA0").components["compute"]
                gate.set()
                assert await until(pilot, lambda: (p := current(app)) is not None and p.exact == "exact")
                await pilot.pause()
                assert spy.calls == [] and app.main.calibration.model is None
                assert str(model) in app.main.calibration.done
            finally:
                gate.set()


async def test_no_exact_runs_no_calibration(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
                                            counted: CountingCalibrate) -> None:
    app, fn = demo_app(server_bin, tiny_models["tiny-mtp"], tmp_path, exact=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: current(app) is not None)
        est = current(app)
        assert est is not None and est.exact == "off" and not est.calibrated
        assert est.devices[0].source == ESTIMATE_LABEL
        assert app.main.vram.border_subtitle == f"plan: {ESTIMATE_LABEL}"
        # even an exact result (none comes with --no-exact) would start nothing
        assert app.main.calibration.exact_done(app.main.plan.settings) is False
        await pilot.pause()
        assert fn.calls == [] and counted.calls == [] and app.main.calibration.model is None
        assert not [w for w in app.main.workers if w.group == "calibrate"]


async def test_a_failed_calibration_is_one_notification_and_the_estimate_stays(
        server_bin: Path, rpc_server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    spy = CountingCalibrate(result="llama.cpp measured nothing on this model.")
    monkeypatch.setattr(calibrate_mod, "calibrate", spy)
    app, _ = demo_app(server_bin, tiny_models["tiny-mtp"], tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: any("measured nothing" in n.message for n in app._notifications))
        assert len(spy.calls) == 1 and app.main.calibration.model is None
        assert app.main.vram.border_title == TITLE
        assert app.main.plan.state.estimate is not None and not app.main.plan.state.estimate.calibrated
        await type_ctx(pilot, app, "8192")
        assert await until(pilot, lambda: (p := current(app)) is not None and p.exact == "exact"
                           and app.main.plan.settings.ctx_size == 8192)
        assert len(spy.calls) == 1  # not tried again for every exact result


async def test_a_new_model_stops_the_calibration_in_flight(
        server_bin: Path, rpc_server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    spy = CountingCalibrate(hold=True)
    monkeypatch.setattr(calibrate_mod, "calibrate", spy)
    app, _ = demo_app(server_bin, tiny_models["tiny-mtp"], tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, spy.started.is_set)
        assert await until(pilot, lambda: "calibrating the estimate" in str(app.main.vram.border_title))
        form = app.query_one(SettingsForm)
        form.load(dataclasses.replace(app.main.plan.settings, model=str(tiny_models["tiny-mtp-a50"])))
        deadline = time.monotonic() + DEADLINE_S
        while not spy.cancels[0].is_set() and time.monotonic() < deadline:
            await pilot.pause(0.02)
        assert spy.cancels[0].is_set()
        # the new model is measured, and calibrated in turn
        assert await until(pilot, lambda: len(spy.calls) == 2)
        assert spy.calls[1] == str(tiny_models["tiny-mtp-a50"])
        assert str(tiny_models["tiny-mtp"]) not in app.main.calibration.done  # cancelled: tried again later
