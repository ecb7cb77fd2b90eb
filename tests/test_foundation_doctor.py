"""`mtp-tune doctor`: finds the real server and reports what silently changes results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "doctor", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_doctor_json_reports_real_server(server_bin: Path, tmp_path: Path) -> None:
    env = dict(os.environ, MTP_TUNE_LLAMA_SERVER=str(server_bin))
    out = _doctor(env, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["server"]["path"] == str(server_bin)
    assert data["server"]["source"] == "env"
    assert data["server"]["version"].startswith("b") or data["server"]["version"] == "unknown"
    assert data["server"]["supports_draft_mtp"] is True
    assert data["server"]["capabilities"]["fit_target"] is True
    assert isinstance(data["gpus"], list) and isinstance(data["warnings"], list)
    assert data["host"]["ram_total_mib"] > 0


def test_doctor_names_llama_perplexity_beside_the_server_and_a_build_mismatch(server_bin: Path, tmp_path: Path) -> None:
    from tui.core.server import provision

    env = dict(os.environ, MTP_TUNE_LLAMA_SERVER=str(server_bin))
    env.pop(provision.ENV_PERPLEXITY, None)
    data = json.loads(_doctor(env, "--json").stdout)
    beside = provision.companion_for(server_bin, provision.PERPLEXITY_NAME)
    assert beside is not None and data["perplexity"]["path"] == str(beside.path)
    assert data["perplexity"]["version"] == data["server"]["version"] and data["perplexity"]["same_build_as_server"] is True
    assert "perplexity   : " + str(beside.path) in _doctor(env).stdout
    other = tmp_path / "llama-perplexity"
    other.write_text("#!/bin/sh\necho 'version: 4242 (abc1234)' >&2\n")
    other.chmod(0o755)
    data = json.loads(_doctor(env, "--json", "--perplexity-bin", str(other)).stdout)
    assert data["perplexity"]["build_number"] == 4242 and data["perplexity"]["same_build_as_server"] is False
    assert any("build 4242" in w and "--perplexity-bin" in w for w in data["warnings"]), data["warnings"]


def test_doctor_flags_config_ini_and_env(server_bin: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "xdg" / "llama.cpp" / "config.ini"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("[*]\nctx-size = 8192\nflash-attn = on\n")
    env = dict(os.environ, MTP_TUNE_LLAMA_SERVER=str(server_bin), XDG_CONFIG_HOME=str(tmp_path / "xdg"),
               LLAMA_ARG_CTX_SIZE="1024", LLAMA_API_KEY="secret-key")
    data = json.loads(_doctor(env, "--json").stdout)
    assert data["llama_config_files"] == [{"path": str(cfg), "keys": ["ctx-size", "flash-attn"]}]
    assert data["llama_env"]["LLAMA_ARG_CTX_SIZE"] == "1024"
    assert data["llama_env"]["LLAMA_API_KEY"] == "***"
    text = " ".join(data["warnings"])
    assert str(cfg) in text and "LLAMA_ARG_CTX_SIZE" in text
    assert "secret-key" not in json.dumps(data)
    human = _doctor(env)
    assert "draft-mtp    : yes" in human.stdout and "config.ini" in human.stdout


def test_doctor_without_server_says_what_to_do(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(Path(sys.executable).parent), MTP_TUNE_CACHE_DIR=str(tmp_path / "empty"))
    env.pop("MTP_TUNE_LLAMA_SERVER", None)
    out = _doctor(env, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["server"]["path"] is None and data["server"]["supports_draft_mtp"] is False
    assert any("doctor --build" in w for w in data["warnings"])


def test_doctor_bad_server_bin_is_one_paragraph(tmp_path: Path) -> None:
    out = _doctor(dict(os.environ), "--server-bin", str(tmp_path / "nope"), "--json")
    data = json.loads(out.stdout)
    assert any("--server-bin" in w for w in data["warnings"])
    assert "Traceback" not in out.stderr


def test_version_flag_and_doctor_show_the_package_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tui
    from tui import package_version

    want = package_version()
    assert want and want[0].isdigit()
    out = subprocess.run([sys.executable, "-m", "tui.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"mtp-tune {want}", out.stderr
    env = dict(os.environ, PATH=str(Path(sys.executable).parent), MTP_TUNE_CACHE_DIR=str(tmp_path / "empty"))
    env.pop("MTP_TUNE_LLAMA_SERVER", None)
    assert json.loads(_doctor(env, "--json").stdout)["version"] == want
    assert f"mtp-tune     : {want}" in _doctor(env).stdout.splitlines()[0]
    # a source checkout without installed metadata falls back to tui.__version__
    from importlib import metadata

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert package_version() == tui.__version__
