"""The one option model: defaults and ranges from the table, llama.cpp's argv rules, one validator for
every command (bugs from issue 12: `plan -c abc` traceback, `probe -c abc` launching; issue 14:
spec-draft-n-max 500000 accepted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.cli import main
from tui.core import options
from tui.core.options.argv import settings_from_argv
from tui.core.options.settings import Settings
from tui.core.options.validate import check_argv, errors, validate


def test_defaults_are_written_once_in_the_table() -> None:
    assert options.default("--ubatch-size") == 512
    assert options.default("-b") == 2048
    assert options.default("--spec-draft-n-max") == 3
    assert options.default("--spec-draft-n-min") == 0
    assert options.default("--fit-target") == 1024
    assert options.default("--fit-ctx") == 4096
    with pytest.raises(KeyError):
        options.default("--frobnicate")


def test_every_settings_field_has_a_value_rule() -> None:
    for spec in options.FIELDS:
        assert spec.option.rule is not None, spec.field


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--spec-draft-n-max", "500000"], "spec-draft-n-max: 500000 is above 2047; it must be between 0 and 2047"),
        (["--spec-draft-n-max", "-1"], "spec-draft-n-max: -1 is below 0"),
        (["--spec-draft-p-min", "1.5"], "between 0 and 1"),
        (["-np", "0"], "parallel: 0 is rejected"),
        (["-c", "-5"], "ctx-size: -5 is below 0"),
        (["--spec-ngram-mod-n-min", "2000"], "spec-ngram-mod-n-min: 2000 is above 1024; it must be between 0 and 1024 (0..1024"),
        (["--spec-ngram-mod-n-match", "0"], "between 1 and 1024"),
        (["--spec-ngram-mod-n-max", "x"], "spec-ngram-mod-n-max: 'x' is not a whole number"),
        (["-c", "abc"], "ctx-size: 'abc' is not a whole number"),
        (["-fitt", "1G"], "fit-target: entry 1 ('1G') is not a whole number"),
        (["--fit", "maybe"], "fit: 'maybe' is not on or off"),
    ],
)
def test_values_outside_the_table_ranges_are_refused(args: list[str], fragment: str) -> None:
    _s, problems = check_argv(["-m", "m.gguf", *args])
    messages = [p.message for p in errors(problems)]
    assert any(fragment in m for m in messages), messages


def test_a_draft_within_a_larger_batch_is_fine() -> None:
    assert not errors(check_argv(["-m", "m.gguf", "-b", "8192", "--spec-draft-n-max", "4000"])[1])
    assert errors(validate(Settings(model="m", batch_size=64, spec_draft_n_max=64)))


def test_fields_never_hold_a_stray_string() -> None:
    r = settings_from_argv(["-c", "abc", "-b", "1k", "--spec-draft-p-min", "high", "-ngl", "most", "-ts", "1,x"])
    s = r.settings
    assert (s.ctx_size, s.batch_size, s.spec_draft_p_min, s.n_gpu_layers, s.tensor_split) == (None, None, None, None, [])
    assert {p.field for p in r.problems if p.severity == "error"} >= {
        "ctx_size", "batch_size", "spec_draft_p_min", "n_gpu_layers", "tensor_split"}


def test_repeatable_options_accumulate_and_others_keep_the_last() -> None:
    r = settings_from_argv(["-ot", "a=CPU", "-c", "1", "--override-tensor", "b=CUDA0", "-c", "2",
                            "--rpc", "h1:1", "--rpc", "h2:2,h3:3"])
    assert r.settings.ctx_size == 2
    assert r.settings.extra_args == ["-ot", "a=CPU", "--override-tensor", "b=CUDA0"]
    assert r.settings.rpc == ["h1:1", "h2:2", "h3:3"]
    assert any("last value wins" in p.message for p in r.problems)
    assert options.reader.values(r.settings.extra_args, "-ot") == ["a=CPU", "b=CUDA0"]


def test_spec_type_none_lists() -> None:
    assert not settings_from_argv(["--spec-type", "none,draft-mtp"]).settings.mtp_enabled
    assert settings_from_argv(["--spec-type", "none", "--spec-type", "draft-mtp"]).settings.mtp_enabled


def test_no_import_cycle_between_argv_and_validate() -> None:
    src = (Path(options.__file__).parent / "argv.py").read_text()
    assert "validate" not in src.split('"""', 2)[2].split("\n# ---")[0]


