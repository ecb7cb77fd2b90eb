"""Pilot tests of the settings form: invalid values explained by the field, launches refused while
an error stands, every Settings field present, loading a profile fills every field."""

from __future__ import annotations

import dataclasses

from textual.widgets import Input, Static

from tui.core.options.settings import Settings
from tests.helpers import ui_samples as samples
from tui.ui.app import make_app
from tui.ui.cockpit.settings_fields import ALL_FIELDS
from tui.ui.cockpit.settings_form import SettingsForm


def problem_text(app, field: str) -> str:  # noqa: ANN001 - the App
    """The problem line under `field` ('' when there is none: the line is only mounted for a problem)."""
    found = app.query(f"#problem-{field}")
    return str(found.first(Static).render()) if found else ""


async def type_into(pilot, field: str, text: str) -> None:  # noqa: ANN001 - Pilot
    widget = pilot.app.query_one(f"#f-{field}", Input)
    widget.focus()
    await pilot.press("end", *["backspace"] * len(widget.value), *list(text))
    await pilot.pause()


def test_every_settings_field_has_a_control() -> None:
    assert {f.name for f in dataclasses.fields(Settings)} == set(ALL_FIELDS)


async def test_invalid_values_are_explained_next_to_the_field() -> None:
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        await type_into(pilot, "ctx_size", "12k")
        text = problem_text(app, "ctx_size")
        assert "ctx-size" in text and "12k" in text
        assert app.query_one("#row-ctx_size").has_class("-error")

        await type_into(pilot, "ctx_size", "4096")
        assert problem_text(app, "ctx_size") == ""
        assert not app.query_one("#row-ctx_size").has_class("-error")

        await type_into(pilot, "cache_type_k", "q9_9")
        assert "q9_9" in problem_text(app, "cache_type_k")
        assert app.main.plan.settings.ctx_size == 4096

        await type_into(pilot, "ubatch_size", "4096")  # larger than batch-size 2048
        text = problem_text(app, "ubatch_size")
        assert "ubatch-size" in text and "2048" in text

        await type_into(pilot, "extra_args", "--flag 'unclosed")
        assert "quotes" in problem_text(app, "extra_args")


async def test_launch_is_refused_while_a_field_is_wrong() -> None:
    app = make_app(dataclasses.replace(samples.fixed_options("idle"), fixed=None, simulate=True,
                                       sample_interval_s=60.0))
    async with app.run_test(size=(120, 40)) as pilot:
        await type_into(pilot, "spec_draft_n_max", "-2")
        await pilot.press("f5")
        await pilot.pause()
        assert app.main.server.status.state == "stopped"
        messages = [n.message for n in app._notifications]
        assert any("spec-draft-n-max" in m for m in messages), messages


async def test_warnings_shown_without_blocking() -> None:
    """--host 0.0.0.0 without an API key is a warning, shown under host."""
    app = make_app(samples.fixed_options("idle"))
    async with app.run_test(size=(120, 40)) as pilot:
        await type_into(pilot, "host", "0.0.0.0")
        assert app.query_one("#problem-host").has_class("-warning")
        assert "api-key" in problem_text(app, "host").lower() or "api key" in problem_text(app, "host").lower()


async def test_load_fills_every_field() -> None:
    app = make_app(samples.fixed_options("idle"))
    wanted = Settings(
        model="/m/x.gguf", ctx_size=2048, batch_size=1024, ubatch_size=256, parallel=1, spec_type=["draft-mtp"],
        spec_draft_n_max=2, cache_type_k="q8_0", cache_type_k_draft="q4_0", flash_attn="on", fit=False,
        fit_target=[256, 512], n_gpu_layers="all", tensor_split=[1.0, 1.0], cpu_moe=True, load_mode="none",
        port=8080, extra_args=["--jinja"],
    )
    async with app.run_test(size=(120, 40)) as pilot:
        app.query_one(SettingsForm).load(wanted)
        await pilot.pause()
        assert app.main.plan.settings == wanted
        assert app.query_one("#f-cache_type_k_draft", Input).value == "q4_0"
        assert app.query_one("#f-fit", Input).value == "off"
        assert app.query_one("#f-tensor_split", Input).value == "1,1"


async def test_lazy_form_mounts_every_field_with_its_value() -> None:
    """Live mode mounts the groups below the fold after the first frame; values and problems survive."""
    options = dataclasses.replace(samples.fixed_options("idle"), fixed=None, simulate=True, sample_interval_s=60.0,
                                  settings=dataclasses.replace(samples.settings(), batch_size=256, port=8081))
    app = make_app(options)
    async with app.run_test(size=(120, 40)) as pilot:
        form = app.query_one(SettingsForm)
        form.load(dataclasses.replace(options.settings, batch_size=128))  # possibly before the rest mounts
        await pilot.pause()
        await pilot.pause()
        assert {w.id for w in app.query("Input, Switch")} >= {f"f-{name}" for name in ALL_FIELDS}
        assert app.query_one("#f-batch_size", Input).value == "128"
        assert app.query_one("#f-port", Input).value == "8081"
        # ubatch 512 > batch 128: the problem is shown once the field exists.
        assert "ubatch-size" in problem_text(app, "ubatch_size")
