"""`mtp-tune tune` without a server (issue 21): every bad value is refused before anything starts,
the budget and --fixed/--axis spellings, the workload parser, a record's round trip through the
resumable store, and the Markdown report rendered from records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tui.cli import main
from tui.core.tune.args import UsageError, axis_values, fixed_tokens, parse_budget
from tui.core.tune.space import Floors
from tui.core.lab.journal import open_journal
from tui.core.lab.trial import Samples, Trial
from tui.core.tune.result import ReportFacts, build_result, render_report, settings_text, tune_break_even
from tui.core.tune.workload import WorkloadError, parse_workload, shape


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """A --server-bin that leaves a marker if anything runs it, and the provisioner and the launcher
    replaced by recorders: a refused command must reach none of them."""
    marker = tmp_path / "ran"
    fake = tmp_path / "llama-server"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\n")
    fake.chmod(0o755)
    calls: list[str] = []

    def refuse(*a: Any, **kw: Any) -> Any:
        calls.append("called")
        raise AssertionError("a server step was reached")

    monkeypatch.setattr("tui.core.server.provision.ensure_server", refuse)
    monkeypatch.setattr("tui.core.lab.launcher.SupervisorLauncher.launch", refuse)
    return {"bin": str(fake), "marker": marker, "calls": calls}


def tune(no_launch: dict[str, Any], *argv: str) -> int:
    return main(["tune", *argv, "--server-bin", no_launch["bin"]])


@pytest.mark.parametrize("argv, said", [
    (["--workload", "lots"], "not a suite"),
    (["--workload", "12k"], "not a suite"),
    (["--workload", "100:0"], "--workload '100:0'"),
    (["--workload", "abc:def"], "whole token counts"),
    (["--workload", "/nonexistent/suite.toml"], "--workload /nonexistent/suite.toml"),
    (["--workload", "64:32", "--kv-floor", "q9"], "--kv-floor q9: not a KV cache type"),
    (["--workload", "64:32", "--draft-kv-floor", "int8"], "--draft-kv-floor int8"),
    (["--workload", "64:32", "-c", "abc"], "mtp-tune: ctx-size: 'abc' is not a whole number"),
    (["--workload", "64:32", "-ub", "-5"], "mtp-tune: ubatch-size: -5 is below 1"),
    (["--workload", "64:32", "--budget", "soon"], "--budget 'soon'"),
    (["--workload", "64:32", "--budget", "0m"], "more than zero"),
    (["--workload", "64:32", "--gpus", "nonsense-gpu"], "nonsense-gpu"),
    (["--workload", "64:32", "--axis", "ubatch=big"], "not a whole number"),
    (["--workload", "64:32", "--axis", "kv=q4_0"], "below the floor q8_0"),
    (["--workload", "64:32", "--axis", "speed=1,2"], "unknown axis 'speed'"),
    (["--workload", "64:32", "--fixed", "ubatch"], "write NAME=VALUE"),
    (["--workload", "64:32", "--fixed", "frobnicate=3"], "neither an axis"),
    (["--workload", "64:32", "--fixed", "ubatch=-3"], "mtp-tune: ubatch-size: -3 is below 1"),
    (["--workload", "64:32", "--min-ctx", "-1"], "--min-ctx -1"),
    (["--workload", "64:32", "--max-kld", "0.05", "--kv-floor", "q8_0"], "--max-kld) measures the main KV types instead "
                                                                         "of a floor (--kv-floor): give one of them"),
    (["--workload", "64:32", "--max-kld", "lots"], "--max-kld 'lots': give a mean KL divergence above 0, e.g. 0.05"),
    (["--workload", "64:32", "--max-kld", "0"], "--max-kld '0': give a mean KL divergence above 0"),
    (["--workload", "64:32", "--max-kld", "nan"], "--max-kld 'nan'"),
    (["--workload", "64:32", "--max-kld", "-0.1"], "--max-kld '-0.1'"),
    (["--workload", "64:32", "--axis", "kv=q8_0/q3"], "--axis kv: 'q3' is not a KV cache type"),
    (["--workload", "64:32", "--ref", "/nonexistent/ref.gguf"], "--ref /nonexistent/ref.gguf: no such file."),
    ([], "tune needs --workload"),
])
def test_bad_values_are_refused_before_any_server_starts(no_launch: dict[str, Any], tiny_models: dict[str, Path],
                                                         capsys: pytest.CaptureFixture[str], argv: list[str],
                                                         said: str) -> None:
    rc = tune(no_launch, "-m", str(tiny_models["tiny-mtp"]), *argv)
    err = capsys.readouterr().err
    assert rc == 2 and said in err, err
    assert "Traceback" not in err
    assert no_launch["calls"] == [] and not no_launch["marker"].exists()


def test_files_of_another_model_are_refused_in_one_sentence(no_launch: dict[str, Any], tiny_models: dict[str, Path],
                                                           tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Several -m (or a folder) are quants of one model: a file of another tokenizer is refused before
    anything starts, and so is a folder with no model in it or a Hub model beside them."""
    from dataclasses import replace

    from tui.core.demo.tiny_model import PRESETS, write_tiny_model

    other = write_tiny_model(tmp_path / "other.gguf", replace(PRESETS["tiny-mtp"], n_merges=50))
    (tmp_path / "empty").mkdir()
    mine, q8 = str(tiny_models["tiny-mtp"]), str(tiny_models["tiny-mtp-q8_0"])
    for argv, said in ((["-m", mine, "-m", str(other)], f"--ref {mine}: its tokenizer"),
                       (["-m", q8, "--ref", str(other)], "is not that of tiny-mtp-q8_0.gguf"),
                       (["-m", str(tmp_path / "empty")], "holds no model GGUF"),
                       (["-m", mine, "-m", q8, "-hf", "org/x-GGUF"], "leave out -hf and -mu")):
        rc = tune(no_launch, *argv, "--workload", "64:32", "--max-kld", "0.05")
        err = capsys.readouterr().err
        assert rc == 2 and said in err and err.count("\n") == 1, err  # one sentence, one line
    assert no_launch["calls"] == [] and not no_launch["marker"].exists()


