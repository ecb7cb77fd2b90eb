"""An SVG snapshot of the tune screen (`T`) after a finished tune, from the fixed samples in
tests/helpers/tune_samples.py (no server, no timers): the status line with the best and its spread,
the trial table with the best and the best MTP-off marked, the PP-vs-TG plot with the Pareto front,
the A/B verdict and the break-even.

Update after an intended UI change with `pytest tests/test_ui_tune_snapshots.py --snapshot-update`
and review the SVG in tests/__snapshots__/.
"""

from __future__ import annotations

from tests.helpers import tune_samples
from tests.helpers import ui_samples as samples
from tui.ui.app import make_app


def test_tune_screen_done(snap_compare) -> None:
    app = make_app(samples.fixed_options("idle"))
    assert snap_compare(app, run_before=tune_samples.push_tune("done"), terminal_size=(120, 40))
