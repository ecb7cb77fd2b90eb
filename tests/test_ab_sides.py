"""`mtp-tune ab A B` before anything launches: each way of writing a side (profile, preset section, pasted
command, base, +FLAGS), errors that name the side and the problem, what differs in llama-server's spelling
(and the binaries with their builds), and each side held to its own build's --help (the pinned build's
real --help text, tests/data/llama-server-help.txt, and an "older build" without one option)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fake_builds import HELP, OLD_HELP, fake_server
from tui.cli import main
from tui.core.lab.sides import (SideError, check_sides, differences, other_builds, read_side, side_problems)
from tui.core.options.settings import Settings
from tui.core.presets.profiles import save_profile
from tui.core.server.binary import ServerInfo, parse_help, removed_options

BASE = ["-m", "model.gguf", "-c", "4096"]


def info(text: str = HELP, version: int = 11434, path: str = "/opt/b/llama-server") -> ServerInfo:
    return ServerInfo(Path(path), version, None, None, parse_help(text) - removed_options(text))


def test_each_way_of_writing_a_side(tmp_path: Path) -> None:
    save_profile("fast", Settings(model="model.gguf", ctx_size=8192, flash_attn="on"))
    p = read_side("A", "fast")
    assert (p.settings.ctx_size, p.settings.flash_attn, p.source) == (8192, "on", "profile fast")
    ini = tmp_path / "presets.ini"
    ini.write_text("[*]\nc = 2048\n\n[quick]\nmodel = model.gguf\nctk = q8_0\n", encoding="utf-8")
    s = read_side("B", f"{ini}:quick")
    assert (s.settings.cache_type_k, s.settings.ctx_size) == ("q8_0", 2048)  # [*] cascades, as llama-server reads it
    assert s.source == f"section [quick] of {ini}"
    c = read_side("A", "/opt/b2/llama-server -m model.gguf -ngl 99 --spec-type draft-mtp")
    assert c.settings.n_gpu_layers == "99" and c.settings.mtp_enabled and c.server_bin == Path("/opt/b2/llama-server")
    assert read_side("A", "llama-server -m model.gguf").server_bin is None  # a bare name is no build of its own
    b = read_side("A", "base", BASE)
    assert (b.settings.model, b.settings.ctx_size, b.source) == ("model.gguf", 4096, "the flags given")
    plus = read_side("B", "+-c 8192 -ctk q8_0", BASE)
    assert (plus.settings.ctx_size, plus.settings.cache_type_k) == (8192, "q8_0")  # the later value wins
    assert plus.source == "the flags given with -c 8192 -ctk q8_0"
    for side in (p, s, c, b, plus):
        assert side.settings.metrics and side.settings.port is None  # launched alike: /metrics on, the lab's port


@pytest.mark.parametrize(("text", "base", "said"), [
    ("nosuch", [], "B: no profile named 'nosuch'"),
    ("missing.ini:fast", [], "B: preset file missing.ini does not exist"),
    ("{ini}:slow", [], "B: no model section [slow]"),
    ("{ini}:", [], "B: '{ini}:' names no section after the ':'"),
    ("base", [], "B is base, but no llama-server flags were given"),
    ("+-ctk q8_0", [], "B is '+-ctk q8_0', but no llama-server flags were given"),
    ("+", BASE, "B: '+' has no flags after the '+'"),
    ("+-ctk 'q8_0", BASE, "B: \"+-ctk 'q8_0\" cannot be split into words"),
    ("bad/name", [], "B: 'bad/name' is none of NAME (a saved profile)"),
    ("  ", [], "B: empty"),
])
def test_a_side_that_cannot_be_read_is_named_with_its_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               text: str, base: list[str], said: str) -> None:
    ini = tmp_path / "p.ini"
    ini.write_text("[fast]\nmodel = model.gguf\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SideError) as e:
        read_side("B", text.format(ini=ini), base)
    assert str(e.value).startswith(said.format(ini=ini)), str(e.value)


def test_an_option_the_build_does_not_list_is_said_per_side_with_its_build() -> None:
    a = read_side("A", "base", [*BASE, "--spec-type", "draft-mtp", "--spec-draft-p-min", "0.5"])
    b = read_side("B", "base", [*BASE, "--spec-type", "draft-mtp", "--spec-draft-p-min", "0.5"])
    assert not [p for p in side_problems(a, info()) if p.severity == "error"]  # the pinned build lists it
    problems = side_problems(b, info(OLD_HELP, 11400))
    with pytest.raises(SideError) as e:
        check_sides(problems)
    assert str(e.value) == ("B (build 11400): --spec-draft-p-min is not accepted by this build of llama-server; "
                            "update llama-server or remove it.")
    # The one validator's own rules, said per side too.
    bad = read_side("A", "+-ub 4096 -b 512", BASE)
    with pytest.raises(SideError, match=r"^A \(build 11434\): .*ubatch"):
        check_sides(side_problems(bad, info()))
    with pytest.raises(SideError, match=r"^A \(build 11434\): model: give a GGUF path"):
        check_sides(side_problems(read_side("A", "base", ["-c", "4096"]), info()))


def test_what_differs_in_llama_servers_spelling_and_the_builds() -> None:
    a = read_side("A", "base", BASE).settings
    b = read_side("B", "+-ctk q8_0 --spec-type draft-mtp", BASE).settings
    assert differences(a, b) == ("--spec-type (not given) -> draft-mtp", "--cache-type-k (default f16) -> q8_0")
    assert differences(a, a) == ()
    old, new = info(version=11400, path="/opt/old/llama-server"), info(path="/opt/new/llama-server")
    assert differences(a, a, old, new) == (
        "llama-server build 11400 -> build 11434 (/opt/old/llama-server -> /opt/new/llama-server)",)
    same_build = info(path="/opt/copy/llama-server")
    assert differences(a, a, new, same_build) == (
        "llama-server /opt/new/llama-server -> /opt/copy/llama-server (both build 11434)",)
    assert differences(a, a, new, new) == ()  # one binary: nothing to say


def test_the_command_refuses_before_any_launch_naming_side_and_build(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    new, old = fake_server(tmp_path, "new", HELP, 11434), fake_server(tmp_path, "old", OLD_HELP, 11400)
    rc = main(["ab", "base", "+--spec-draft-p-min 0.2", "--a-bin", str(new), "--b-bin", str(old), "-m", "model.gguf",
               "--spec-type", "draft-mtp"])
    err = capsys.readouterr().err
    assert rc == 2 and "B (build 11400): --spec-draft-p-min is not accepted by this build" in err, err
    assert "A (build" not in err
    # Flags no side would use, a bad workload, and a missing binary: refused, each in one sentence.
    assert main(["ab", "fast", "slow", "-m", "model.gguf"]) == 2
    assert "neither side is `base`" in capsys.readouterr().err
    assert main(["ab", "base", "base", "--workload", "lots", "--server-bin", str(new), "-m", "m.gguf"]) == 2
    assert "--workload 'lots'" in capsys.readouterr().err
    assert main(["ab", "base", "base", "--b-bin", str(tmp_path / "none"), "--a-bin", str(new), "-m", "m.gguf"]) == 2
    assert f"B: --b-bin names {tmp_path / 'none'}, which is no file" in capsys.readouterr().err


def test_other_builds_are_offered_without_the_current_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = fake_server(tmp_path, "a", HELP, 1), fake_server(tmp_path, "b", HELP, 2)
    monkeypatch.setenv("MTP_TUNE_LLAMA_SERVER", str(b))
    monkeypatch.setenv("PATH", str(a.parent))
    # The build cache is this test's own (the server tier keeps the real one, which holds real builds).
    monkeypatch.setenv("MTP_TUNE_CACHE_DIR", str(tmp_path / "cache"))
    assert other_builds(a) == [b] and other_builds(b) == [a] and other_builds(None) == [b, a]
    # mtp-tune's own cached builds come after $MTP_TUNE_LLAMA_SERVER and PATH.
    key_dir = tmp_path / "cache" / "llama-server" / "old-key"
    key_dir.mkdir(parents=True)
    cached = fake_server(key_dir, "bin", HELP, 3)
    assert other_builds(a) == [b, cached] and other_builds(None, limit=2) == [b, a]
