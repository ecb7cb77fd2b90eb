"""SVG snapshots of every screen and theme, from fixed samples (no sampler, timers or server).

Update after an intended UI change with `pytest tests/test_ui_snapshots.py --snapshot-update` and
review the SVGs in tests/__snapshots__/.
"""

from __future__ import annotations

import pytest

from tests.helpers import ui_samples as samples
from tui.ui.app import make_app

THEMES = ("mtp-dark", "mtp-light", "mtp-okabe-ito")


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("state", samples.FIXED[:3])
def test_main_screen(snap_compare, state: str, theme: str) -> None:
    assert snap_compare(make_app(samples.fixed_options(state, theme)), terminal_size=(120, 40))


@pytest.mark.parametrize("theme", THEMES)
def test_runs_comparison(snap_compare, theme: str) -> None:
    assert snap_compare(make_app(samples.fixed_options("runs", theme)), press=["h"], terminal_size=(120, 40))


def test_small_terminal(snap_compare) -> None:
    """80x24 stays legible: risk, bars, the form and the panels all visible."""
    assert snap_compare(make_app(samples.fixed_options("probes")), terminal_size=(80, 24))


def test_probes_at_once(snap_compare) -> None:
    """Probes run 4 requests at once: the aggregate TG and per-request spread under the table, the
    verdict led by the aggregate, the per-position bars from each pass's /metrics bracket."""
    assert snap_compare(make_app(samples.fixed_options("probes-load")), terminal_size=(120, 40))


def test_help_screen(snap_compare) -> None:
    assert snap_compare(make_app(samples.fixed_options("idle")), press=["question_mark"], terminal_size=(120, 40))


def test_profile_dialog(snap_compare) -> None:
    assert snap_compare(make_app(samples.fixed_options("idle")), press=["f"], terminal_size=(120, 40))


def test_raw_log(snap_compare) -> None:
    assert snap_compare(make_app(samples.fixed_options("failure")), press=["o"], terminal_size=(120, 40))


def test_invalid_value_explained(snap_compare) -> None:
    """A bad value is explained next to its field (validated by the core, shown by the form)."""

    async def type_bad_ubatch(pilot) -> None:  # noqa: ANN001 - Pilot
        await pilot.pause()  # the main screen composes its form after the app is ready
        pilot.app.query_one("#f-ubatch_size").focus()
        await pilot.press("end", "backspace", "backspace", "backspace", "9", "9", "9", "9")
        await pilot.pause()

    assert snap_compare(make_app(samples.fixed_options("idle")), run_before=type_bad_ubatch, terminal_size=(120, 40))


@pytest.mark.parametrize(
    ("state", "key", "expected"),
    [
        ("idle", None, "TIGHT"),
        ("probes", None, "MTP n-max 2"),
        ("probes-load", None, "×4 together 97.5"),
        ("failure", None, "ran out of GPU memory"),
        ("runs", "h", "Run 6 (A) vs run 7 (B)"),
        ("idle", "question_mark", "mtp-tune keys"),
        ("idle", "f", "Save TOML"),
        ("failure", "o", "exiting due to model loading error"),
    ],
)
async def test_fixed_screens_render(state: str, key: str | None, expected: str) -> None:
    """The same screens through run_test, which re-raises app errors (a snapshot of a crash would pass)."""
    app = make_app(samples.fixed_options(state))
    async with app.run_test(size=(120, 40)) as pilot:
        if key:
            await pilot.press(key)
        await pilot.pause()
        text = "\n".join(str(w.render()) for w in app.screen.query("*") if hasattr(w, "render"))
        svg = app.export_screenshot()
        assert expected in text or expected.replace(" ", "&#160;") in svg