def test_plan_with_a_bad_value_is_a_clear_error(tiny_models: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    model = next(iter(tiny_models.values()))
    rc = main(["plan", "-m", str(model), "-c", "abc", "--gpus", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "ctx-size: 'abc' is not a whole number" in err and "Traceback" not in err


def test_plan_refuses_an_absurd_draft(tiny_models: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    model = next(iter(tiny_models.values()))
    rc = main(["plan", "-m", str(model), "--spec-type", "draft-mtp", "--spec-draft-n-max", "500000", "--gpus", "cpu"])
    assert rc == 2
    assert "spec-draft-n-max: 500000 is above 2047" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["probe", "sweep", "serve"])
def test_commands_refuse_bad_values_before_launching(command: str, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from tui.core.server import provision

    def no_launch(*_a: object, **_k: object) -> None:
        raise AssertionError("a server was provisioned or launched for refused flags")

    monkeypatch.setattr(provision, "ensure_server", no_launch)
    monkeypatch.setattr("tui.cli.serve.ensure_server", no_launch, raising=False)
    extra = ["--axis", "ub=256,512"] if command == "sweep" else []
    rc = main([command, "-m", "M.gguf", "-c", "abc", *extra])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "ctx-size: 'abc' is not a whole number" in err and "Traceback" not in err


def test_sweep_axes_go_through_the_same_rules() -> None:
    from tui.core.sweep.axes import SweepDefinitionError, parse_axis
    from tui.core.sweep.definition import build_definition

    with pytest.raises(SweepDefinitionError, match="ubatch-size: 'abc' is not a whole number"):
        parse_axis("ub=abc")
    # a value out of range alone can never launch: refused with the sweep, not skipped row by row (issue 29)
    with pytest.raises(SweepDefinitionError, match="between 0 and 1024"):
        build_definition(Settings(model="m.gguf"), ["spec-ngram-mod-n-min=48,2000"])
    d = build_definition(Settings(model="m.gguf"), ["ub=4096", "b=2048,4096"])  # valid alone: the grid decides
    skipped = [c for c in d.grid() if c.invalid]
    assert len(skipped) == 1 and "ubatch-size (4096) is larger than batch-size (2048)" in (skipped[0].invalid or "")


def test_tui_launch_refuses_a_profile_with_a_refused_value(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.core.presets.profiles import save_profile

    def no_app(*_a: object, **_k: object) -> None:
        raise AssertionError("the TUI was started with refused settings")

    monkeypatch.setattr("tui.ui.app.make_app", no_app)

    save_profile("huge-draft", Settings(model="m.gguf", spec_type=["draft-mtp"], spec_draft_n_max=500000))
    rc = main(["--profile", "huge-draft", "--server-bin", "/nonexistent/llama-server"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "--profile huge-draft cannot be used" in err and "spec-draft-n-max: 500000 is above 2047" in err


def test_an_unknown_option_is_named_once_a_warning_in_the_form_an_error_on_a_command_line() -> None:
    """The importer and the validator both see `--ctk`: one finding, with the nearest real option."""
    for unknown in ("warning", "error"):
        _s, problems = check_argv(["-m", "m.gguf", "--ctk", "q9"], unknown=unknown)  # type: ignore[arg-type]
        assert [(p.severity, p.option) for p in problems] == [(unknown, "--ctk")]
        assert "(did you mean -ctk, i.e. --cache-type-k?)" in problems[0].message
    _s, problems = check_argv(["-m", "m.gguf", "--frobnicate"], unknown="error")
    assert [p.message for p in problems] == ["--frobnicate: not an option of llama-server b11434; llama-server "
                                             "refuses to start with an option it does not know."]
