"""`mtp-tune tune` against the real llama-server on the tiny MTP model (issue 21): a small space (MTP
on/off x 2 micro-batches x 2 draft KV types) finishes in seconds with a best, a best MTP-off and the
interleaved A/B; the report and the saved profile are written; a second run launches nothing; a
tune stopped midway continues with only what it had not measured (its suite sized once)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.supervisor_util import servers_of
from tui.cli import main
from tui.core.options.settings import Settings
from tui.core.sweep.definition import settings_key
from tui.core.lab.events import LabEvent
from tui.core.tune.run import TuneRequest, TuneRun
from tui.core.tune.workload import parse_workload

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FIXED = ["-b", "512", "-ctk", "f16", "-ctv", "f16", "-fa", "auto", "--spec-draft-n-max", "3"]
SPACE = ["--gpus", "cpu", "--axis", "ubatch=128,256", "--axis", "draft-kv=q8_0,q4_0"]
SUITE = """
name = "mini"
[[prompts]]
name = "story"
prompt = "Write a short story about a fox and a dog."
n_predict = 48
[[prompts]]
name = "code"
prompt = "Write a Python function that reverses a list."
n_predict = 32
"""


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    rc = main(["tune", *argv])
    out = capsys.readouterr()
    return rc, json.loads(out.out), out.err


def test_a_tune_answers_with_the_ab_saves_the_best_and_resumes(server_bin: Path, tiny_models: dict[str, Path],
                                                              tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              launched: list[Settings]) -> None:
    from tui.core.config.paths import config_dir

    report = tmp_path / "tune.md"
    argv = ["-m", str(tiny_models["tiny-mtp"]), *FIXED, "--workload", "64:32", *SPACE, "--ab-passes", "2",
            "--save-best", "tiny-tuned", "--report", str(report), "--json", "--server-bin", str(server_bin)]
    rc, d, err = run_cli(capsys, *argv)
    assert rc == 0, err
    res = d["result"]
    assert d["stopped"] == "converged" and d["grid_size"] == 6 and d["ctx"] == 256
    assert res["best"] is not None and res["best_mtp_off"] is not None and res["best_mtp_on"] is not None
    search = res["launches"]
    assert 2 <= search <= d["grid_size"]  # a search: at most the grid's launches (here usually fewer)
    assert d["launches_this_run"] == search + 4 == len(launched)  # and the A/B's 2 x 2 passes
    for r in res["records"]:
        assert r["plan"]["message"].startswith("exact (llama.cpp)")  # every launched candidate planned exactly
        assert r["settings"]["ctx_size"] == 256 and r["settings"]["batch_size"] == 512
    ab = d["ab"]
    assert ab["status"] == "complete" and ab["label"] in ("b_wins", "b_loses", "same", "inconclusive")
    assert (ab["a"]["name"], ab["b"]["name"]) == ("MTP off", "MTP on")
    assert ab["b"]["passes"] == ab["a"]["passes"] == 2 and ab["b"]["acceptance"]["median"] == pytest.approx(1.0)
    assert d["break_even"]["wins"] in ("above", "below", "always", "never")
    # The A/B ran the best MTP-on and the best MTP-off configurations, interleaved.
    on = next(r for r in res["records"] if r["number"] == res["best_mtp_on"])
    off = next(r for r in res["records"] if r["number"] == res["best_mtp_off"])
    ab_launches = [settings_key(s) for s in launched[-4:]]
    assert [s.mtp_enabled for s in launched[-4:]] == [False, True, False, True]
    assert ab_launches[0] == off["key"] and ab_launches[1] == on["key"]
    md = report.read_text()
    assert "## Trials" in md and "Interleaved A/B" in md and "Break-even output length" in md
    assert all(f"\n| {r['number']}" in md for r in res["records"])
    ini = (config_dir() / "presets.ini").read_text()
    assert "[tiny-tuned]" in ini and (config_dir() / "profiles" / "tiny-tuned.toml").is_file()
    best = next(r for r in res["records"] if r["number"] == res["best"])
    assert f"ubatch-size = {best['settings']['ubatch_size']}" in ini

    # The same command again: everything is known, nothing is launched, the answer is the same.
    before = len(launched)
    rc2, d2, err2 = run_cli(capsys, *argv)
    assert rc2 == 0, err2
    assert len(launched) == before and d2["launches_this_run"] == 0 and d2["tune_id"] == d["tune_id"]
    assert d2["result"]["best"] == res["best"] and d2["ab"]["samples"] == ab["samples"]
    assert all(r["resumed"] for r in d2["result"]["records"])
    assert d2["launches_total"] == d["launches_total"]


def test_an_hf_model_is_tuned_from_its_header_and_downloaded_once(server_bin: Path, tiny_models: dict[str, Path],
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 launched: list[Settings], hub: Any) -> None:
    """`tune -hf REPO:QUANT` before the model is on the disk, over the loopback Hub (HF_ENDPOINT; the
    real Hub is never reached): the space and every candidate's dry run come from the header read by
    ranges; the launches keep -hf, so the real llama-server downloads the file once and reuses it."""
    src = tiny_models["tiny-mtp"]
    hub.add_repo("org/tiny-GGUF", {"tiny-Q8_0.gguf": src})
    argv = ["-hf", "org/tiny-GGUF:Q8_0", *FIXED, "-ctkd", "f16", "-ctvd", "f16", "--workload", "64:32", "--gpus", "cpu",
            "--axis", "ubatch=128,256", "--ab-passes", "0", "--json", "--server-bin", str(server_bin)]
    rc, d, err = run_cli(capsys, *argv)
    assert rc == 0, err
    res = d["result"]
    assert d["grid_size"] == 4 and res["best"] is not None and launched
    assert all(s.hf_repo == "org/tiny-GGUF:Q8_0" and not s.model for s in launched)
    for r in res["records"]:
        if r["launches"]:
            assert r["plan"]["message"].startswith("exact (llama.cpp)"), r["plan"]
    assert any("planned from its header" in n and "downloads tiny-Q8_0.gguf" in n for n in d["notes"]), d["notes"]
    size = src.stat().st_size
    whole = [h for h in hub.hits("/blobs/") if h.method == "GET" and h.sent >= size]
    assert len(whole) == 1, [(h.range, h.sent) for h in hub.hits("/blobs/")]  # one download, then its cache


def test_a_small_budget_stops_the_tune_with_the_best_so_far(server_bin: Path, tiny_models: dict[str, Path],
                                                            tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--budget on the real server: the tune stops before a candidate that would not finish inside it,
    answers with what it measured, and leaves no server; the same command with a larger budget goes on."""
    import shutil

    model = tmp_path / "budget-tiny.gguf"
    shutil.copy(tiny_models["tiny-mtp"], model)
    argv = ["-m", str(model), *FIXED[:-2], "--workload", "64:800", "--gpus", "cpu", "--axis", "ubatch=64,128,256",
            "--axis", "draft-kv=f16,q8_0", "--axis", "draft-n-max=1,3", "--ab-passes", "0", "--json",
            "--server-bin", str(server_bin)]
    rc, d, err = run_cli(capsys, *argv, "--budget", "2s")
    assert rc == 3, err  # stopped by the budget: an answer, but not the search's last word
    res = d["result"]
    assert d["stopped"] == "budget" and res["best"] is not None, (d["stopped"], res["message"])
    assert len(res["records"]) < d["grid_size"] and res["launches"] < d["grid_size"]
    assert servers_of(model) == []
    rc2, d2, err2 = run_cli(capsys, *argv, "--budget", "10m")  # the same tune, continued
    assert rc2 == 0, err2
    assert d2["tune_id"] == d["tune_id"] and d2["stopped"] == "converged"
    assert sum(1 for r in d2["result"]["records"] if r["resumed"]) >= len([r for r in res["records"] if r["launches"]])


