"""Pilot tests of the settings form as a keyboard user drives it (issue 31, item 8): the focused row
is highlighted, up/down and j/k move between fields, `/` jumps to a field by name, placeholders read
as hints, the model path is shown whole, a problem is one line, and the plan is marked stale while a
field is invalid."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from textual.widgets import Input, OptionList, Static, Switch

from tests.helpers import ui_samples as samples
from tui.core.gpu.profiles import HwProfile, SimDevice
from tui.core.options.settings import Settings
from tui.ui.app import MtpTuneApp, make_app
from tui.ui.cockpit.field_picker import FieldPicker
from tui.ui.cockpit.settings_fields import ALL_FIELDS
from tui.ui.cockpit.settings_form import SettingsForm
from tui.ui.cockpit.vram_bars import DeviceBar, VramBars
from tui.ui.options import AppOptions

SIZE = (120, 40)


async def _focus(pilot, field: str) -> None:  # noqa: ANN001 - Pilot
    pilot.app.query_one(f"#f-{field}").focus()
    await pilot.pause()


def _focused_id(app: MtpTuneApp) -> str | None:
    return app.screen.focused.id if app.screen.focused is not None else None


async def test_the_focused_row_is_highlighted() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=SIZE) as pilot:
        await _focus(pilot, "ctx_size")
        focused, other = app.query_one("#row-ctx_size"), app.query_one("#row-batch_size")
        assert focused.styles.background.a > 0, "the row holding the focus has a background"
        assert other.styles.background.a == 0
        assert app.query_one("#label-ctx_size").styles.text_style.bold
        await _focus(pilot, "batch_size")  # the highlight follows the focus
        assert focused.styles.background.a == 0 and other.styles.background.a > 0


async def test_up_down_and_j_k_move_between_fields() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=SIZE) as pilot:
        form = app.query_one(SettingsForm)
        names = list(ALL_FIELDS)
        await _focus(pilot, "ctx_size")
        scroll = form.scroll_y
        await pilot.press("down")
        assert _focused_id(app) == f"f-{names[names.index('ctx_size') + 1]}"
        await pilot.press("up", "up")
        assert _focused_id(app) == f"f-{names[names.index('ctx_size') - 1]}"
        assert form.scroll_y == scroll  # moved the focus, did not scroll the panel
        # in a text field j and k are letters
        await _focus(pilot, "ctx_size")
        await pilot.press("end", "j")
        assert _focused_id(app) == "f-ctx_size" and app.query_one("#f-ctx_size", Input).value.endswith("j")
        # on a switch they move, and down reaches a field below the fold (scrolled into view)
        await _focus(pilot, "cpu_moe")
        assert isinstance(app.screen.focused, Switch)
        await pilot.press("k")
        assert _focused_id(app) == f"f-{names[names.index('cpu_moe') - 1]}"
        await _focus(pilot, "no_mmproj")
        await pilot.press("j")
        assert _focused_id(app) == f"f-{names[names.index('no_mmproj') + 1]}"
        await pilot.press(*["down"] * len(names))
        assert _focused_id(app) == f"f-{names[-1]}"  # stops at the last field
        last = app.query_one(f"#row-{names[-1]}")
        assert form.scrollable_content_region.contains_region(last.region)


async def test_the_picker_filters_and_focuses_the_chosen_field() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("slash")
        await pilot.pause()
        assert isinstance(app.screen, FieldPicker)
        options = app.screen.query_one(OptionList)
        assert options.option_count == len(ALL_FIELDS)  # every field, before any filter
        await pilot.press(*"-ctk")  # a llama-server spelling finds its field
        await pilot.pause()
        assert options.get_option_at_index(options.highlighted).id == "cache_type_k"
        assert options.option_count < len(ALL_FIELDS)
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, FieldPicker)
        assert _focused_id(app) == "f-cache_type_k"

        # while typing in a field `/` is a character; ctrl+f opens the picker
        await pilot.press("ctrl+f")
        await pilot.pause()
        assert isinstance(app.screen, FieldPicker)
        await pilot.press(*"metrics", "enter")
        await pilot.pause()
        assert _focused_id(app) == "f-metrics"
        form = app.query_one(SettingsForm)
        assert form.scrollable_content_region.contains_region(app.query_one("#row-metrics").region)

        await pilot.press("escape", "slash", "escape")  # Escape closes it, the focus where it was
        await pilot.pause()
        assert not isinstance(app.screen, FieldPicker)


async def test_placeholders_read_as_hints() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=SIZE) as pilot:
        inputs = {w.id[2:]: w for w in app.query(Input) if w.id and w.id.startswith("f-")}
        assert set(inputs) == {n for n, f in ALL_FIELDS.items() if f.kind not in ("flag", "negflag")}
        for name, w in inputs.items():
            assert w.placeholder.startswith(("default: ", "e.g. ")), (name, w.placeholder)
        assert inputs["batch_size"].placeholder == "default: 2048"
        style = inputs["batch_size"].get_component_rich_style("input--placeholder")
        assert style.italic  # and dim: drawn apart from a typed value
        await _focus(pilot, "batch_size")
        await pilot.press("end", *["backspace"] * len(inputs["batch_size"].value))
        assert inputs["batch_size"].render_line(0).text.strip() == "default: 2048"


def _long_path_options() -> AppOptions:
    path = "/home/someone/llama/models/unsloth/Qwen3.5-9B-MTP-GGUF/Qwen3.5-9B-MTP-UD-Q4_K_XL.gguf"
    settings = dataclasses.replace(samples.settings(), model=path)
    return dataclasses.replace(samples.fixed_options("idle"), settings=settings)


async def test_a_long_model_path_is_shown_whole() -> None:
    options = _long_path_options()
    app = make_app(options)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        path = options.settings.model
        field = app.query_one("#f-model", Input)
        assert path in str(field.tooltip)
        detail = app.query_one("#detail-model", Static)
        assert detail.display and path in str(detail.render()).replace("\n", "")
        assert detail.outer_size.height >= 2  # wrapped, not cut
        # a path that fits its input needs no second line
        await _focus(pilot, "model")
        await pilot.press("end", *["backspace"] * len(field.value), *"/m/x.gguf")
        assert not detail.display and "/m/x.gguf" in str(field.tooltip)


async def test_a_problem_is_one_line_with_the_whole_text_in_its_tooltip() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=SIZE) as pilot:
        await _focus(pilot, "ctx_size")
        field = app.query_one("#f-ctx_size", Input)
        row = app.query_one("#row-ctx_size")
        below = app.query_one("#row-spec_type").region.y - row.region.y
        await pilot.press("end", *["backspace"] * len(field.value), *"12abc")
        await pilot.pause()
        line = app.query_one("#problem-ctx_size", Static)
        assert "12abc" in str(line.render())
        assert line.outer_size.height == 1  # one row...
        message = str(line.tooltip)
        assert "12abc" in message and len(message) > line.size.width  # ...though the text is longer
        assert app.query_one("#row-spec_type").region.y - row.region.y == below + 1


#: One 24 MiB device: the tiny model's plan is made in a millisecond on the key path.
TINY_GPU = HwProfile("test-24m", "a 24 MiB test device", (SimDevice("Test GPU", 24),))


async def _settle(pilot, app: MtpTuneApp) -> None:  # noqa: ANN001 - Pilot
    deadline = time.monotonic() + 30
    while (app.main.plan.view is None or app.main.plan.view.seq != app.main.plan.seq) and time.monotonic() < deadline:
        await pilot.pause(0.02)
    await pilot.pause()


def _plan_words(app: MtpTuneApp) -> str:
    """What the plan panel says about its plan: the subtitle, each device's title, the notes."""
    bars = app.query_one(VramBars)
    titles = [b.render().plain.splitlines()[0] for b in app.query(DeviceBar)]
    return "\n".join([str(bars.border_subtitle), *titles, str(app.query_one("#plan-notes", Static).render())])


