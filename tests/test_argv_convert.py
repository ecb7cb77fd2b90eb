"""Settings <-> llama-server argv, and import of pasted command lines."""

from __future__ import annotations

from hypothesis import given, settings as hsettings

from tests.test_settings_strategies import settings_strategy
from tui.core.options.argv import (
    command_line,
    parse_command_line,
    settings_from_argv,
    settings_to_argv,
    split_command,
)
from tui.core.options.redact import redact_argv
from tui.core.options.redact import REDACTED
from tui.core.options.settings import Settings


@hsettings(max_examples=150, deadline=None)
@given(settings_strategy())
def test_argv_round_trip(s: Settings) -> None:
    argv = settings_to_argv(s)
    back = settings_from_argv(argv)
    assert back.settings == s, argv
    assert not [p for p in back.problems if p.severity == "error"]


@hsettings(max_examples=80, deadline=None)
@given(settings_strategy())
def test_pasted_command_round_trip(s: Settings) -> None:
    """The shell-quoted display line imports back to the same settings (quoting survives)."""
    line = command_line(settings_to_argv(s, binary="/opt/llama.cpp/build/bin/llama-server"))
    back = parse_command_line(line)
    assert back.binary == "/opt/llama.cpp/build/bin/llama-server"
    assert back.settings == s, line


def test_argv_is_a_list_with_canonical_long_flags() -> None:
    s = Settings(model="/m/a b;c.gguf", ctx_size=4096, spec_type=["draft-mtp", "ngram-mod"], cache_type_k_draft="q8_0",
                 no_mmproj=True, tensor_split=[3.0, 1.0], fit=False, n_gpu_layers="all", metrics=True)
    argv = settings_to_argv(s, binary="llama-server")
    assert argv == [
        "llama-server", "--model", "/m/a b;c.gguf", "--ctx-size", "4096", "--spec-type", "draft-mtp,ngram-mod",
        "--spec-draft-type-k", "q8_0", "--fit", "off", "--gpu-layers", "all", "--tensor-split", "3,1",
        "--no-mmproj", "--host", "127.0.0.1", "--metrics",
    ]


def test_api_key_redaction() -> None:
    s = Settings(model="m.gguf", api_key="s3cret", extra_args=["--api-key", "other"])
    argv = settings_to_argv(s, redact=True)
    assert "s3cret" not in argv and "other" not in argv
    assert argv.count(REDACTED) == 2
    assert redact_argv(["--api-key=abc"]) == [f"--api-key={REDACTED}"]
    assert "s3cret" not in repr(s)
    assert s.redacted().api_key == REDACTED and "other" not in s.redacted().extra_args


def test_import_guide_style_command() -> None:
    text = r"""$ CUDA_VISIBLE_DEVICES=0 LLAMA_ARG_NO_MMPROJ_AUTO=1 ./build/bin/llama-server \
        -m "/models/Qwen 3.6.gguf" -c 65536 -ngl 99 -fa --no-mmap --mlock -ctk q8_0 -ctv q8_0 \
        --spec-type draft-mtp --spec-type ngram-mod --draft-max 4 --draft-min=1 --ctx_size=32768 \
        --temp 0.6 --frobnicate 3 -ts 1/1 --host 0.0.0.0 # from a model card"""
    r = parse_command_line(text)
    s = r.settings
    assert r.binary == "./build/bin/llama-server"
    assert r.env == {"CUDA_VISIBLE_DEVICES": "0", "LLAMA_ARG_NO_MMPROJ_AUTO": "1"}
    assert s.model == "/models/Qwen 3.6.gguf"
    assert s.ctx_size == 32768  # --ctx_size=32768 comes last and wins
    assert s.n_gpu_layers == "99"
    assert s.flash_attn == "on"  # bare -fa from old guides
    assert s.load_mode == "mmap+mlock" or s.load_mode == "mlock"
    assert s.spec_type == ["draft-mtp", "ngram-mod"]  # repeated --spec-type appends
    assert (s.spec_draft_n_max, s.spec_draft_n_min) == (4, 1)
    assert s.tensor_split == [1.0, 1.0]
    assert s.no_mmproj is True  # from LLAMA_ARG_NO_MMPROJ_AUTO
    assert s.host == "0.0.0.0"
    assert s.extra_args == ["--temp", "0.6", "--frobnicate", "3"]
    messages = " | ".join(p.message for p in r.problems)
    for needle in ("--no-mmap was removed", "--load-mode none", "--draft-max was removed", "--spec-draft-n-max",
                   "--frobnicate is not an option", "does not accept --flag=value", "CUDA_VISIBLE_DEVICES",
                   "takes a value"):
        assert needle in messages, needle


