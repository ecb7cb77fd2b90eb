"""`profile fix`: removed options in a --models-preset migrated in place, every other byte kept, a
backup, refusals for what cannot be migrated, and the real router accepting the repaired file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.core.presets.fix import PresetFixError, fix_preset, plan_fix
from tui.core.presets import parse_preset

OLD = (
    "version = 1\r\n"
    "; a guide's preset\r\n"
    "[*]\r\n"
    "no-mmap = true   ; keep weights in RAM\r\n"
    "\r\n"
    "[qwen]\r\n"
    "model = /models/q.gguf\r\n"
    "mmap = 1\r\n"
    "draft-max   =   4 # old name\r\n"
    "ctx-size = 8192\r\n"
    "\r\n"
    "[other]\r\n"
    "model = /models/o.gguf\r\n"
    "mlock = 0\r\n"
    "LLAMA_ARG_DRAFT_MIN = 1\r\n"
)


def test_removed_options_migrate_and_every_other_byte_stays() -> None:
    assert not parse_preset(OLD).server_accepts
    new, changes = plan_fix(OLD)
    assert new == (
        "version = 1\r\n"
        "; a guide's preset\r\n"
        "[*]\r\n"
        "load-mode = none   ; keep weights in RAM\r\n"
        "\r\n"
        "[qwen]\r\n"
        "model = /models/q.gguf\r\n"
        "load-mode = mmap\r\n"
        "spec-draft-n-max   =   4 # old name\r\n"
        "ctx-size = 8192\r\n"
        "\r\n"
        "[other]\r\n"
        "model = /models/o.gguf\r\n"
        "spec-draft-n-min = 1\r\n"
    )
    assert [(c.line, c.section, c.new) for c in changes] == [
        (4, "*", "load-mode = none"), (8, "qwen", "load-mode = mmap"), (9, "qwen", "spec-draft-n-max = 4"),
        (14, "other", None), (15, "other", "spec-draft-n-min = 1"),
    ]
    assert "line 8 [qwen]: mmap = 1 -> load-mode = mmap" in str(changes[1])
    pf = parse_preset(new)
    assert pf.server_accepts and not [p for p in pf.problems if p.severity == "error"]


def test_section_option_and_merges() -> None:
    new, changes = plan_fix(OLD, section="qwen")
    assert [c.line for c in changes] == [8, 9]
    assert "no-mmap = true" in new and "mlock = 0" in new  # other sections untouched
    both, ch = plan_fix("[m]\nmodel = x.gguf\nmmap = 1\nmlock = 1\n")
    assert both == "[m]\nmodel = x.gguf\nload-mode = mmap+mlock\n" and [c.new for c in ch] == [None, "load-mode = mmap+mlock"]
    with pytest.raises(PresetFixError, match="--section nope: no such section"):
        plan_fix(OLD, section="nope")


@pytest.mark.parametrize("text, match", [
    ("[m]\nmodel = x.gguf\nspec-ngram-size-n = 3\n", r"line 3 \[m\]: spec-ngram-size-n was removed and cannot be migrated"),
    ("[m]\nmodel = x.gguf\nload-mode = none\nmmap = 1\n", r"line 4 \[m\]: mmap was removed, and the section already sets load-mode"),
    ("[m]\nmodel = x.gguf\nmmap = 1\nno-mmap = 1\n", r"lines 3, 4 \[m\]: removed keys that map to load-mode disagree"),
])
def test_refuses_what_it_cannot_migrate(text: str, match: str) -> None:
    with pytest.raises(PresetFixError, match=match):
        plan_fix(text)


def test_fix_in_place_with_backup_and_dry_run(tmp_path: Path) -> None:
    p = tmp_path / "presets.ini"
    p.write_bytes(OLD.encode())
    p.chmod(0o640)
    dry = fix_preset(p, dry_run=True)
    assert not dry.written and dry.changes and p.read_bytes() == OLD.encode() and not (tmp_path / "presets.ini.bak").exists()
    res = fix_preset(p)
    assert res.written and res.backup == tmp_path / "presets.ini.bak"
    assert res.backup.read_bytes() == OLD.encode() and p.read_bytes() == dry.text.encode()
    assert p.stat().st_mode & 0o777 == 0o640
    again = fix_preset(p)  # nothing left to fix: nothing written
    assert not again.written and again.changes == []


def test_a_section_is_fixed_even_when_another_still_breaks_the_file(tmp_path: Path) -> None:
    p = tmp_path / "presets.ini"
    p.write_text(OLD)
    res = fix_preset(p, "qwen")
    assert res.written and [c.line for c in res.changes] == [8, 9]
    assert [(x.line, x.section) for x in res.remaining] == [(4, "*"), (14, "other"), (15, "other")]
    assert "no-mmap = true" in p.read_text() and "mlock = 0" in p.read_text()


def test_refuses_a_file_still_refused_after_the_migration(tmp_path: Path) -> None:
    p = tmp_path / "bad.ini"
    text = "[m]\nmodel = x.gguf\nmmap = 1\n  ctx-size = 4096\n"  # an indented key fails the whole file
    p.write_text(text)
    with pytest.raises(PresetFixError, match="would still be refused.*line 4"):
        fix_preset(p)
    assert p.read_text() == text and not (tmp_path / "bad.ini.bak").exists()


def test_the_real_router_accepts_the_fixed_file(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path) -> None:
    from tui.core.server.preset_check import check_with_server

    p = tmp_path / "presets.ini"
    p.write_text(f"version = 1\n\n[tiny]\nmodel = {tiny_models['tiny-mtp']}\nmmap = 1\nctx-size = 2048\n")
    ok, msg = check_with_server(server_bin, p)
    assert not ok, msg  # the router refuses the removed option
    fix_preset(p)
    ok, msg = check_with_server(server_bin, p)
    assert ok, msg


def test_cli_fix_prints_each_change_and_refuses_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tui.cli import main as cli_main

    p = tmp_path / "presets.ini"
    p.write_bytes(OLD.encode())
    assert cli_main(["profile", "fix", str(p), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{p}:line 8 [qwen]: mmap = 1 -> load-mode = mmap" in out and "dry run, nothing written" in out
    assert p.read_bytes() == OLD.encode()
    assert cli_main(["profile", "fix", str(p), "--section", "qwen"]) == 0
    out = capsys.readouterr().out
    assert "2 line(s) repaired" in out and "presets.ini.bak" in out and "line 4 [*]: no-mmap" not in out
    assert "still refused by llama-server outside [qwen]: line 4 [*]" in out  # [*] was left as it was
    assert (tmp_path / "presets.ini.bak").read_bytes() == OLD.encode()
    bad = tmp_path / "bad.ini"
    bad.write_text("[m]\nmodel = x.gguf\nspec-ngram-size-n = 3\n")
    assert cli_main(["profile", "fix", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "line 3 [m]: spec-ngram-size-n was removed and cannot be migrated" in err and "Traceback" not in err
    assert cli_main(["profile", "fix", str(tmp_path / "missing.ini")]) == 2
    assert "no such preset file" in capsys.readouterr().err
