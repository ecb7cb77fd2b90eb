"""Typing a value re-plans (real planner, real GGUF header) and re-colours the bars; the first plan
of a file reads its header in a worker, later ones take a millisecond on the key path, and a stale
plan never overwrites a newer one (exact mode's part: tests/test_ui_exact.py)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from rich.style import Style
from textual.color import Color
from textual.widgets import Input

from tui.core.gpu.profiles import HwProfile, SimDevice
from tui.core.options.settings import Settings
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.cockpit.messages import Planned
from tui.ui.options import AppOptions
from tui.ui.cockpit.vram_bars import DeviceBar

#: One 24 MiB device, nothing else on it: the tiny model goes from ok to tight to OOM with the context.
TINY_GPU = HwProfile("test-24m", "a 24 MiB test device", (SimDevice("Test GPU", 24),))


def options(model: Path) -> AppOptions:
    settings = Settings(model=str(model), ctx_size=512, parallel=1, spec_type=["draft-mtp"], fit=False,
                        fit_target=[8])
    return AppOptions(settings=settings, hardware=TINY_GPU, simulate=True, cursor_blink=False,
                      sample_interval_s=60.0)


async def settle(pilot, app: MtpTuneApp) -> None:  # noqa: ANN001 - Pilot
    """Wait (bounded) until the plan for the newest settings is on screen."""
    deadline = time.monotonic() + 30
    while (app.main.plan.view is None or app.main.plan.view.seq != app.main.plan.seq) and time.monotonic() < deadline:
        await pilot.pause(0.02)
    await pilot.pause()


async def set_ctx(pilot, app: MtpTuneApp, value: str) -> None:  # noqa: ANN001 - Pilot
    field = app.query_one("#f-ctx_size", Input)
    field.focus()
    await pilot.press("end", *["backspace"] * len(field.value), *value)
    await settle(pilot, app)


def risk_colour(bar: DeviceBar) -> str | None:
    """The colour the risk words are drawn in."""
    text = bar.render()
    start = text.plain.find(("● OK", "▲ TIGHT", "✖ OOM")[("ok", "tight", "oom").index(bar.plan.risk)])
    for span in text.spans:
        if span.start <= start < span.end and isinstance(span.style, Style) and span.style.color:
            return span.style.color.triplet.hex if span.style.color.triplet else None
    return None


async def test_typing_replans_and_recolours(tiny_models: dict[str, Path]) -> None:
    app = make_app(options(tiny_models["tiny-mtp"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        bar = app.query_one(DeviceBar)
        seen = {}
        for ctx, expected in (("512", "ok"), ("4096", "tight"), ("16384", "oom")):
            await set_ctx(pilot, app, ctx)
            assert app.main.plan.view is not None and app.main.plan.view.error is None, app.main.plan.view
            assert bar.plan is app.main.plan.view.devices[0]
            assert bar.plan.risk == expected, (ctx, bar.plan)
            seen[expected] = (bar.plan.kv_mib, risk_colour(bar))
        # KV grows with the context, and each risk is drawn in its theme colour.
        assert seen["ok"][0] < seen["tight"][0] < seen["oom"][0]
        v = app.theme_variables
        assert seen["ok"][1] == Color.parse(v["success"]).hex.lower()
        assert seen["tight"][1] == Color.parse(v["warning"]).hex.lower()
        assert "OOM" in bar.render().plain and "short by" in bar.render().plain


async def test_bad_model_path_is_explained(tmp_path: Path) -> None:
    app = make_app(options(tmp_path / "missing.gguf"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        assert app.main.plan.view is not None and app.main.plan.view.error
        assert "missing.gguf" in app.main.plan.view.error
        notes = str(app.query_one("#plan-notes").render())
        assert "missing.gguf" in notes


async def test_invalid_settings_keep_the_last_plan(tiny_models: dict[str, Path]) -> None:
    app = make_app(options(tiny_models["tiny-mtp"]))
    async with app.run_test(size=(120, 40)) as pilot:
        field = app.query_one("#f-spec_draft_n_max", Input)
        field.focus()
        await pilot.press("end", *["backspace"] * len(field.value))
        await settle(pilot, app)
        before, seq = app.main.plan.view, app.main.plan.seq
        await pilot.press("-", "2")  # "-" and "-2" are both errors: no re-plan
        await pilot.pause(0.2)
        after = app.main.plan.view
        assert app.main.plan.seq == seq and after is not None
        # the same plan kept, only marked stale (it is for the last valid settings)
        assert dataclasses.replace(after, stale="") == before and after.stale == "spec-draft-n-max"
        assert app.query_one("#row-spec_draft_n_max").has_class("-error")


async def test_a_newer_plan_queued_before_an_older_one_is_the_one_shown(tiny_models: dict[str, Path]) -> None:
    """Plan workers finish in any order, and the queue collapses a burst of plans into one: the newest
    plan, queued before a stale one, must survive the collapse (it left no current plan at all)."""
    app = make_app(options(tiny_models["tiny-mtp"]))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        view = app.main.plan.view
        assert view is not None
        newest = app.main.plan.state.next_seq()  # a settings change whose plan a worker posts...
        app.main.post_message(Planned(dataclasses.replace(view, seq=newest)))
        app.main.post_message(Planned(dataclasses.replace(view, seq=newest - 1)))  # ...before a stale one's
        await pilot.pause()
        assert app.main.plan.view is not None and app.main.plan.view.seq == newest
