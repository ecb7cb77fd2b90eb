"""`mtp-tune variants --exact`: every row measured by the real llama-server's own --fit dry run.

A small loopback repo (two quants of the tiny MoE model, so each dry run takes about a second) on
two simulated 1060 MiB GPUs, where fit has to move layers: each row says it is exact, shows fit's
choice, and equals `mtp-tune plan --exact -m THAT_FILE` with the same flags and KV type.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.range_server import LoopbackHub
from tui.cli import main
from tui.cli._variants_table import short_flags
from tui.core.demo.tiny_model import PRESETS, TinySpec, write_tiny_model
from tui.core.remote.variants import TIERS

pytestmark = pytest.mark.slow

REPO = "tiny/Tiny-MoE-GGUF"
FLAGS = ["--gpus", "2x1060MiB", "-np", "1", "--spec-type", "draft-mtp"]


@pytest.fixture
def hub(hub: LoopbackHub, tmp_path: Path, server_bin: Path, rpc_server_bin: Path,
        monkeypatch: pytest.MonkeyPatch) -> LoopbackHub:
    files = {"Tiny-MoE-F16.gguf": write_tiny_model(tmp_path / "Tiny-MoE-F16.gguf", PRESETS["tiny-moe-mtp"]),
             "Tiny-MoE-Q8_0.gguf": write_tiny_model(tmp_path / "Tiny-MoE-Q8_0.gguf", TinySpec(arch="qwen35moe", dtype="q8_0"))}
    monkeypatch.setenv("MTP_TUNE_LLAMA_SERVER", str(server_bin))
    hub.add_repo(REPO, files)
    hub.local = files  # type: ignore[attr-defined]
    return hub


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_exact_rows_are_llama_cpps_and_show_fits_choice(hub: LoopbackHub, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(capsys, "variants", REPO, *FLAGS, "--kv", "f16,q8_0", "--exact", "--json")
    assert rc == 0, err
    rows: list[dict[str, Any]] = json.loads(out)["rows"]
    assert len(rows) == 4 and all(r["source"] == "exact" and r["exact_reason"] == "" for r in rows), rows
    assert any(r["fit_choice"] for r in rows)  # two 1060 MiB cards: fit moves layers
    for r in rows:
        assert r["fits"] == all(d["risk"] != "oom" for d in r["devices"])
        assert r["tier"] == ("with fit" if r["fit_choice"] else "yes"), r  # every row loads; fit moves some
        rc, out, err = cli(capsys, "plan", "--exact", "--json", "-m", str(hub.local[r["file"]]),  # type: ignore[attr-defined]
                           *FLAGS, "-ctk", r["kv"], "-ctv", r["kv"])
        assert rc == 0, err
        exact = json.loads(out)["exact"]
        assert exact["status"] == "exact", exact["reason"]
        assert [d["needed_mib"] for d in r["devices"]] == [d["needed_mib"] for d in exact["plan"]["devices"]]
        fit = exact["fit"]
        assert r["fit_action"] == fit["action"]
        if fit["changed"]:
            assert r["fit_choice"] and r["fit_choice"][0] in ("-c", "-ngl", "-ts", "-ot")
        else:
            assert r["fit_choice"] == []
    rc, text, _ = cli(capsys, "variants", REPO, *FLAGS, "--kv", "f16,q8_0", "--exact")  # now from the exact cache
    assert rc == 0
    body = [ln for ln in text.splitlines() if ln.startswith("Tiny-MoE") or ln.startswith(("F16 ", "Q8_0 "))]
    assert len(body) == 4 and [ln.split("  ")[0] for ln in body] == [r["tag"] for r in rows], text  # the JSON's order
    for ln, r in zip(body, rows):
        assert re.search(rf"\s{r['tier']} \((tight, )?exact\)\s", ln), (r["tier"], ln)
    assert [r["tier"] for r in rows] == sorted((r["tier"] for r in rows), key=TIERS.index)
    for r in rows:
        if r["fit_choice"]:
            assert any(ln.rstrip().endswith(short_flags(r["fit_choice"])) for ln in body), (r["fit_choice"], text)
    assert "exact: llama.cpp's own dry run measured the row" in text