async def test_the_plan_is_marked_stale_while_a_field_is_invalid(tiny_models: dict[str, Path]) -> None:
    settings = Settings(model=str(tiny_models["tiny-mtp"]), ctx_size=512, parallel=1, spec_type=["draft-mtp"],
                        fit=False, fit_target=[8])
    app = make_app(AppOptions(settings=settings, hardware=TINY_GPU, simulate=True, cursor_blink=False,
                              sample_interval_s=60.0))
    async with app.run_test(size=SIZE) as pilot:
        await _settle(pilot, app)
        assert "STALE" not in _plan_words(app)
        field = app.query_one("#f-ctx_size", Input)
        for fixed in ("512", "1024"):  # back to the planned value, and a new one
            await _focus(pilot, "ctx_size")
            await pilot.press("end", *["backspace"] * len(field.value), *"12abc")
            await pilot.pause()
            words = _plan_words(app)
            assert "STALE (ctx-size invalid)" in words and "last valid settings" in words, words
            assert all("STALE" in b.render().plain.splitlines()[0] for b in app.query(DeviceBar))
            await pilot.press(*["backspace"] * len(field.value), *fixed)
            await _settle(pilot, app)
            words = _plan_words(app)
            assert "STALE" not in words and "last valid settings" not in words, (fixed, words)
            assert app.main.plan.view is not None and app.main.plan.view.stale == ""


async def test_the_sweep_axes_hints_read_as_hints() -> None:
    """The sweep's empty axes showed "2,3" in grey, read as a value; now "e.g. 2,3", dim italic."""
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("w")
        await pilot.pause()
        field = app.screen.query_one("#axis-1", Input)
        assert field.value == "" and field.placeholder == "e.g. 2,3"
        assert field.get_component_rich_style("input--placeholder").italic
