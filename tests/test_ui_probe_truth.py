"""One truth per figure (issue 31): the probe table is computed from the very samples its plots draw,
and warnings fold into one deduplicated line instead of squeezing the plots."""

from __future__ import annotations

import dataclasses

from textual.widgets import Collapsible, DataTable, Static

from tests.helpers import ui_samples as samples
from tui.ui.app import make_app
from tui.ui.cockpit.probing import _summary
from tui.ui.shared_views import ProbePoint


def test_the_table_row_uses_the_plotted_samples() -> None:
    pts = tuple(ProbePoint("MTP n2", i, tg, 400.0 + i, 0.7) for i, tg in enumerate((13.0, 57.3, 202.0, 60.0)))
    other = (ProbePoint("no MTP", 0, 999.0, 1.0, None),)
    row = _summary("MTP n2", {"acceptance": 0.7, "tg_tps": {"min": 57.3, "max": 57.3}}, 1, other + pts, {})
    assert row.n == 4  # requests, as the plot has points
    assert (row.tg_min, row.tg_max) == (13.0, 202.0)  # the plot's span, not one pass's
    assert row.tg_median == (57.3 + 60.0) / 2
    assert row.acceptance == 0.7


async def test_warnings_fold_into_one_line_and_plots_keep_their_rows() -> None:
    app = make_app(samples.fixed_options("probes"))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        panel = app.main.probe_panel
        plots = app.query_one("#probe-plots")
        before = plots.size.height
        state = dataclasses.replace(app.main.probes.state,
                                    warnings=("short generations understate MTP", "thermal throttling",
                                              "short generations understate MTP", "a third one"))
        panel.show(state)
        await pilot.pause()
        box = app.query_one("#probe-warnings", Collapsible)
        assert box.display and box.collapsed
        assert "3 warnings" in str(box.title)
        assert plots.size.height >= before - 1  # one line for the fold, never the plots' rows
        table = app.query_one("#probe-results", DataTable)
        assert "reqs" in str(table.ordered_columns[1].label)


async def test_acceptance_by_position_sits_beside_the_plots_with_its_advice_folded() -> None:
    app = make_app(samples.fixed_options("probes"))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        panel = app.main.probe_panel
        bars = app.query_one("#probe-positions", Static)
        assert bars.display and bars.parent is app.query_one("#probe-plots")  # in the plots' row
        assert [ln.split()[-2] for ln in str(bars.render()).splitlines()[1:]] == ["88", "68"]
        box = app.query_one("#probe-advice", Collapsible)
        assert box.display and box.collapsed and str(box.title).startswith("MTP n-max 2: keep n-max 2")
        assert "measured against MTP off" in str(app.query_one("#probe-advice-text", Static).render())
        # A row without per-position figures (MTP off, or a server without --metrics): neither shows.
        state = app.main.probes.state
        panel.show(dataclasses.replace(state, summaries=tuple(
            dataclasses.replace(s, positions=(), advice="", advice_headline="") for s in state.summaries)))
        await pilot.pause()
        assert not bars.display and not box.display


def test_the_panel_measures_the_draft_cost_against_mtp_off() -> None:
    """The MTP row's advice prices a drafted token from the MTP-off row's TG beside it (same server)."""
    pos = {"steps": 100, "drafted": 300, "accepted": [60, 30, 10]}  # L = 2.0, 3 drafted per step
    raw = {"no MTP": {"tg_tps_median": 75.0}, "MTP n3": {"tg_tps_median": 100.0, "positions": pos}}
    row = _summary("MTP n3", raw["MTP n3"], 1, (), raw)
    assert row.positions == (0.6, 0.3, 0.1) and "measured against MTP off" in row.advice
    assert "about 17 % of a decode step" in row.advice  # c = (2.0 x 75 / 100 - 1) / 3
    alone = _summary("MTP n3", raw["MTP n3"], 1, (), {"MTP n3": raw["MTP n3"]})
    assert "assumed" in alone.advice


def test_one_point_gets_axes_of_its_own_scale() -> None:
    from tui.ui.lab.charts import pad

    assert pad(1315.0, 1315.0) > 60  # not the ±1 t/s sliver of 1313.5..1316.5
    assert pad(10.0, 50.0) == 6.0  # a real spread keeps 15 % of itself
    assert pad(0.0, 0.0) == 1.0
