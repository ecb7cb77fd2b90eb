"""Exact mode in the TUI, against the real server in demo mode (the generated tiny MTP model, the
simulated 6 GB GPU played by a loopback ggml-rpc-server stand-in): the instant estimate first, then
llama.cpp's figures marked per device; one dry run for a burst of keys; a stale answer never shown;
an exact run that cannot be made says why in one sentence."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input

from tui.core.gpu.profiles import PROFILES, HwProfile, SimDevice
from tui.core.planning.exact import exact_plan
from tui.ui.cockpit.planning import exact_request
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.cockpit.backend import Backend
from tui.cli._app_options import demo_settings
from tui.ui.cockpit.messages import ExactPlanned
from tui.ui.options import AppOptions
from tui.ui.cockpit.views import ESTIMATE_LABEL, EXACT_LABEL, PlanView
from tui.ui.cockpit.vram_bars import DeviceBar


DEADLINE_S = 60.0


class CountingExact:
    """exact_plan with its own cache root, counting the dry runs the App asks for; `gate` (when set)
    holds each run until the test releases it."""

    def __init__(self, root: Path, gate: threading.Event | None = None) -> None:
        self.root = root
        self.gate = gate
        self.calls: list[Any] = []
        self.started = threading.Event()

    def __call__(self, settings: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(settings)
        self.started.set()
        if self.gate is not None:
            self.gate.wait(DEADLINE_S)
        return exact_plan(settings, *args, root=self.root, **kwargs)


def demo_options(server_bin: Path, model: Path, tmp_path: Path, *, debounce_s: float = 0.05,
                 hardware: HwProfile = PROFILES["rtx3060-laptop-6g"]) -> AppOptions:
    return AppOptions(settings=demo_settings(model), server_bin=server_bin, hardware=hardware, simulate=True,
                      demo=True, cursor_blink=False, server_log_dir=tmp_path / "logs", sample_interval_s=60.0,
                      exact_debounce_s=debounce_s)


def app_with(options: AppOptions, fn: CountingExact) -> MtpTuneApp:
    return make_app(options, Backend(options, exact_fn=fn))


async def until(pilot, cond: Callable[[], bool]) -> bool:  # noqa: ANN001 - Pilot
    deadline = time.monotonic() + DEADLINE_S
    while not cond() and time.monotonic() < deadline:
        await pilot.pause(0.02)
    await pilot.pause()
    return cond()


def current(app: MtpTuneApp) -> PlanView | None:
    """The plan on screen when it is for the newest settings."""
    return app.main.plan.view if app.main.plan.view is not None and app.main.plan.view.seq == app.main.plan.seq else None


async def type_ctx(pilot, app: MtpTuneApp, value: str) -> None:  # noqa: ANN001 - Pilot
    field = app.query_one("#f-ctx_size", Input)
    field.focus()
    await pilot.press("end", *["backspace"] * len(field.value), *value)


async def test_estimate_first_then_exact_marked_per_device(server_bin: Path, rpc_server_bin: Path,
                                                           tiny_models: dict[str, Path], tmp_path: Path) -> None:
    gate = threading.Event()
    fn = CountingExact(tmp_path / "exact", gate)
    app = app_with(demo_options(server_bin, tiny_models["tiny-mtp"], tmp_path), fn)
    async with app.run_test(size=(120, 40)) as pilot:
        # the dry run is held: the estimate is on screen, marked as such, exact pending
        assert await until(pilot, lambda: current(app) is not None and fn.started.is_set())
        est = current(app)
        assert est is not None and est.exact == "pending" and est.error is None
        bar = app.query_one(DeviceBar)
        assert bar.plan == est.devices[0] and bar.plan.source == ESTIMATE_LABEL
        assert ESTIMATE_LABEL in bar.render().plain and EXACT_LABEL not in bar.render().plain
        assert "llama.cpp measuring" in str(app.main.vram.border_subtitle)
        gate.set()
        assert await until(pilot, lambda: (p := current(app)) is not None and p.exact == "exact")
        plan = current(app)
        assert plan is not None and app.main.vram.border_subtitle == f"plan: {EXACT_LABEL}"
        dev = plan.devices[0]
        assert dev.source == EXACT_LABEL and bar.plan == dev and EXACT_LABEL in bar.render().plain
        assert plan.host is not None and plan.host.source == EXACT_LABEL
        # the figures are llama.cpp's: the same dry run made directly gives the same numbers
        args, kwargs = exact_request(app.main.plan.settings, app.main.plan.snapshot, app.options)
        res = exact_plan(*args, root=tmp_path / "direct", **kwargs)
        want = res.plan.device("CUDA0").components  # type: ignore[union-attr]
        assert (dev.weights_mib, dev.kv_mib, dev.compute_mib, dev.draft_compute_mib) == (
            want["weights"], want["kv"], want["compute"], want["draft_compute"])
        assert any("stand-ins" in w for w in plan.warnings)  # compute is the CPU backend's: said on screen
        assert "stand-ins" in str(app.query_one("#plan-notes").render())
        assert len(fn.calls) == 1


async def test_a_burst_of_keys_starts_one_dry_run_and_stale_answers_are_dropped(
        server_bin: Path, rpc_server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    fn = CountingExact(tmp_path / "exact")
    # a debounce far longer than a key press takes: the burst is one request for the runner
    app = app_with(demo_options(server_bin, tiny_models["tiny-mtp"], tmp_path, debounce_s=2.0), fn)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: (p := current(app)) is not None and p.exact == "exact")
        first = current(app)
        assert first is not None and len(fn.calls) == 1
        old_rid = app.main.plan.state.exact_rid
        await type_ctx(pilot, app, "16384")  # 5 backspaces + 5 digits: ten re-plans
        assert await until(pilot, lambda: (p := current(app)) is not None and p.exact == "exact"
                           and app.main.plan.settings.ctx_size == 16384)
        assert len(fn.calls) == 2, [s.ctx_size for s in fn.calls]
        assert fn.calls[-1].ctx_size == 16384
        newest = current(app)
        assert newest is not None and newest.devices[0].kv_mib > first.devices[0].kv_mib
        # an answer for older settings arriving now is ignored: the newer figures stay
        app.main.post_message(ExactPlanned(old_rid or 0, dataclasses.replace(first, seq=0)))
        await pilot.pause(0.05)
        assert app.main.plan.view is newest
        # while the next estimate is pending, a late exact answer for the previous settings is not shown
        await type_ctx(pilot, app, "4096")
        assert await until(pilot, lambda: current(app) is not None and app.main.plan.settings.ctx_size == 4096)
        shown = current(app)
        assert shown is not None and shown.devices[0].kv_mib < newest.devices[0].kv_mib
        app.main.post_message(ExactPlanned(old_rid or 0, newest))
        await pilot.pause(0.05)
        assert current(app) is not None and current(app).devices[0].kv_mib == shown.devices[0].kv_mib  # type: ignore[union-attr]


async def test_exact_unavailable_says_why_and_keeps_the_estimate(server_bin: Path, rpc_server_bin: Path,
                                                                 tiny_models: dict[str, Path], tmp_path: Path) -> None:
    # a simulated GPU larger than this machine's RAM: no loopback stand-in can play it
    huge = HwProfile("huge", "a simulated 64 TiB card", (SimDevice("Huge GPU", 64 * 1024 * 1024),))
    fn = CountingExact(tmp_path / "exact")
    app = app_with(demo_options(server_bin, tiny_models["tiny-mtp"], tmp_path, hardware=huge), fn)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: (p := current(app)) is not None and p.exact == "unavailable")
        plan = current(app)
        assert plan is not None and plan.error is None and plan.devices[0].source == ESTIMATE_LABEL
        assert "more than this machine's" in plan.exact_reason and plan.exact_reason.count(". ") <= 1
        notes = str(app.query_one("#plan-notes").render())
        assert "exact unavailable: " in notes and "more than this machine's" in notes
        assert "exact unavailable" in str(app.main.vram.border_subtitle)


async def test_no_server_binary_is_one_sentence(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    options = dataclasses.replace(demo_options(Path("/nonexistent"), tiny_models["tiny-mtp"], tmp_path), server_bin=None)
    app = make_app(options)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: (p := current(app)) is not None and p.exact == "unavailable")
        notes = str(app.query_one("#plan-notes").render())
        assert "exact unavailable: no llama-server found" in notes
        assert app.main.plan.view is not None and app.main.plan.view.devices[0].source == ESTIMATE_LABEL


def test_on_real_gpus_exact_waits_while_our_server_runs(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """A dry run beside the running server would see the memory it holds: one sentence instead, and
    the reconciliation uses the exact plan measured before the launch."""
    from tests.test_ui_reconcile import _gpu_snapshot
    from tui.ui.cockpit.planning import ExactPlans
    from tui.ui.cockpit.reconciling import exact_for_report

    options = AppOptions(settings=demo_settings(tiny_models["tiny-mtp"]), server_bin=Path("/usr/bin/true"))
    plans = ExactPlans(options, plan_fn=lambda *a, **k: None)
    try:
        rid, why = plans.request(options.settings, _gpu_snapshot(5210), server_alive=True)
        assert rid is None and "llama-server is running on these GPUs" in why
        rid, why = plans.request(options.settings, _gpu_snapshot(0), server_alive=False)
        assert rid is not None and why == ""
    finally:
        plans.close()
    gpu_report = {"devices": {"CUDA0": {"weights": 10.0}, "Host": {"weights": 1.0}}}
    exact, why = exact_for_report(options.settings, gpu_report, _gpu_snapshot(5210), options)
    assert exact is None and "not measured for these settings before the launch" in why

    class Last:
        available, plan = True, object()

    assert exact_for_report(options.settings, gpu_report, _gpu_snapshot(5210), options, last=Last()) == (Last.plan, "")


def test_plan_state_shows_only_the_newest_settings_answers() -> None:
    from tui.ui.cockpit.plan_state import PlanState
    from tui.ui.cockpit.views import DevicePlan

    def view(seq: int, kv: float, exact: str = "off") -> PlanView:
        src = EXACT_LABEL if exact == "exact" else ESTIMATE_LABEL
        return PlanView(devices=(DevicePlan("GPU", 6144, 5800, kv_mib=kv, source=src),), seq=seq, exact=exact)

    st = PlanState()
    one = st.next_seq()
    st.exact_asked("A", 1, "")
    two = st.next_seq()
    assert st.wants_exact("B") and not st.wants_exact("A", keep=True)
    st.exact_asked("B", 2, "")
    assert st.take_estimate(view(one, 1.0)) == (None, False)  # an older estimate: dropped
    assert st.take_exact(1, view(0, 1.5, "exact")) is None  # an older exact answer: dropped
    # the exact answer may come before the estimate: it waits for it, then wins
    assert st.take_exact(2, view(0, 2.5, "exact")) is None
    shown, cancel = st.take_estimate(view(two, 2.0))
    assert not cancel and shown is not None and shown.exact == "exact" and shown.devices[0].kv_mib == 2.5
    assert shown.seq == two
    three = st.next_seq()
    st.exact_asked("C", 3, "")
    shown, _ = st.take_estimate(view(three, 3.0))
    assert shown is not None and shown.exact == "pending" and shown.devices[0].source == ESTIMATE_LABEL
    # an estimate that failed cancels the exact request (nothing to make exact)
    four = st.next_seq()
    st.exact_asked("D", 4, "")
    shown, cancel = st.take_estimate(PlanView(error="no such file", seq=four))
    assert cancel and shown is not None and shown.error and st.exact_rid is None


def test_a_keystroke_that_makes_the_settings_invalid_restarts_the_debounce(tiny_models: dict[str, Path]) -> None:
    from tui.ui.cockpit.planning import ExactPlans

    calls: list[Any] = []
    got: list[int] = []
    done = threading.Event()

    def fake(settings: Any, *args: Any, cancel: threading.Event, **kwargs: Any) -> Any:
        from tui.core.planning.exact import ExactResult

        calls.append(settings)
        return ExactResult("unavailable", "a fake dry run")

    options = AppOptions(settings=demo_settings(tiny_models["tiny-mtp"]), server_bin=Path("/usr/bin/true"),
                         exact_debounce_s=0.3)
    plans = ExactPlans(options, plan_fn=fake)
    plans.on_view(lambda rid, view: (got.append(rid), done.set()))
    try:
        assert plans.touch() is None  # nothing asked yet
        first, _ = plans.request(options.settings, None)
        again = plans.touch()
        assert first is not None and again is not None and again > first
        assert done.wait(DEADLINE_S)
    finally:
        plans.close()
    assert got == [again] and len(calls) == 1


def test_a_device_llama_cpp_did_not_measure_stays_an_estimate_and_says_why() -> None:
    from tui.core.planning.exact import ExactResult
    from tui.core.planning.measured import DeviceSource
    from tui.ui.cockpit.planning import exact_view

    class FakePlan:  # the parts of a core Plan exact_view reads
        def __init__(self) -> None:
            from types import SimpleNamespace as NS

            comps = dict(weights=1.0, kv=2.0, draft_kv=0.5, recurrent=0.0, compute=3.0, draft_compute=1.0, output=0.0)
            dev = lambda key: NS(key=key, name=key, components=dict(comps), total_mib=6144.0, free_mib=6000.0,  # noqa: E731
                                 needed_mib=7.5, margin_mib=1024.0, headroom_mib=5992.5, risk="ok")
            self.devices = [dev("CUDA0"), dev("CUDA1"), dev("Host")]
            self.warnings: list[str] = []
            self.fit = NS(active=False, action="none", message="")

    sources = {"CUDA0": DeviceSource("CUDA0", True), "Host": DeviceSource("Host", True),
               "CUDA1": DeviceSource("CUDA1", False, "llama.cpp used 1 offload devices where the plan has 2")}
    view = exact_view(ExactResult("exact", "", FakePlan(), None, sources))  # type: ignore[arg-type]
    assert view is not None and view.exact == "exact"
    assert [d.source for d in view.devices] == [EXACT_LABEL, ESTIMATE_LABEL]
    assert "CUDA1: estimate, llama.cpp used 1 offload devices where the plan has 2" in view.warnings


async def test_exact_mode_off_shows_the_estimate_alone(server_bin: Path, tiny_models: dict[str, Path],
                                                       tmp_path: Path) -> None:
    """`mtp-tune --no-exact`: no dry runs at all, the estimate marked as such."""
    fn = CountingExact(tmp_path / "exact")
    options = dataclasses.replace(demo_options(server_bin, tiny_models["tiny-mtp"], tmp_path), exact=False)
    app = app_with(options, fn)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: current(app) is not None)
        await type_ctx(pilot, app, "4096")
        assert await until(pilot, lambda: (p := current(app)) is not None and app.main.plan.settings.ctx_size == 4096)
        plan = current(app)
        assert plan is not None and plan.exact == "off" and plan.devices[0].source == ESTIMATE_LABEL
        assert app.main.vram.border_subtitle == f"plan: {ESTIMATE_LABEL}" and fn.calls == []


async def test_two_simulated_gpus_each_marked_exact(server_bin: Path, rpc_server_bin: Path,
                                                    tiny_models: dict[str, Path], tmp_path: Path) -> None:
    """Two simulated GPUs: two loopback stand-ins, and each bar says its figures are llama.cpp's."""
    from tui.core.gpu.profiles import parse_gpus_spec

    hardware = parse_gpus_spec("2x8GiB")
    assert hardware is not None
    fn = CountingExact(tmp_path / "exact")
    app = app_with(demo_options(server_bin, tiny_models["tiny-moe-mtp"], tmp_path, hardware=hardware), fn)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: (p := current(app)) is not None and p.exact in ("exact", "unavailable"))
        plan = current(app)
        assert plan is not None and plan.exact == "exact", plan.exact_reason
        assert [d.source for d in plan.devices] == [EXACT_LABEL, EXACT_LABEL]
        bars = list(app.query(DeviceBar))
        assert len(bars) == 2 and all(f"plan: {EXACT_LABEL}" in b.render().plain for b in bars)
        assert all(d.weights_mib > 0 and d.kv_mib > 0 for d in plan.devices)  # the layers are split over both
        assert len(fn.calls) == 1