def test_a_stopped_tune_continues_with_what_it_had_not_measured(server_bin: Path, tiny_models: dict[str, Path],
                                                                tmp_path: Path, launched: list[Settings]) -> None:
    from tui.core.planning.devices import devices_now
    from tui.core.tune.space import Floors

    suite = tmp_path / "mini.toml"
    suite.write_text(SUITE)
    base = Settings(model=str(tiny_models["tiny-mtp"]), batch_size=512, cache_type_k="f16", cache_type_v="f16",
                    flash_attn="auto", spec_draft_n_max=3, parallel=1, threads=1)

    def request() -> TuneRequest:
        return TuneRequest(base, parse_workload(str(suite)), server_bin, Floors(),
                           {"ubatch": (128, 256), "draft-kv": ("q8_0", "q4_0")}, "cpu", ab_passes=0)

    events: list[LabEvent] = []
    first = TuneRun(request(), devices=devices_now("cpu"))

    def stop_after_two(ev: LabEvent) -> None:
        events.append(ev)
        if ev.kind == "trial" and ev.trial.measured and len([e for e in events if e.kind == "trial"]) >= 2:
            first.stop()

    first.on_event = stop_after_two
    out1 = first.run()
    assert out1.result.stopped == "cancelled" and out1.workload.label == "mini"
    assert launched[0].ctx_size == 512 and not launched[0].mtp_enabled  # the sizing launch (the suite's tokens)
    assert 40 < out1.workload.in_tokens < 200 and out1.workload.out_tokens == 40 and out1.space.ctx == 256
    kept = {r.key for r in out1.result.records[:2]}
    assert any("sized" == e.kind for e in events) and "no A/B yet" in out1.ab_note
    n1 = len(launched)

    second = TuneRun(request(), devices=devices_now("cpu"))
    assert second.tune_id == first.tune_id
    out2 = second.run()
    assert out2.result.stopped == "converged" and out2.result.best is not None
    again = [settings_key(s) for s in launched[n1:]]
    assert again and not kept & set(again)  # nothing measured before is launched again, no sizing either
    assert all(s.ctx_size == 256 for s in launched[n1:])
    assert {r.key for r in out2.result.records if r.resumed} == kept
    assert out2.launches == len(again) and out2.launches_total == n1 + len(again)


def test_ctrl_c_stops_the_server_and_keeps_what_was_finished(server_bin: Path, tiny_models: dict[str, Path],
                                                             tmp_path: Path) -> None:
    import os
    import shutil
    import signal
    import subprocess
    import sys

    model = tmp_path / "ctrl-c-tiny.gguf"
    shutil.copy(tiny_models["tiny-mtp"], model)
    p = subprocess.Popen([sys.executable, "-m", "tui.cli", "tune", "-m", str(model), *FIXED, "--workload", "64:3000",
                          *SPACE, "--server-bin", str(server_bin)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True, env=dict(os.environ), start_new_session=True)
    try:
        assert p.stderr is not None
        for line in p.stderr:  # the first candidate's launch line (the process is bounded by the test timeout)
            if "launch 1:" in line:
                break
        deadline = time.monotonic() + 60
        while not servers_of(model) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling for the child to appear, not synchronising on a duration
        assert servers_of(model), "the tune never started its server"
        os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground process group
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    assert p.returncode == 130, err
    assert "stopping; finished trials are kept" in err and "Cancelled" in out
    assert servers_of(model) == []  # no orphan
