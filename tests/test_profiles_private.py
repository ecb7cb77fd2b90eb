"""A kept API key is never readable by others, not even for a moment: profiles, their backups and
exported TOML files holding one are 0600 from creation, also over an existing 0644 file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tui.cli import main
from tui.core.options.settings import Settings
from tui.core.presets import profiles
from tui.core.presets import write as write_mod

KEY = "k-never-world-readable"


class Exposures(list[str]):
    """Every moment a file holding KEY was (or was made) readable by group or others, once armed."""

    armed = False

    def arm(self) -> None:
        self.armed = True


@pytest.fixture
def exposures(monkeypatch: pytest.MonkeyPatch) -> Exposures:
    """Each rename of a temp file into place, and each chmod, checked against the file's content
    (os.replace and os.chmod are the process-wide functions: the test's own setup runs before `arm`)."""
    seen = Exposures()
    real_replace, real_chmod = os.replace, os.chmod

    def holds_key(path: str | os.PathLike[str]) -> bool:  # a folder made private holds no key itself
        return Path(path).is_file() and KEY.encode() in Path(path).read_bytes()

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if seen.armed and holds_key(src) and stat.S_IMODE(os.stat(src).st_mode) & 0o077:
            seen.append(f"{dst} put in place with mode {stat.S_IMODE(os.stat(src).st_mode):o}")
        real_replace(src, dst)

    def chmod(path: str | os.PathLike[str], mode: int, **kw: object) -> None:
        if seen.armed and isinstance(path, (str, os.PathLike)) and holds_key(path) and mode & 0o077:
            seen.append(f"{path} chmod {mode:o}")
        real_chmod(path, mode, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(write_mod.os, "replace", replace)
    monkeypatch.setattr(write_mod.os, "chmod", chmod)
    return seen


def test_keep_api_key_over_an_existing_0644_profile(exposures: Exposures, capsys: pytest.CaptureFixture[str]) -> None:
    path = profiles.profile_path("shared")
    path.parent.mkdir(parents=True, exist_ok=True)
    old = profiles.settings_to_toml(Settings(model="/old.gguf", api_key=KEY), name="shared", include_api_key=True)
    path.write_text(old)
    os.chmod(path, 0o644)  # the user made it world-readable, and its old content holds a key
    exposures.arm()
    rc = main(["profile", "import", "--command", f"llama-server -m /m.gguf --api-key {KEY}", "--name", "shared",
               "--overwrite", "--keep-api-key"])
    assert rc == 0, capsys.readouterr()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and profiles.load_profile("shared").api_key == KEY
    assert exposures == []
    (backup,) = profiles.backups_dir().glob("shared.*.toml")
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600 and KEY in backup.read_text()


def test_profiles_without_a_key_keep_their_mode(exposures: Exposures) -> None:
    path = profiles.save_profile("plain", Settings(model="/m.gguf"))
    os.chmod(path, 0o644)
    profiles.save_profile("plain", Settings(model="/m.gguf", ctx_size=4096))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # nothing secret: the user's choice stands
    renamed = profiles.rename_profile("plain", "other")
    assert stat.S_IMODE(renamed.stat().st_mode) == 0o644


def test_export_toml_with_the_key_over_a_0644_file(tmp_path: Path, exposures: Exposures,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    profiles.save_profile("p", Settings(model="/m.gguf", api_key=KEY), include_api_key=True)
    target = tmp_path / "out.toml"
    target.write_text("# something the user had\n")
    os.chmod(target, 0o644)
    exposures.arm()
    assert main(["profile", "export", "p", "--toml", str(target), "--include-api-key"]) == 0, capsys.readouterr()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and KEY in target.read_text()
    assert exposures == []
    assert (tmp_path / "out.toml.bak").read_text() == "# something the user had\n"