def test_none_in_a_spec_type_list() -> None:
    # one flag: kept as written (validation warns); repeated flags: per-flag effective lists
    assert settings_from_argv(["--spec-type", "none,draft-mtp"]).settings.spec_type == ["none", "draft-mtp"]
    assert not Settings(spec_type=["none", "draft-mtp"]).mtp_enabled
    r = settings_from_argv(["--spec-type", "draft-mtp", "--spec-type", "none", "--spec-type", "ngram-mod,none"])
    assert r.settings.spec_type == ["draft-mtp"]
    assert r.settings.mtp_enabled
    assert any("enables nothing" in p.message for p in r.problems)


def test_negative_and_env_flags() -> None:
    r = settings_from_argv(["--no-mmproj-auto", "--mmproj-auto"])
    assert r.settings.no_mmproj is False
    r = settings_from_argv(["--metrics"], env={"LLAMA_ARG_CTX_SIZE": "2048", "LLAMA_ARG_ENDPOINT_METRICS": "0"})
    assert r.settings.ctx_size == 2048 and r.settings.metrics is True
    r = settings_from_argv(["-c", "1024"], env={"LLAMA_ARG_CTX_SIZE": "2048", "LLAMA_ARG_DRAFT_MAX": "4"})
    assert r.settings.ctx_size == 1024  # CLI beats env, without a "given twice" warning
    assert not any("more than once" in p.message for p in r.problems)
    assert any(p.severity == "error" and "LLAMA_ARG_DRAFT_MAX" in p.message for p in r.problems)


def test_bad_input_is_reported_not_raised() -> None:
    r = settings_from_argv(["-c", "lots", "--ctx-size"])
    # a field never holds a stray string: the value is refused, named, and the field left unset
    assert r.settings.ctx_size is None
    assert any(p.field == "ctx_size" and p.severity == "error" and "ctx-size: 'lots' is not a whole number" in p.message
               for p in r.problems)
    assert any(p.severity == "error" and "needs a value" in p.message for p in r.problems)
    r = parse_command_line('llama-server -m "unclosed')
    assert not r.ok and "quotes" in r.problems[0].message
    r = settings_from_argv(["model.gguf", "--spec-ngram-size-n", "4"])
    assert r.settings.extra_args == ["model.gguf"]
    assert any("--spec-ngram-size-n was removed" in p.message and p.severity == "error" for p in r.problems)


def test_split_command_continuations_and_comments() -> None:
    assert split_command("llama-server `\n -c 1 ^\n -np 2 # c") == ["llama-server", "-c", "1", "-np", "2"]
    assert split_command("llama serve -m 'a b'") == ["llama", "serve", "-m", "a b"]
    r = parse_command_line("llama serve -m x.gguf")
    assert r.binary == "llama serve" and r.settings.model == "x.gguf"


def test_an_option_taken_as_a_value_is_pointed_out() -> None:
    from tui.core.options.argv import settings_from_argv
    from tui.core.options.validate import check_argv

    imp = settings_from_argv(["-m", "x.gguf", "-c", "-np", "1"])
    assert any("-c takes '-np' as its value" in p.message for p in imp.problems)
    _settings, found = check_argv(["-m", "x.gguf", "-c", "-np", "1"])
    assert any(p.field == "ctx_size" and p.severity == "error" for p in found)
