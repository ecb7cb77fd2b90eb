"""The front door: `mtp-tune [-m FILE | -hf REPO | -mu URL | --demo] [llama-server flags]` and every
command read llama-server's flags with the one argv reader; unknown command words are named.

Most checks run the real entry point (`python -m tui.cli`, what the `mtp-tune` script runs) in a
subprocess; the TUI's settings are read from the same parser and options code the entry point uses.
"""

from __future__ import annotations

import argparse
import os
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tui.cli import build_parser, _commands
from tui.cli._app_options import options_from_args
from tui.core.demo.prepare import DemoSetup
from tui.core.gpu.profiles import PROFILES

#: Commands that hand llama-server's flags through, and a model argument each accepts.
PASSING = ("app", "plan", "serve", "probe", "sweep", "tune")
HF_FLAGS = ["-hf", "user/repo:Q4_K_M", "-hfr", "user/repo2", "-hff", "model-Q4_K_M.gguf", "-hft", "hf_tok",
            "-mu", "http://127.0.0.1:9/m.gguf"]


def mtp_tune(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def parse(*argv: str) -> argparse.Namespace:
    return build_parser(_commands(argv[0])).parse_args(list(argv))


def test_an_unknown_command_is_named_with_the_commands_and_the_nearest() -> None:
    out = mtp_tune("plna", "-m", "x.gguf")
    assert out.returncode == 2 and out.stdout == ""
    assert "unknown command 'plna'" in out.stderr and "Did you mean `mtp-tune plan`?" in out.stderr
    for name in ("plan", "serve", "probe", "sweep", "doctor", "gpus", "runs", "profile"):
        assert name in out.stderr
    assert "plan-exact" not in out.stderr  # a helper module, not a command
    assert "unrecognized arguments" not in out.stderr


def test_help_of_an_unknown_command_is_not_the_tuis_help() -> None:
    out = mtp_tune("frobnicate", "--help")
    assert out.returncode == 2 and "unknown command 'frobnicate'" in out.stderr
    assert "usage:" not in out.stdout


@pytest.mark.parametrize("command", PASSING)
def test_llama_servers_hf_spellings_parse_on_every_command(command: str) -> None:
    """`-hf` is llama-server's option, not argparse's `-h f`; the values come through in order."""
    args = parse(command, *HF_FLAGS, "-c", "4096", "-ngl", "-1")
    assert args.server_args == [*HF_FLAGS, "-c", "4096", "-ngl", "-1"]


@pytest.mark.parametrize("command", PASSING)
def test_dash_h_is_still_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        parse(command, "-h")
    assert ended.value.code == 0 and f"usage: mtp-tune {command}" in capsys.readouterr().out


def test_the_commands_own_spellings_win_and_the_servers_pass() -> None:
    """probe's `--n-predict`/`--seed` are its own; llama-server's short `-n`/`-s` still reach the server."""
    args = parse("probe", "-m", "x.gguf", "--n-predict", "5", "-n", "7", "--seed", "3", "-s", "4", "--json")
    assert (args.n_predict, args.seed, args.json) == (5, 3, True)
    assert args.server_args == ["-m", "x.gguf", "-n", "7", "-s", "4"]


def test_everything_after_double_dash_is_the_servers() -> None:
    args = parse("app", "--gpus", "cpu", "--", "--gpus", "x")
    assert args.gpus == "cpu" and args.server_args == ["--gpus", "x"]


def test_plan_with_a_hub_repo_reads_it_as_a_repo_not_an_argparse_error(tmp_path: Path) -> None:
    """No machine here reaches the Hub: the endpoint is a closed loopback port, so the answer is the
    one-sentence network error (tests/test_remote_plan.py plans through a loopback Hub)."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mtp_tune("plan", "-hf", "user/repo:Q4_K_M", env={"HF_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert out.returncode == 2
    assert "-h/--help" not in out.stderr and "ignored explicit argument" not in out.stderr
    assert f"cannot reach 127.0.0.1:{port} (connection refused)" in out.stderr and "Traceback" not in out.stderr


def test_plan_reads_the_flags_through_the_real_entry_point(tiny_models: dict[str, Path]) -> None:
    out = mtp_tune("plan", "-m", str(tiny_models["tiny-mtp"]), "-c", "2048", "-np", "2", "--gpus", "2x16GiB",
                   "--json")
    assert out.returncode == 0, out.stderr
    context = json.loads(out.stdout)["model"]["context"]
    assert context["n_ctx"] == 2048 and context["n_seq_max"] == 2


def test_the_tui_opens_with_the_command_lines_flags_in_the_form(tiny_models: dict[str, Path]) -> None:
    model = tiny_models["tiny-mtp"]
    args = parse("app", "-m", str(model), "-c", "32768", "-ctkd", "q8_0", "--spec-type", "draft-mtp",
                 "--gpus", "2x16GiB")
    options = options_from_args(args)
    s = options.settings
    assert s.model == str(model) and s.ctx_size == 32768 and s.cache_type_k_draft == "q8_0"
    assert s.spec_type == ["draft-mtp"] and options.simulate and options.hardware is not None


def test_a_new_model_on_the_command_line_replaces_the_last_ones_source(tiny_models: dict[str, Path]) -> None:
    from tui.core.options.settings import Settings
    from tui.core.presets.profiles import record_launch

    record_launch(Settings(model=str(tiny_models["tiny-nomtp"]), ctx_size=1024))
    options = options_from_args(parse("app", "-hf", "user/repo:Q4_K_M"))
    assert options.settings.model is None and options.settings.hf_repo == "user/repo:Q4_K_M"
    assert options.settings.ctx_size == 1024  # the rest of the last launch stays
    assert options.title == "mtp-tune · user/repo:Q4_K_M"


def test_the_demo_takes_llama_server_flags_on_top_of_its_settings(tiny_models: dict[str, Path]) -> None:
    model = tiny_models["tiny-mtp"]
    args = parse("app", "--demo", "-c", "4096", "--spec-draft-n-max", "2")
    options = options_from_args(args, DemoSetup(Path("/bin/true"), model, PROFILES["rtx3060-laptop-6g"]))
    assert options.demo and options.settings.ctx_size == 4096 and options.settings.spec_draft_n_max == 2
    assert options.settings.model == str(model)


def test_a_bad_value_stops_the_tui_before_it_opens_naming_the_field() -> None:
    out = mtp_tune("-m", "x.gguf", "-c", "abc")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("mtp-tune: ctx-size: 'abc' is not a whole number") and len(out.stderr.splitlines()) == 1


def test_attach_refuses_server_flags() -> None:
    out = mtp_tune("--attach", "http://127.0.0.1:9", "-c", "4096")
    assert out.returncode == 2 and "--attach" in out.stderr and "-c 4096" in out.stderr


@pytest.mark.slow
def test_the_real_command_opens_the_tui_with_the_flags_in_the_form(tmp_path: Path, server_bin: Path,
                                                                     tiny_models: dict[str, Path]) -> None:
    """`mtp-tune -m FILE -c 3072 -ctkd q8_0 --gpus 2x16GiB` in a real terminal: the form shows them."""
    import os
    import shlex
    import shutil

    from tests.helpers.tmux import Tmux

    if shutil.which("tmux") is None:
        pytest.fail("tmux is required for the end-to-end test (apt-get install tmux)")
    env = {k: os.environ[k] for k in os.environ if k.startswith(("XDG_", "MTP_TUNE_", "LLAMA_CACHE"))}
    env |= {"MTP_TUNE_LLAMA_SERVER": str(server_bin), "TERM": "xterm-256color", "PATH": os.environ.get("PATH", "")}
    marker = tmp_path / "exit-code"
    cmd = [str(Path(sys.executable).parent / "mtp-tune"), "-m", str(tiny_models["tiny-mtp"]), "-c", "3072",
           "-ctkd", "q8_0", "--gpus", "2x16GiB", "--no-exact"]
    inner = f"{shlex.join(cmd)}; echo $? > {shlex.quote(str(marker))}; sleep 60"
    tmux = Tmux(tmp_path / "tmux.sock")
    try:
        tmux.start("env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " sh -c " + shlex.quote(inner))
        screen = tmux.wait_for(lambda s: "VRAM" in s and "STOPPED" in s, "the first frame", 60)
        assert "tiny-mtp.gguf" in screen and "3072" in screen, screen
        assert "q8_0" in screen, screen
        tmux.keys("q")
        tmux.wait_for(lambda s: marker.exists(), "mtp-tune to quit", 30)
        assert marker.read_text().strip() == "0"
    finally:
        tmux.kill()


#: Every command that reads llama-server's flags, and what it needs besides them to get that far.
READING_FLAGS = {
    "app": ["-m", "M.gguf"], "plan": ["-m", "M.gguf"], "serve": ["-m", "M.gguf"], "probe": ["-m", "M.gguf"],
    "sweep": ["-m", "M.gguf", "--axis", "ub=256,512"], "tune": ["-m", "M.gguf", "--workload", "64:32"],
    "variants": ["user/repo"],
}


@pytest.mark.parametrize("command", sorted(READING_FLAGS))
@pytest.mark.parametrize("flags, line", [
    (["--ctk", "q9"], "mtp-tune: --ctk: not an option of llama-server b11434 (did you mean -ctk, i.e. "
                      "--cache-type-k?); llama-server refuses to start with an option it does not know."),
    (["-ctk", "q9"], "mtp-tune: cache-type-k: unknown cache type 'q9'; llama-server accepts f32, f16, bf16, q8_0, "
                     "q4_0, q4_1, iq4_nl, q5_0, q5_1."),
])
def test_a_refused_flag_is_one_error_line_and_exit_2_on_every_command(
        command: str, flags: list[str], line: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Not a warning (or two) and a plan or a launch of something else than what was typed (issue 31)."""
    from tui.cli import main
    from tui.core.server import provision
    from tui.ui import app as ui_app

    def nothing_starts(*_a: object, **_k: object) -> None:
        raise AssertionError("a server or the TUI was started for a refused flag")

    monkeypatch.setattr(provision, "ensure_server", nothing_starts)
    monkeypatch.setattr(ui_app, "make_app", nothing_starts)
    rc = main([command, *READING_FLAGS[command], *flags])
    out, err = capsys.readouterr()
    assert (rc, out) == (2, ""), err
    assert err.splitlines() == [line]


def test_an_unknown_option_of_the_last_launch_is_not_refused_as_if_typed(tiny_models: dict[str, Path],
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The form keeps an option it does not know (a newer server may): `mtp-tune -c 2048` reopens
    those settings; only an unknown option typed on this command line is refused."""
    from tui.core.options.settings import Settings
    from tui.core.presets.profiles import record_launch

    record_launch(Settings(model=str(tiny_models["tiny-mtp"]), extra_args=["--new-server-option"]))
    options = options_from_args(parse("app", "-c", "2048"))
    assert options.settings.ctx_size == 2048 and options.settings.extra_args == ["--new-server-option"]
    with pytest.raises(ValueError, match="--ctk: not an option of llama-server"):
        options_from_args(parse("app", "-c", "2048", "--ctk", "q9"))
