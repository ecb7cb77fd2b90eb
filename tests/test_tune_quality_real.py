"""`mtp-tune tune --max-kld` on the real llama-server and llama-perplexity (issue 32): two quants of the
random-weight tiny model (its next-token distribution is broad enough for quantization to show; the
bigram one scores ~1e-6 whatever the type), MTP on, the main K/V types searched. Before any launch
llama-perplexity measures each file and each type against the f16 reference; what is over the budget
is not searched and said with its figure, every trial carries its KLD, and the same command again
measures nothing. Small on purpose: -c 256, a 64:32 workload, no A/B, a 3-minute budget.

The budget sits an order of magnitude from every figure it decides (measured on this build: q8_0 K/V
1e-6, q8_0/q4_0 3e-5, q4_0 6e-5, the q8_0 weights 5e-4), so llama.cpp's noise cannot move a verdict."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tui.cli import main
from tui.core.demo.tiny_model import PRESETS, write_tiny_model
from tui.core.server import provision

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MAX_KLD = "0.00001"
FLAGS = ["-c", "256", "-t", "2", "-b", "512", "-ub", "256", "-fa", "auto", "--spec-draft-n-max", "3", "-ctkd", "f16",
         "-ctvd", "f16", "--fixed", "mtp=on", "--axis", "kv=f16,q8_0,q8_0/q4_0,q4_0", "--workload", "64:32",
         "--gpus", "cpu", "--ab-passes", "0", "--budget", "3m"]


def test_a_tune_within_a_kld_budget_measures_filters_and_carries_the_figures(
        server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    found = provision.companion_for(server_bin, provision.PERPLEXITY_NAME)
    if found is None:
        pytest.fail(f"no llama-perplexity beside {server_bin} or in the cached build; `mtp-tune doctor --build` builds both")
    ref = tiny_models["tiny-mtp-random"]
    q8 = write_tiny_model(tmp_path / "random-q8_0.gguf", replace(PRESETS["tiny-mtp-random"], dtype="q8_0"))
    report = tmp_path / "tune.md"
    argv = ["tune", "-m", str(ref), "-m", str(q8), *FLAGS, "--max-kld", MAX_KLD, "--report", str(report), "--json",
            "--server-bin", str(server_bin), "--perplexity-bin", str(found.path)]

    def run() -> tuple[dict[str, Any], str]:
        rc = main(argv)
        out = capsys.readouterr()
        assert rc == 0, out.err
        return json.loads(out.out), out.err

    d, err = run()
    assert err.index("quality: measuring against tiny-mtp-random.gguf") < err.index("launch 1:")  # before any launch
    q = d["quality"]
    assert q["max_kld"] == float(MAX_KLD) and q["reference"] == str(ref)
    settings = {(Path(s["model"]).name, s["kv"]): s for s in q["settings"]}
    assert settings[("tiny-mtp-random.gguf", "f16")]["kld_mean"] == 0  # the reference against itself
    assert settings[("tiny-mtp-random.gguf", "f16")]["same_top_pct"] == 100
    over = {k for k, s in settings.items() if s["kld_mean"] > float(MAX_KLD)}
    assert over == {("tiny-mtp-random.gguf", "q8_0/q4_0"), ("tiny-mtp-random.gguf", "q4_0"),
                    ("random-q8_0.gguf", "f16")}, settings
    for kv in ("q8_0/q4_0", "q4_0"):
        assert any(n.startswith(f"{kv}: KLD ") and n.endswith(f" > 1e-05, not searched.") for n in d["notes"]), d["notes"]
    assert any(n.startswith("random-q8_0.gguf: KLD ") and "not tried" in n for n in d["notes"]), d["notes"]
    assert ("random-q8_0.gguf", "q8_0") not in settings  # a file over the budget is measured no further

    records = d["result"]["records"]
    assert records and d["result"]["best"] is not None and d["best_quality"] is not None
    for r in records:  # only what is within the budget ran, and each trial says what it costs
        s = r["settings"]
        assert s["model"] == str(ref) and (s["cache_type_k"], s["cache_type_v"]) in (("f16", "f16"), ("q8_0", "q8_0"))
        assert r["quality"]["kld_mean"] <= float(MAX_KLD) and r["quality"]["model"] == str(ref)
    md = report.read_text()
    assert "## Quality" in md and "| tiny-mtp-random.gguf | q4_0 |" in md and "Its quality cost: KLD " in md
    assert all(f"| {r['number']} " in md.split("## Trials")[1] for r in records)

    again, err2 = run()  # the same tune: every figure from the cache, every trial from its journal
    assert all(s["cached"] for s in again["quality"]["settings"]), again["quality"]["settings"]
    assert again["launches_this_run"] == 0 and "launch 1:" not in err2
    assert [r["quality"] for r in again["result"]["records"]] == [{**r["quality"], "cached": True} for r in records]