async def test_the_estimates_error_band_stands_beside_its_figures_and_exact_has_none() -> None:
    from tests.helpers import ui_samples as samples
    from tui.ui.cockpit.views import DevicePlan

    est = DevicePlan("GPU", 6144, 5800, compute_mib=500, draft_compute_mib=100, kv_mib=64,
                     error_band=(("compute", 4.0), ("draft_compute", 9.2), ("kv", 0.2)))
    # the compute segment holds both buffers: their bands weighted by size, (500 * 4 + 100 * 9.2) / 600
    assert est.band_pct("compute") == pytest.approx(4.8667, abs=1e-3)
    assert est.band_pct("kv") == 0.2 and est.band_pct("weights") is None
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        bar = app.query_one(DeviceBar)
        bar.plan = est
        await pilot.pause()
        legend = bar._legend().plain
        assert "compute 600 MiB ±5 %" in legend and "KV 64 MiB  " in legend  # under 1 %: not worth a mark
        bar.plan = dataclasses.replace(est, source=EXACT_LABEL, error_band=())
        assert "±" not in bar._legend().plain


def test_the_estimate_view_carries_the_cores_measured_band(tiny_models: dict[str, Path],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import tui.core.planning.result as result
    from tui.ui.cockpit.planning import plan_view

    monkeypatch.setattr(result, "error_band", lambda calibrated=False: {"compute": 7.0, "kv": 0.1})
    options = AppOptions(settings=demo_settings(tiny_models["tiny-mtp"]), hardware=PROFILES["rtx3060-laptop-6g"],
                         simulate=True)
    view = plan_view(options.settings, None, options, 1)
    assert view.error is None and view.devices[0].error_band == (("compute", 7.0), ("kv", 0.1))
    assert view.devices[0].band_pct("compute") == pytest.approx(7.0)  # no band for draft compute: compute's alone


def test_the_cpu_measured_band_is_not_shown_on_a_real_gpu(tiny_models: dict[str, Path],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The band was measured on the CPU backend (host, stand-ins): a real GPU's figures carry none,
    the host's keep it (issue 22)."""
    import tui.core.planning.result as result
    from tui.core.gpu.types import GpuDevice, GpuSnapshot, HostMemory, Source, Status
    from tui.ui.cockpit.planning import plan_view

    monkeypatch.setattr(result, "error_band", lambda calibrated=False: {"compute": 7.0})
    gpu = GpuDevice(index=0, name="NVIDIA GPU 0", uuid="GPU-0", pci_bus_id="00000000:17:00.0",
                    memory_total_mib=24576, memory_used_mib=1024, memory_free_mib=23000)
    snap = GpuSnapshot(seq=1, taken_at=0.0, monotonic_s=0.0, sample_ms=0.0, source=Source.NVML, status=Status.OK,
                       message="", devices=(gpu,), host=HostMemory(65536, 32768))
    options = AppOptions(settings=demo_settings(tiny_models["tiny-mtp"]), simulate=False)
    view = plan_view(options.settings, snap, options, 1)
    assert view.error is None and view.devices and view.host is not None
    assert all(d.error_band == () for d in view.devices)
    assert view.host.error_band == (("compute", 7.0),)