def test_a_fixed_flag_the_model_cannot_run_and_a_missing_model_are_refused_too(
        no_launch: dict[str, Any], tiny_models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert tune(no_launch, "-m", str(tiny_models["tiny-nomtp"]), "--fixed", "mtp=on", "--workload", "64:32") == 2
    assert "no MTP (NextN) layers" in capsys.readouterr().err
    assert tune(no_launch, "-m", str(tiny_models["tiny-mtp"]), "-c", "256", "--workload", "1000:100") == 2
    assert "cannot hold the workload's longest request" in capsys.readouterr().err
    assert tune(no_launch, "-m", str(tmp_path / "missing.gguf"), "--workload", "64:32") == 2
    assert "does not exist" in capsys.readouterr().err
    assert tune(no_launch, "--workload", "64:32") == 2
    assert "tune needs a model: `mtp-tune tune -m FILE.gguf | -hf REPO[:QUANT]" in capsys.readouterr().err
    assert no_launch["calls"] == [] and not no_launch["marker"].exists()


def test_an_hf_repo_that_cannot_be_read_is_refused_in_one_sentence(no_launch: dict[str, Any], hub: Any,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Over the loopback Hub (HF_ENDPOINT; the real Hub is never reached): a missing repo is named,
    nothing is launched."""
    assert tune(no_launch, "-hf", "org/missing-GGUF", "--workload", "64:32") == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the progress line ("listing ...")
    assert "Traceback" not in err and last.startswith("mtp-tune: org/missing-GGUF was not found") and "(404)" in last, err
    assert no_launch["calls"] == [] and not no_launch["marker"].exists()


def test_budget_spellings() -> None:
    assert parse_budget(None) is None
    assert parse_budget("30m") == 1800 and parse_budget("30min") == 1800 and parse_budget("45") == 2700
    assert parse_budget("1h30m") == 5400 and parse_budget("90s") == 90 and parse_budget("1.5h") == 5400
    assert parse_budget("2m30s") == 150 and parse_budget(" 10M ") == 600
    for bad in ("", "m", "30x", "-5m", "1h-2m", "0"):
        with pytest.raises(UsageError):
            parse_budget(bad)


def test_fixed_and_axis_spellings() -> None:
    assert fixed_tokens(["ubatch=512", "kv=q8_0", "mtp=off", "draft-n-max=2"]) == [
        "-ub", "512", "-ctk", "q8_0", "-ctv", "q8_0", "--spec-type", "none", "--spec-draft-n-max", "2"]
    assert fixed_tokens(["mtp=on", "ctx-size=8192", "n-gpu-layers=99"]) == [
        "--spec-type", "draft-mtp", "--ctx-size", "8192", "--gpu-layers", "99"]
    with pytest.raises(UsageError, match="is a switch"):
        fixed_tokens(["metrics=1"])
    vals = axis_values(["ubatch=256,512", "draft-kv=q8_0,q4_0", "flash-attn=on,off"], Floors())
    assert vals == {"ubatch": (256, 512), "draft-kv": ("q8_0", "q4_0"), "flash-attn": ("on", "off")}
    with pytest.raises(UsageError, match="each value once"):
        axis_values(["ubatch=256,256"], Floors())
    with pytest.raises(UsageError, match="below the floor q8_0"):
        axis_values(["draft-kv=q4_0"], Floors(draft_kv="q8_0"))


def test_workload_spellings(tmp_path: Path) -> None:
    w = parse_workload("12k:800")
    assert w.shape is not None and (w.shape.in_tokens, w.shape.out_tokens, w.shape.longest) == (12000, 800, 12800)
    assert w.exact_output and w.first_decode() is None
    tasks = parse_workload("tasks")
    assert tasks.suite is not None and tasks.suite.name == "tasks" and not tasks.exact_output
    assert tasks.first_decode() is not None and tasks.first_decode().name == "long_code_review"  # type: ignore[union-attr]
    f = tmp_path / "s.toml"
    f.write_text('[[prompts]]\nname = "a"\nprompt = "hi"\n')
    ident = parse_workload(str(f)).identity()
    f.write_text('[[prompts]]\nname = "a"\nprompt = "hello"\n')
    assert parse_workload(str(f)).identity() != ident  # an edited suite is a new tune
    with pytest.raises(WorkloadError):
        parse_workload("")


def rec(n: int, mtp: bool, ub: int, e2e: list[float], *, status: str = "ok", reason: str | None = None,
        pp: float = 1000.0, tg: float = 50.0, acc: float | None = None) -> Trial:
    values: dict[str, Any] = {"mtp": mtp, "ubatch": ub} | ({"draft-kv": "q4_0"} if mtp else {})
    samples = Samples([pp] * len(e2e), [tg] * len(e2e), [acc] * len(e2e), list(e2e)) if e2e else None
    return Trial(f"k{n}", status, number=n, memory_key=f"m{n}", values=values, settings={"ubatch_size": ub}, mtp=mtp,  # type: ignore[arg-type]
                 stage="start" if n < 3 else "walk ubatch", reason=reason,
                 plan={"risk": "ok", "message": "exact (llama.cpp): CUDA0 needs 900 MiB"}, vram_mib=900.0,
                 samples=samples, launches=1 if e2e else 0)


def records() -> list[Trial]:
    return [rec(1, False, 512, [10.0, 10.2, 10.1, 10.0], pp=2000, tg=40),
            rec(2, True, 512, [8.0, 8.1, 8.05, 8.02], pp=1800, tg=55, acc=0.7),
            rec(3, True, 1024, [], status="predicted_oom", reason="the planner predicts an OOM: CUDA0 needs 7000 MiB"),
            rec(4, False, 1024, [12.0, 12.3], status="eliminated", reason="slower than #1")]


def test_the_report_lists_every_trial_the_best_beside_the_best_mtp_off_and_the_break_even() -> None:
    wl = shape(2000, 500)
    res = build_result(records(), (2, 4), 3, 8, "converged", 42.0, wl)
    assert res.best is not None and res.best.number == 2 and res.best_mtp_off is not None and res.best_mtp_off.number == 1
    md = render_report(res, ReportFacts("m.gguf", wl, "rtx3060-laptop-6g", "--model m.gguf -c 2560",
                                        [("mtp", (False, True)), ("ubatch", (512, 1024))], 2560, "tune-abc",
                                        ab_note="no A/B (--ab-passes 0).", launches=4, launches_total=9))
    assert md.startswith("# mtp-tune tune: m.gguf")
    assert "Searched: mtp off, on; ubatch 512, 1024." in md and "`--model m.gguf -c 2560`" in md
    assert "after 4 launches this run (9 over every run of this tune), 3 of them for the search" in md
    side = md.split("## MTP on against off")[0]
    assert "| best | 2 | on | ub=512 dkv=q4_0 | 8.04 [8.00-8.10] | 1.2% |" in side
    assert "| best MTP off | 1 | off | ub=512 | 10.1 [10.0-10.2] | 2.0% |" in side
    trials = md.split("## Trials")[1]
    assert trials.count("\n| ") == 5  # the header and one row per trial
    assert "| 3 | on | ub=1024 dkv=q4_0 | walk ubatch | ok (exact) 900 MiB | predicted_oom |" in trials
    assert "the planner predicts an OOM: CUDA0 needs 7000 MiB" in trials and "slower than #1" in trials
    assert "| 2 **best** |" in trials and "| 1 best off |" in trials
    be = tune_break_even(res, wl, None)
    assert be is not None and be.wins == "above" and f"{be.tokens:.0f} tokens" in md  # from the medians without an A/B
    assert "the tune's medians" in md and "No A/B (--ab-passes 0)." in md
    assert settings_text(Trial("k", number=9, memory_key="m", values={"mtp": True, "draft-n-max": 2}, mtp=True, stage="t",
                               fit_target=1536)) == \
        "n-max=2 fitt=1536"


def test_a_record_survives_the_resumable_journal(tmp_path: Path) -> None:
    j = open_journal("tune", "tune-x", {}, tmp_path)
    for r in records():
        j.record(r)
    j.save()
    back = open_journal("tune", "tune-x", {}, tmp_path)
    assert list(back.trials.values()) == records()
    for b, r in zip(back.trials.values(), records()):
        assert (b.median(), b.median("pp_tps"), b.median("acceptance")) == \
            (r.median(), r.median("pp_tps"), r.median("acceptance"))
