"""`mtp-tune ab` against the real llama-server: two copies of the built binary stand in for two llama.cpp
builds, one pass a side on a tiny model. The answer names both binaries (and their build), each pass ran
on its own side's binary, and the verdict is computed by the one noise rule (one pass a side: the noise
is unknown, so it must say inconclusive rather than guess)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.test_tuning_ab_real import SUITE as MTP_AB_SUITE
from tui.cli import main
from tui.core.lab.launcher import SupervisorLauncher
from tui.core.results.store import Store

pytestmark = pytest.mark.timeout(240)

SUITE = MTP_AB_SUITE.replace("n_predict = 96", "n_predict = 8")  # the MTP on/off A/B's suite, fewer tokens


def build_copy(server_bin: Path, dest: Path) -> Path:
    """The binary and any shared library beside it (a shared build needs them; the cached one is static)."""
    dest.mkdir()
    for f in server_bin.parent.iterdir():
        if f == server_bin or ".so" in f.name or f.suffix == ".dylib":
            shutil.copy2(f, dest / f.name)
    return dest / server_bin.name


def test_two_builds_one_pass_each(server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    binaries: list[Path] = []  # which binary each launch ran, in order
    real = SupervisorLauncher.launch
    monkeypatch.setattr(SupervisorLauncher, "launch", lambda self, s, c: binaries.append(self.binary) or real(self, s, c))
    old, new = build_copy(server_bin, tmp_path / "old"), build_copy(server_bin, tmp_path / "new")
    suite = tmp_path / "mini.toml"
    suite.write_text(SUITE, encoding="utf-8")
    db = tmp_path / "results.sqlite"
    rc = main(["ab", "base", "base", "--a-bin", str(old), "--b-bin", str(new), "--passes", "1", "--suite", str(suite),
               "--db", str(db), "--json", "-m", str(tiny_models["tiny-mtp"]), "-c", "256", "-np", "1", "-t", "1"])
    out, err = capsys.readouterr()
    print(err)
    assert rc == 0, err
    got = json.loads(out)
    v = got["verdict"]
    assert v["status"] == "complete" and v["error"] is None
    assert [s["server_bin"] for s in got["sides"]] == [str(old), str(new)]
    assert {s["build"] for s in got["sides"]} == {11434}
    named = f"llama-server {old} -> {new} (both build 11434)"
    assert v["differs"] == [named] and named in v["answer"]
    # Computed by the noise rule: both sides measured once, so the noise is unknown.
    assert v["a"]["passes"] == v["b"]["passes"] == 1 and v["a"]["tg_tps"] and v["b"]["tg_tps"]
    assert v["label"] == "inconclusive" and "noise unknown" in v["answer"]
    assert [s["side"] for s in v["samples"]] == ["A", "B"] and binaries == [old, new]  # each side on its own build
    assert "launches" in err and "B pass 1/1 done" in err  # progress, with the size first, on stderr
    with Store(db) as store:
        rows = sorted(store.list_runs(), key=lambda r: r.id)
    assert [r.id for r in rows] == v["run_ids"] and [r.label.split(" ")[2] for r in rows] == ["A:", "B:"]
