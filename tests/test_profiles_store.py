"""TOML profiles on disk, the launch history, and the `mtp-tune profile` command."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings

from tests.test_settings_strategies import settings_strategy
from tui.cli import main
from tui.core.presets import profiles
from tui.core.presets.profiles import ProfileError
from tui.core.options.redact import REDACTED
from tui.core.options.settings import Settings


@hsettings(max_examples=150, deadline=None)
@given(settings_strategy())
def test_toml_round_trip(s: Settings) -> None:
    text = profiles.settings_to_toml(s, name="p", include_api_key=True)
    assert profiles.settings_from_toml(text) == s


def test_api_key_not_stored_by_default() -> None:
    s = Settings(model="/m.gguf", api_key="s3cret", extra_args=["--api-key", "two"])
    text = profiles.settings_to_toml(s)
    assert "s3cret" not in text and "two" not in text
    assert profiles.settings_from_toml(text).api_key is None


def test_save_load_list_rename_delete() -> None:
    s = Settings(model="/m.gguf", ctx_size=4096, spec_type=["draft-mtp"])
    path = profiles.save_profile("alpha", s)
    assert path == profiles.profiles_dir() / "alpha.toml"
    assert profiles.load_profile("alpha") == s
    s2 = Settings(model="/m.gguf", ctx_size=8192)
    profiles.save_profile("alpha", s2)  # overwrite keeps a backup
    backups = list(profiles.backups_dir().glob("alpha.*.toml"))
    assert len(backups) == 1 and profiles.load_profile_file(backups[0]) == s
    with pytest.raises(ProfileError, match="already exists"):
        profiles.save_profile("alpha", s, overwrite=False)
    profiles.save_profile("beta", s)
    assert [p.name for p in profiles.list_profiles()] == ["alpha", "beta"]
    profiles.rename_profile("alpha", "gamma")
    assert [p.name for p in profiles.list_profiles()] == ["beta", "gamma"]
    assert "name = \"gamma\"" in (profiles.profiles_dir() / "gamma.toml").read_text()
    with pytest.raises(ProfileError, match="already exists"):
        profiles.rename_profile("beta", "gamma")
    kept = profiles.delete_profile("beta")
    assert kept.exists() and [p.name for p in profiles.list_profiles()] == ["gamma"]
    assert not [p for p in profiles.profiles_dir().iterdir() if p.name.startswith(".gamma")]  # no temp files


def test_api_key_profile_is_private() -> None:
    path = profiles.save_profile("secret", Settings(model="/m.gguf", api_key="k"), include_api_key=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert profiles.load_profile("secret").api_key == "k"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('format = 1\n[settings]\nmodel = "/m.gguf"\nctx_size = "big"\n', "(line 4): ctx_size = 'big' should be a whole number"),
        ("format = 1\n[settings]\nctx-size = 5\n", "(line 3): unknown setting 'ctx-size'. Write 'ctx_size'"),
        ("format = 1\n[settings\n", "not valid TOML"),
        ("format = 1\n[settings]\nspec_type = \"draft-mtp\"\n", "should be a list"),
        ("format = 9\n", "format 9 is not supported"),
    ],
)
def test_toml_errors_name_file_line_and_key(tmp_path: Path, text: str, fragment: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ProfileError) as e:
        profiles.load_profile_file(f)
    assert str(f) in str(e.value) and fragment in str(e.value)


def test_bad_names() -> None:
    for name in ("", "../x", ".hidden", "a b", "x.toml", "a" * 65):
        with pytest.raises(ProfileError):
            profiles.profile_path(name)


def test_history_records_every_launch_without_secrets() -> None:
    s = Settings(model="/models/Qwen 3.gguf", api_key="s3cret", extra_args=["--api-key=two"])
    p1 = profiles.record_launch(s, {"build": "b11434", "api_key": "three", "props": {"n_ctx": 4096, "none": None}, "path": Path("/x")})
    p2 = profiles.record_launch(Settings(hf_repo="u/m:Q4"))
    assert p1 != p2 and p1.parent == profiles.history_dir()
    for p in (p1, p2):
        text = p.read_text()
        assert "s3cret" not in text and "two" not in text and "three" not in text
    entries = profiles.list_history()
    assert [e.path for e in entries] == [p2, p1]  # newest first
    assert entries[1].settings.model == "/models/Qwen 3.gguf" and entries[1].settings.api_key is None
    assert entries[1].settings.extra_args == [f"--api-key={REDACTED}"]
    assert entries[1].server == {"build": "b11434", "api_key": REDACTED, "props": {"n_ctx": 4096}, "path": "/x"}
    assert profiles.list_history(limit=1)[0].path == p2


# ------------------------------------------------------------------------- CLI


def test_cli_import_command_export_argv(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["profile", "import", "--command",
               "llama-server -m '/m/a b.gguf' -c 4096 --spec-type draft-mtp --draft-max 2 --api-key k --no-mmap",
               "--name", "cmd"])
    out = capsys.readouterr().out
    assert rc == 0 and "saved profile cmd" in out and "--draft-max was removed" in out and "API key was not stored" in out
    assert main(["profile", "export", "cmd", "--argv"]) == 0
    line = capsys.readouterr().out.strip()
    assert line == "llama-server --model '/m/a b.gguf' --ctx-size 4096 --spec-type draft-mtp --spec-draft-n-max 2 --load-mode none --host 127.0.0.1"
    assert main(["profile", "list"]) == 0
    assert "cmd" in capsys.readouterr().out
    assert main(["profile", "show", "cmd"]) == 0
    shown = capsys.readouterr().out
    assert "ctx_size = 4096" in shown and "llama-server --model" in shown


def test_cli_import_ini_and_export_ini_and_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = Path(__file__).parent / "data" / "ini" / "realworld.ini"
    assert main(["profile", "import", str(src)]) == 0
    out = capsys.readouterr().out
    assert "saved profile qwen3.6-35b-mtp" in out and "line 5" in out
    target = tmp_path / "models.ini"
    assert main(["profile", "export", "qwen3.6-35b-mtp", "--ini", str(target), "--section", "qwen"]) == 0
    text = target.read_text()
    assert "[qwen]\nhf-repo = unsloth/Qwen3.6-35B-A3B-MTP-GGUF:UD-Q4_K_XL\n" in text and "load-mode = mmap" in text
    assert main(["profile", "export", "qwen3.6-35b-mtp", "--toml", str(tmp_path / "q.toml")]) == 0
    assert profiles.load_profile_file(tmp_path / "q.toml").tensor_split == [1.0, 1.0]
    assert main(["profile", "import", str(tmp_path / "q.toml"), "--name", "again"]) == 0
    assert profiles.load_profile("again") == profiles.load_profile("qwen3.6-35b-mtp")


def test_cli_errors_are_one_paragraph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "show", "nope"]) == 2
    assert "no profile named 'nope'" in capsys.readouterr().err
    assert main(["profile", "import", str(tmp_path / "missing.ini")]) == 2
    profiles.save_profile("bad", Settings(model="/a;b.gguf"))
    assert main(["profile", "export", "bad", "--ini", str(tmp_path / "x.ini")]) == 2
    err = capsys.readouterr().err
    assert "cuts preset values" in err and "Traceback" not in err
    assert not (tmp_path / "x.ini").exists()


def test_cli_check_without_server(capsys: pytest.CaptureFixture[str]) -> None:
    src = Path(__file__).parent / "data" / "ini" / "unknown_keys.ini"
    assert main(["profile", "check", str(src), "--json", "--no-server"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["server_accepts"] is None
    assert [(p["line"], p["section"], p["key"], p["severity"]) for p in data["problems"]] == [
        (3, "*", "mmap", "error"), (7, "m", "ctx_size", "error"), (8, "m", "n-gpu-layer", "error"),
    ]
    assert os.environ.get("MTP_TUNE_CONFIG_DIR")  # hermetic: profiles went to a temp dir
