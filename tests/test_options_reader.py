"""The one argv reader follows llama.cpp's rules: last value wins, list-building options accumulate."""

from tui.core.options import find_option, reader
from tui.core.options.redact import REDACTED, redact_argv


def test_last_value_wins_for_plain_options():
    args = ["-c", "1024", "--ctx-size", "2048", "--ctx_size", "4096"]
    assert reader.value(args, "-c") == "4096"


def test_repeated_override_tensor_accumulates():
    args = ["-ot", "blk\\.0\\.=CPU", "-m", "m.gguf", "--override-tensor", "blk\\.1\\.=CPU"]
    assert find_option("-ot").repeatable
    assert reader.values(args, "--override-tensor") == ["blk\\.0\\.=CPU", "blk\\.1\\.=CPU"]


def test_value_option_takes_next_token_even_if_dashed():
    # llama.cpp takes the next token as the value, whatever it looks like.
    assert reader.value(["--spec-draft-p-min", "-1", "-c", "8"], "--spec-draft-p-min") == "-1"
    assert reader.value(["-c", "8"], "--spec-draft-p-min") is None


def test_inline_values_are_understood_and_marked():
    occ = reader.occurrences(["--ctx-size=512"], "-c")
    assert occ[0].value == "512" and occ[0].inline


def test_missing_value_at_end():
    occ = reader.occurrences(["-m"], "--model")
    assert occ[0].missing_value and occ[0].value is None


def test_negative_flags_and_absent():
    assert reader.present(["--mmproj-auto", "--no-mmproj"], "--mmproj-auto") is False
    assert reader.present(["--no-mmproj", "--mmproj-auto"], "--mmproj-auto") is True
    assert reader.present([], "--mmproj-auto") is None


def test_without_removes_every_spelling_and_its_value():
    args = ["-c", "1", "-m", "x", "--ctx-size=2", "--ctx-size", "3", "stray"]
    assert reader.without(args, "-c") == ["-m", "x", "stray"]


def test_one_redactor_for_every_spelling():
    assert redact_argv(["--api-key", "k1", "--api-key=k2", "-m", "x"]) == [
        "--api-key", REDACTED, f"--api-key={REDACTED}", "-m", "x"]


def test_probe_launch_defaults_see_every_spelling_of_a_given_option():
    from tui.core.probes.session import with_defaults

    assert with_defaults(["--threads", "4", "--parallel=2"]) == ["--threads", "4", "--parallel=2", "--metrics"]
    assert with_defaults([]) == ["-np", "1", "-t", "1", "--metrics"]
