"""SVG snapshots of quality on screen: the plan panel's quality line (measured, measuring, not measured),
the quality-vs-memory view, and the MTP verdict's quality line, from fixed samples (nothing runs).

Update after an intended UI change with `pytest tests/test_ui_quality_snapshots.py --snapshot-update`
and review the SVGs in tests/__snapshots__/.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.helpers import ui_samples as samples
from tests.helpers.tuning_samples import verdict, verdict_view
from tests.test_quality_index import FIGURES
from tui.core.quality.index import Measured, kv_quality
from tui.core.quality.request import KvPair
from tui.ui.app import make_app
from tui.ui.cockpit.calibrating import model_of
from tui.ui.cockpit.quality_memory import QualityMemoryRow, QualityMemoryView, row
from tui.ui.cockpit.quality_screen import QualityMemoryScreen
from tui.ui.lab.verdict_screen import VerdictScreen

MODEL = samples.settings().model or ""


def measured(kv: str, kld: float, same_top: float, ctx: int = 2048) -> Measured:
    k, _, v = kv.partition("/")
    figures = dataclasses.replace(FIGURES, kld_mean=dataclasses.replace(FIGURES.kld_mean, value=kld), ctx=ctx,
                                  same_top_pct=dataclasses.replace(FIGURES.same_top_pct, value=same_top))
    return Measured("d", MODEL, KvPair(k, v or k), figures, "the probe workload", "t", "d", MODEL, (), 1.0, 30.0, kv)


ENTRIES = [measured("q8_0", 0.0081, 94.8), measured("q4_0", 0.0412, 88.1), measured("q8_0/q4_0", 0.0231, 91.0)]


def quality_line(state: str) -> Any:
    """The fixed main screen with the quality controller in `state` (its lookup's answer given)."""
    async def run_before(pilot: Any) -> None:
        await pilot.pause()  # the main screen composes its panels after the app is ready
        main = pilot.app.main
        q = main.quality
        q.model, q.entries = model_of(main.plan.settings), [] if state == "not-measured" else ENTRIES
        if state == "measuring":
            q.entries, q.running, q.status = [], KvPair("q8_0", "q8_0"), "measuring: chunk 3/8"
        main._show_quality()
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("state", ["measured", "measuring", "not-measured"])
def test_plan_panel_quality_line(snap_compare, state: str) -> None:
    assert snap_compare(make_app(samples.fixed_options("idle")), run_before=quality_line(state), terminal_size=(120, 40))


def memory_view() -> QualityMemoryView:
    by_kv = {m.kv: m for m in ENTRIES}
    mib = {"f16": 2048.0, "q8_0": 1088.0, "q5_1": 768.0, "q5_0": 704.0, "q4_1": 640.0, "q4_0": 576.0,
           "q8_0/q4_0": 832.0}
    rows: list[QualityMemoryRow] = []
    for label, kv_mib in mib.items():
        k, _, v = label.partition("/")
        kv = KvPair(k, v or k)
        rows.append(row(kv, kv_mib, mib["f16"], by_kv.get(kv), current=label == "q8_0"))
    rows.sort(key=lambda r: -(r.kv_mib or 0))
    return QualityMemoryView("Quality vs memory: Qwen3.5-9B-Q4_K_M.gguf at -c 16384", tuple(rows),
                             "KV: the planner's estimate at the settings on screen with only -ctk/-ctv changed.")


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_quality_memory_screen(snap_compare, size: tuple[int, int]) -> None:
    async def run_before(pilot: Any) -> None:
        await pilot.app.push_screen(QualityMemoryScreen(memory_view()))
        await pilot.pause()

    assert snap_compare(make_app(samples.fixed_options("idle")), run_before=run_before, terminal_size=size)


def test_verdict_quality_line(snap_compare) -> None:
    async def run_before(pilot: Any) -> None:
        said = kv_quality(ENTRIES, KvPair("q8_0", "q8_0"))
        await pilot.app.push_screen(VerdictScreen(pilot.app.lab, fixed=verdict_view(), fixed_verdict=verdict(),
                                                  quality=said))
        await pilot.pause()

    assert snap_compare(make_app(samples.fixed_options("idle")), run_before=run_before, terminal_size=(120, 40))
