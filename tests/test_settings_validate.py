"""Validation rules, the option table, and reading the installed server's options from --help."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.core.options import (
    FIELDS,
    REMOVED,
    SERVER_OPTIONS,
    all_spellings,
    find_option,
    find_removed,
    option_for_ini_key,
)
from tui.core.server.binary import parse_help, parse_help_entries
from tui.core.options.settings import Settings, effective_spec_types
from tui.core.options.validate import Problem, validate

HELP = (Path(__file__).parent / "data" / "llama-server-help.txt").read_text()


def problems(s: Settings, **kw: object) -> list[Problem]:
    return validate(s, **kw)  # type: ignore[arg-type]


def one(s: Settings, field: str, severity: str, fragment: str, **kw: object) -> None:
    found = [p for p in problems(s, **kw) if p.field == field and p.severity == severity and fragment in p.message]
    assert found, [str(p) for p in problems(s, **kw)]


OK = Settings(model="/m.gguf")


def test_clean_settings_have_no_problems() -> None:
    assert problems(OK) == []
    full = Settings(model="/m.gguf", ctx_size=65536, batch_size=2048, ubatch_size=512, parallel=1, threads=8,
                    spec_type=["draft-mtp"], spec_draft_n_max=3, spec_draft_n_min=1, spec_draft_p_min=0.5,
                    cache_type_k="q8_0", cache_type_v="q8_0", cache_type_k_draft="q8_0", cache_type_v_draft="q4_0",
                    flash_attn="on", fit=True, fit_target=[512, 1024], n_gpu_layers="all", tensor_split=[3, 1],
                    main_gpu=1, load_mode="none", no_mmproj=True, cache_ram=0)
    assert problems(full, device_count=2) == []


@pytest.mark.parametrize(
    ("settings", "field", "severity", "fragment"),
    [
        (Settings(model="m", batch_size=256, ubatch_size=512), "ubatch_size", "error", "larger than batch-size (256)"),
        (Settings(model="m", ubatch_size=4096), "ubatch_size", "error", "larger than batch-size (2048)"),
        (Settings(model="m", cache_type_k="q3_k"), "cache_type_k", "error", "unknown cache type 'q3_k'"),
        (Settings(model="m", cache_type_k_draft="foo"), "cache_type_k_draft", "error", "spec-draft-type-k: unknown cache type"),
        (Settings(model="m", cache_type_v="q8_0", flash_attn="off"), "cache_type_v", "error", "needs flash attention"),
        (Settings(model="m", cache_type_v_draft="q4_0", flash_attn="0"), "cache_type_v_draft", "error", "needs flash attention"),
        (Settings(model="m", spec_draft_n_min=4), "spec_draft_n_min", "error", "greater than spec-draft-n-max (3)"),
        (Settings(model="m", spec_draft_n_max=2, spec_draft_n_min=3), "spec_draft_n_min", "error", "(3) is greater"),
        (Settings(model="m", ctx_size="4k"), "ctx_size", "error", "ctx-size: '4k' is not a whole number"),  # type: ignore[arg-type]
        (Settings(model="m", spec_draft_p_min="high"), "spec_draft_p_min", "error", "is not a number"),  # type: ignore[arg-type]
        (Settings(model="m", spec_draft_p_min=1.5), "spec_draft_p_min", "error", "between 0 and 1"),
        (Settings(model="m", n_gpu_layers="most"), "n_gpu_layers", "error", "not auto, all or a whole number"),
        (Settings(model="m", tensor_split=[1, "x"]), "tensor_split", "error", "entry 2 ('x') is not a number"),  # type: ignore[list-item]
        (Settings(model="m", fit_target=["1G"]), "fit_target", "error", "not a whole number of MiB"),  # type: ignore[list-item]
        (Settings(model="m", parallel=0), "parallel", "error", "0 is rejected"),
        (Settings(model="m", port=70000), "port", "error", "above 65535"),
        (Settings(model="m", flash_attn="maybe"), "flash_attn", "error", "not one of on, off or auto"),
        (Settings(model="m", load_mode="mmap2"), "load_mode", "error", "not one of auto, none"),
        (Settings(model="m", spec_type=["mtp"]), "spec_type", "error", "(use draft-mtp)"),
        (Settings(model="m", spec_type=["none", "draft-mtp"]), "spec_type", "warning", "switches every type in it off"),
        (Settings(model="/a;b.gguf"), "model", "warning", "contains ';'"),
        (Settings(model="m", host="0.0.0.0"), "host", "warning", "anyone on the network"),
        (Settings(model="m", host="192.168.1.5"), "host", "warning", "anyone on the network"),
        (Settings(), "model", "error", "router mode"),
        (Settings(model="m", extra_args=["--no-mmap"]), "extra_args", "error", "use --load-mode none"),
        (Settings(model="m", extra_args=["--draft-max", "4"]), "extra_args", "error", "use --spec-draft-n-max"),
        (Settings(model="m", extra_args=["--mlock"]), "extra_args", "error", "use --load-mode mlock"),
        (Settings(model="m", extra_args=["--frobnicate"]), "extra_args", "warning", "not an option of llama-server b11434"),
        (Settings(model="m", ctx_size=1024, extra_args=["-c", "2048"]), "extra_args", "warning", "the extra one) wins"),
        (Settings(model="m", split_mode="tensor"), "split_mode", "warning", "--fit cannot plan it"),
    ],
)
def test_rules(settings: Settings, field: str, severity: str, fragment: str) -> None:
    one(settings, field, severity, fragment)


def test_a_model_url_names_the_model() -> None:
    """`-mu URL` names a model to plan (no error), but alone it starts llama-server b11434 in router
    mode (server.cpp checks the model path before the URL fills it in): a warning asks for -m PATH."""
    for args in (["-mu", "http://127.0.0.1:9/m.gguf"], ["--model-url=http://127.0.0.1:9/m.gguf"]):
        one(Settings(extra_args=args), "model", "warning", "router mode, which downloads and loads nothing")
        assert not [p for p in problems(Settings(extra_args=args)) if p.severity == "error"]
    assert not [p for p in problems(Settings(model="/tmp/m.gguf", extra_args=["-mu", "http://127.0.0.1:9/m.gguf"]))
                if p.field == "model"]
    one(Settings(extra_args=["--ctx-size", "4096"]), "model", "error", "model URL (-mu)")
    one(Settings(model="/tmp/m.gguf", hf_repo="u/r"), "hf_repo", "warning", "ignores the model path")


def test_ini_target_makes_truncation_an_error() -> None:
    one(Settings(model="/a#b.gguf"), "model", "error", "contains '#'", target="ini")


def test_api_key_silences_the_host_warning_and_never_appears() -> None:
    s = Settings(model="m", host="0.0.0.0", api_key="a;b#c")
    assert not [p for p in problems(s) if p.field == "host"]
    assert all("a;b#c" not in p.message for p in problems(s, target="ini"))


def test_device_count_rules() -> None:
    one(Settings(model="m", tensor_split=[1, 1, 1]), "tensor_split", "error", "only 2 device(s)", device_count=2)
    one(Settings(model="m", tensor_split=[1]), "tensor_split", "warning", "remaining devices get no layers", device_count=2)
    one(Settings(model="m", fit_target=[1, 2, 3]), "fit_target", "error", "one per device", device_count=2)
    one(Settings(model="m", main_gpu=2), "main_gpu", "error", "numbered 0 to 1", device_count=2)
    assert problems(Settings(model="m", tensor_split=[1, 1, 1])) == []  # device count unknown: no rule


def test_accepted_options_of_the_installed_server() -> None:
    accepted = parse_help(HELP) - {"--spec-draft-n-max"}  # pretend an older build
    one(Settings(model="m", spec_draft_n_max=2), "spec_draft_n_max", "error", "is not accepted by this build of llama-server", accepted=accepted)
    one(Settings(model="m", extra_args=["--frobnicate"]), "extra_args", "error", "is not accepted by this build", accepted=parse_help(HELP))
    # a removed option is still printed by --help (it exists only to throw): the replacement is named anyway
    assert "--draft-max" in parse_help(HELP)
    one(Settings(model="m", extra_args=["--draft-max", "2"]), "extra_args", "error", "--spec-draft-n-max", accepted=parse_help(HELP))


def test_parse_help_reads_every_spelling() -> None:
    found = parse_help(HELP)
    for sp in ("-c", "--ctx-size", "-fa", "--flash-attn", "--no-mmproj", "--no-mmproj-auto", "--mmproj-auto",
               "-ctkd", "--spec-draft-type-k", "--cache-type-k-draft", "-ngl", "--n-gpu-layers", "--spec-type",
               "-no-kvu", "--no-kv-unified", "--load-mode", "--fit-target", "--models-preset", "--api-key"):
        assert sp in found, sp
    assert not any(s.startswith("---") or s in ("-1", "--") for s in found)
    assert "--no-mmap" not in found and "--mlock" not in found
    # the table mtp-tune ships was taken from the same build: same options, same grouping
    assert found == all_spellings()
    table = sorted(tuple(o.spellings) for o in SERVER_OPTIONS if not o.preset_only)
    assert sorted(parse_help_entries(HELP)) == table


def test_parse_help_on_handwritten_lines() -> None:
    text = (
        "----- common params -----\n\n"
        "-c,    --ctx-size N                     size of the prompt context\n"
        "                                        (env: LLAMA_ARG_CTX_SIZE)\n"
        "-fa,   --flash-attn [on|off|auto]       set Flash Attention use ('on', 'off', or 'auto', default: 'auto')\n"
        "--mmproj-auto, --no-mmproj, --no-mmproj-auto\n"
        "                                        whether to use multimodal projector file -1 --not-this\n"
        "--spec-type none,draft-simple,draft-mtp\n"
        "load_backend: loaded RPC backend from x\n"
    )
    assert parse_help(text) == {"-c", "--ctx-size", "-fa", "--flash-attn", "--mmproj-auto", "--no-mmproj",
                                "--no-mmproj-auto", "--spec-type"}


def test_option_table_lookups() -> None:
    assert find_option("--ctx_size") is find_option("-c")  # --long_name underscores become dashes
    assert find_option("-ctx_size") is None
    assert option_for_ini_key("ctx_size") is None  # preset keys are literal
    assert option_for_ini_key("LLAMA_ARG_NO_MMPROJ_AUTO") is find_option("--no-mmproj")
    assert option_for_ini_key("load-on-startup") is not None and option_for_ini_key("load-on-startup").preset_only
    assert find_option("--api-key").env == "LLAMA_API_KEY"  # no _ARG_
    assert find_option("-tb").env is None
    for sp, repl in (("--no-mmap", "--load-mode none"), ("--mmap", "--load-mode mmap"), ("--mlock", "--load-mode mlock"),
                     ("--draft-max", "--spec-draft-n-max"), ("--draft-n", "--spec-draft-n-max"), ("--draft", "--spec-draft-n-max"),
                     ("--draft-min", "--spec-draft-n-min"), ("--draft-n-min", "--spec-draft-n-min"), ("mmap", "--load-mode mmap")):
        r = find_removed(sp)
        assert r is not None and repl in r.replacement, sp
    # options the server still registers only to throw are in the table; the others are not
    for r in REMOVED:
        assert (find_option(r.spellings[0]) is not None) is r.registered, r.spellings
    for f in FIELDS:
        assert find_option(f.flag) is not None and f.flag.startswith("--"), f.field


def test_effective_spec_types_match_the_server() -> None:
    assert effective_spec_types(["draft-mtp", "ngram-mod"]) == ["draft-mtp", "ngram-mod"]
    assert effective_spec_types(["draft-mtp", "none"]) == []
    assert effective_spec_types(["none", "draft-mtp"]) == []
    assert Settings(spec_type=["ngram-mod", "draft-mtp"]).mtp_enabled
