"""Comparing stored runs: per-pass metrics, verdicts, workload view, MTP pairing, exports and the CLI."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from tui.cli import main as cli_main
from tui.core.probes.compare import (
    RunView,
    compare_runs,
    e2e_seconds,
    find_mtp_pair,
    render_comparison,
    workload_view,
)
from tui.core.probes.records import RequestRecord, pass_stats, summarize_run
from tui.core.probes.report import to_csv, to_markdown
from tui.core.results.store import Store

PROMPTS = ("code_python", "summarize", "translation")


def synth_requests(
    tg: list[float], pp: list[float], acc: float | None = None, *, prompt_n: int = 1000, gen: int = 513,
    n_max: int = 3, pp_kind: bool = False,
) -> list[dict[str, Any]]:
    """Requests whose per-pass TG and PP come out exactly as given (one value per pass)."""
    out = []
    seq = 0
    for rep, (t, p) in enumerate(zip(tg, pp)):
        for name in PROMPTS:
            kind = "pp" if pp_kind and name == "summarize" else "tg"
            timings: dict[str, Any] = {
                "cache_n": 0, "prompt_n": prompt_n, "prompt_ms": prompt_n / p * 1000.0, "predicted_n": gen,
                "predicted_ms": (gen - 1) / t * 1000.0, "prompt_per_second": p, "predicted_per_second": t,
            }
            delta = None
            if acc is not None:
                steps = (gen - 1) // 2
                timings["draft_n"] = steps * n_max
                timings["draft_n_accepted"] = round(steps * n_max * acc)
                delta = {
                    "spec_decode_num_drafts_total": float(steps),
                    "spec_decode_num_draft_tokens_total": float(steps * n_max),
                    "spec_decode_num_accepted_tokens_total": float(round(steps * n_max * acc)),
                }
            rec = RequestRecord(seq, name, kind, rep, 512, timings=timings, ttft_ms=100.0 + rep, wall_ms=1.0,
                                metrics_delta=delta)
            out.append(rec.to_json())
            seq += 1
    return out


def store_run(store: Store, *, mtp: bool, tg: list[float], pp: list[float], acc: float | None = None,
              settings: dict[str, Any] | None = None, status: str = "ok", suite: str = "tasks",
              n_predict: int = 512, label: str | None = None) -> int:
    settings = settings if settings is not None else {
        "model": "/m/qwen.gguf", "ubatch_size": 512, "parallel": 1, "fit_target": [],
        "spec_type": ["draft-mtp"] if mtp else [], "spec_draft_n_max": 3 if mtp else None,
        "cache_type_k_draft": "q8_0" if mtp else None, "cache_type_v_draft": "q8_0" if mtp else None, "port": 1234,
    }
    rid = store.begin_run(suite=suite, model="/m/qwen.gguf", mtp=mtp, settings=settings, label=label,
                          config={"repeat": len(tg), "n_predict": n_predict, "seed": 42, "temperature": 0.0,
                                  "ignore_eos": False, "suite": {"prompts": [{"name": n} for n in PROMPTS]}})
    reqs = synth_requests(tg, pp, acc)
    for r in reqs:
        store.add_request(rid, r)
    from tui.core.probes.records import records_from_json

    summary = summarize_run(records_from_json(reqs), list(PROMPTS))
    store.finish_run(rid, status, summary=summary, warnings=[])
    return rid


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(tmp_path / "r.sqlite") as s:
        yield s


def test_pass_stats_recover_the_constructed_speeds() -> None:
    from tui.core.probes.records import records_from_json

    recs = records_from_json(synth_requests([40.0, 41.0, 39.0], [1400.0, 1450.0, 1420.0], 0.75))
    passes = pass_stats(recs, list(PROMPTS))
    assert [round(p.tg_tps or 0, 6) for p in passes] == [40.0, 41.0, 39.0]
    assert [round(p.pp_tps or 0, 6) for p in passes] == [1400.0, 1450.0, 1420.0]
    assert all(p.complete for p in passes)
    assert passes[0].acceptance == pytest.approx(0.75, abs=0.01)
    assert passes[0].mean_accept_len == pytest.approx(1 + 0.75 * 3, abs=0.02)
    s = summarize_run(recs, list(PROMPTS))
    assert s["tg_tps_median"] == pytest.approx(40.0) and s["pp_tps_median"] == pytest.approx(1420.0)
    assert s["tg_tps"]["min"] == pytest.approx(39.0) and s["tg_tps"]["max"] == pytest.approx(41.0)
    assert s["n_requests"] == 9 and s["n_passes"] == 3


def test_incomplete_pass_is_left_out_of_the_summary() -> None:
    from tui.core.probes.records import records_from_json

    reqs = synth_requests([40.0, 41.0, 10.0], [1400.0, 1450.0, 100.0])[:-1]  # pass 3 lacks one prompt
    s = summarize_run(records_from_json(reqs), list(PROMPTS))
    assert s["n_passes"] == 2 and s["tg_tps"]["min"] == pytest.approx(40.0)


def test_pp_comes_from_pp_prompts_when_the_suite_has_them() -> None:
    from tui.core.probes.records import records_from_json

    reqs = synth_requests([40.0], [1000.0], pp_kind=True)
    for r in reqs:
        if r["kind"] == "pp":
            r["timings"]["prompt_ms"] = r["timings"]["prompt_n"] / 3000.0 * 1000.0
    s = summarize_run(records_from_json(reqs), list(PROMPTS))
    assert s["pp_source"] == "pp" and s["pp_tps_median"] == pytest.approx(3000.0)


def test_mtp_on_vs_off_with_a_real_difference(store: Store) -> None:
    off = store_run(store, mtp=False, tg=[31.0, 31.2, 30.9], pp=[1461.0, 1455.0, 1470.0])
    on = store_run(store, mtp=True, tg=[41.3, 41.0, 41.5], pp=[470.0, 480.0, 465.0], acc=0.78)
    c = compare_runs(RunView.from_row(store.require(off)), RunView.from_row(store.require(on)))
    by = {m.key: m for m in c.metrics}
    assert by["tg_tps"].verdict.label == "better"
    assert by["tg_tps"].verdict.rel_change == pytest.approx(41.3 / 31.0 - 1)
    assert by["pp_tps"].verdict.label == "worse"
    assert by["acceptance"].a is None and by["acceptance"].verdict.label == "inconclusive"
    # n-max 3 is the default: the same server as leaving it out, so not a change.
    assert {x.key for x in c.changed} == {"spec_type", "cache_type_k_draft", "cache_type_v_draft"}
    assert "port" not in {x.key for x in c.changed}
    assert [p["prompt"] for p in c.prompts] == list(PROMPTS)
    assert not [w for w in c.warnings if w.code in ("spread_exceeds_difference", "not_paired")]
    text = render_comparison(c)
    assert "TG (generation)" in text and "B better" in text and "B worse" in text and "+33.2%" in text
    assert "changed: --spec-type (not given) -> draft-mtp, --spec-draft-type-k (default f16) -> q8_0" in text


def test_noise_larger_than_difference_is_flagged(store: Store) -> None:
    a = store_run(store, mtp=False, tg=[30.0, 36.0, 33.0], pp=[1000.0, 1010.0, 990.0])
    b = store_run(store, mtp=True, tg=[34.0, 31.0, 37.0], pp=[1000.0, 1005.0, 995.0], acc=0.5)
    c = compare_runs(RunView.from_row(store.require(a)), RunView.from_row(store.require(b)))
    tg = next(m for m in c.metrics if m.key == "tg_tps")
    assert tg.verdict.label == "same"
    assert any(w.code == "spread_exceeds_difference" and "TG" in w.message for w in c.warnings)


def test_workload_view_answers_is_mtp_worth_it(store: Store) -> None:
    off = RunView.from_row(store.require(store_run(store, mtp=False, tg=[31.0, 31.2, 30.9], pp=[3277.0, 3270.0, 3280.0])))
    on = RunView.from_row(store.require(store_run(store, mtp=True, tg=[41.3, 41.0, 41.5], pp=[1600.0, 1590.0, 1610.0], acc=0.78)))
    # Agentic coding: 12k in, 800 out. Off: 12000/3277 + 800/31 = 29.5 s; on: 7.5 + 19.4 = 26.9 s.
    wl = workload_view(off, on, 12_000, 800)
    assert wl.a is not None and wl.b is not None
    assert wl.a.median == pytest.approx(12_000 / 3277.0 + 800 / 31.0)
    assert wl.b.median == pytest.approx(12_000 / 1600.0 + 800 / 41.3)
    assert wl.verdict.label == "better"
    assert "MTP is worth it for this workload" in wl.answer
    assert wl.break_even_output is not None
    be = wl.break_even_output
    assert e2e_seconds(12_000, round(be), 3277.0, 31.0) == pytest.approx(e2e_seconds(12_000, round(be), 1600.0, 41.3), rel=0.01)
    # A prompt-heavy workload with short answers: MTP costs time.
    wl2 = workload_view(off, on, 12_000, 50)
    assert wl2.verdict.label == "worse" and "MTP costs time" in wl2.answer


def test_workload_with_pp_from_other_runs(store: Store) -> None:
    tg_off = RunView.from_row(store.require(store_run(store, mtp=False, tg=[30.0, 30.5, 30.2], pp=[100.0] * 3)))
    tg_on = RunView.from_row(store.require(store_run(store, mtp=True, tg=[40.0, 40.2, 40.4], pp=[90.0] * 3, acc=0.7)))
    pp_off = RunView.from_row(store.require(store_run(store, mtp=False, tg=[5.0] * 3, pp=[3000.0, 3010.0, 2990.0])))
    pp_on = RunView.from_row(store.require(store_run(store, mtp=True, tg=[5.0] * 3, pp=[1500.0, 1510.0, 1490.0], acc=0.7)))
    c = compare_runs(tg_off, tg_on, workload=(8000, 600), pp_a=pp_off, pp_b=pp_on)
    assert c.workload is not None and c.workload.a is not None
    # Per pass: PP of pass i of the PP run with TG of pass i of the TG run; then the median.
    per_pass = sorted(8000 / p + 600 / t for p, t in zip([3000.0, 3010.0, 2990.0], [30.0, 30.5, 30.2]))
    assert c.workload.a.median == pytest.approx(per_pass[1])


def test_single_pass_runs_are_inconclusive(store: Store) -> None:
    a = store_run(store, mtp=False, tg=[30.0], pp=[1000.0])
    b = store_run(store, mtp=True, tg=[60.0], pp=[500.0], acc=0.8)
    c = compare_runs(RunView.from_row(store.require(a)), RunView.from_row(store.require(b)), workload=(1000, 500))
    assert all(m.verdict.label == "inconclusive" for m in c.metrics)
    assert c.workload is not None and "Inconclusive" in c.workload.answer


def test_find_mtp_pair_needs_everything_else_equal(store: Store) -> None:
    off = store_run(store, mtp=False, tg=[30.0] * 3, pp=[1000.0] * 3)
    other_ub = store_run(store, mtp=True, tg=[40.0] * 3, pp=[900.0] * 3, acc=0.7,
                         settings={"model": "/m/qwen.gguf", "ubatch_size": 1024, "spec_type": ["draft-mtp"]})
    other_np = store_run(store, mtp=True, tg=[40.0] * 3, pp=[900.0] * 3, acc=0.7, n_predict=128)
    failed = store_run(store, mtp=True, tg=[40.0] * 3, pp=[900.0] * 3, acc=0.7, status="failed")
    assert find_mtp_pair(store, off) is None
    on = store_run(store, mtp=True, tg=[40.0] * 3, pp=[900.0] * 3, acc=0.7)
    assert find_mtp_pair(store, off) == on
    assert find_mtp_pair(store, on) == off
    assert {other_ub, other_np, failed}.isdisjoint({find_mtp_pair(store, off)})


def test_a_default_typed_out_is_not_a_change_nor_breaks_a_pair(store: Store) -> None:
    """One run stored with llama-server's defaults left out, one with them typed out and MTP on: one
    change (MTP), no "things differ" warning, and they pair as MTP on/off."""
    off = store_run(store, mtp=False, tg=[30.0] * 3, pp=[1000.0] * 3,
                    settings={"model": "/m/qwen.gguf", "ubatch_size": 512, "port": 1})
    on = store_run(store, mtp=True, tg=[40.0] * 3, pp=[900.0] * 3, acc=0.7, settings={
        "model": "/m/qwen.gguf", "ubatch_size": 512, "batch_size": 2048, "ctx_size": 0, "flash_attn": "auto",
        "fit": True, "fit_target": [], "cache_type_k": "f16", "cpu_moe": False, "spec_type": ["draft-mtp"],
        "spec_draft_n_max": 3, "port": 2})
    c = compare_runs(RunView.from_row(store.require(off)), RunView.from_row(store.require(on)))
    assert [str(x) for x in c.changed] == ["--spec-type (not given) -> draft-mtp"]
    assert not [w for w in c.warnings if w.code == "not_paired"]
    assert c.to_json()["changed"] == {"spec_type": {"flag": "--spec-type", "a": "(not given)", "b": "draft-mtp"}}
    assert find_mtp_pair(store, off) == on and find_mtp_pair(store, on) == off


def test_markdown_export_is_a_tuning_table(store: Store) -> None:
    off = store_run(store, mtp=False, tg=[31.0, 31.2, 30.9], pp=[1461.0, 1455.0, 1470.0])
    on = store_run(store, mtp=True, tg=[41.3, 41.0, 41.5], pp=[470.0, 480.0, 465.0], acc=0.78, label="ub512")
    md = to_markdown([store.require(off), store.require(on)])
    lines = md.splitlines()
    assert lines[0] == "| run | status | MTP | ubatch | draft KV | fit-target | TG t/s | acceptance | PP t/s | warnings |"
    assert lines[2].startswith(f"| #{off} | ok | off | 512 | - | default | 31.0 [30.9-31.2] | - | 1461.0 [1455.0-1470.0] |")
    assert lines[3].startswith(f"| #{on} ub512 | ok | on (n-max 3) | 512 | q8_0 | default | 41.3 [41.0-41.5] |")
    assert "78.0%" in lines[3]
    assert "median [min-max] over 3 passes" in md


def test_csv_and_json_export(store: Store) -> None:
    a = store_run(store, mtp=True, tg=[41.3, 41.0, 41.5], pp=[470.0, 480.0, 465.0], acc=0.78)
    rows = list(csv.DictReader(io.StringIO(to_csv([store.require(a)]))))
    assert rows[0]["tg_median"] == "41.30" and rows[0]["tg_min"] == "41.00" and rows[0]["mtp"] == "1"
    assert rows[0]["draft_kv"] == "q8_0" and rows[0]["spec_draft_n_max"] == "3"


def test_runs_cli_list_show_compare_export(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    off = store_run(store, mtp=False, tg=[31.0, 31.2, 30.9], pp=[1461.0, 1455.0, 1470.0])
    on = store_run(store, mtp=True, tg=[41.3, 41.0, 41.5], pp=[470.0, 480.0, 465.0], acc=0.78)
    db = str(store.path)
    assert cli_main(["runs", "--db", db, "list"]) == 0
    out = capsys.readouterr().out
    assert f"{on:>4}" in out and "41.3 [41.0-41.5]" in out and "MTP on (n-max 3)" in out
    assert cli_main(["runs", "--db", db, "show", str(on)]) == 0
    assert "acceptance 0.7" in capsys.readouterr().out
    assert cli_main(["runs", "--db", db, "compare", str(on), "--mtp-pair", "--workload", "12000,800"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"A = #{off} MTP off   B = #{on} MTP on (n-max 3)")
    assert "workload: 12000 tokens in, 800 out" in out
    assert cli_main(["runs", "--db", db, "compare", str(off), str(on), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {m["metric"] for m in data["metrics"]} >= {"tg_tps", "pp_tps", "acceptance"}
    assert cli_main(["runs", "--db", db, "export", str(off), str(on), "--format", "md"]) == 0
    assert capsys.readouterr().out.startswith("| run | status | MTP |")
    assert cli_main(["runs", "--db", db, "export", str(off), "--format", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported[0]["run_id"] == off and len(exported[0]["requests"]) == 9
    assert exported[0]["requests"][0]["timings"]["prompt_n"] == 1000


def test_runs_cli_errors_are_one_paragraph(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(store.path)
    assert cli_main(["runs", "--db", db, "show", "999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mtp-tune: no run 999") and "Traceback" not in err
    assert cli_main(["runs", "--db", db, "compare", "1", "2", "--workload", "lots"]) == 2
    assert "--workload 'lots'" in capsys.readouterr().err


def test_more_than_one_change_is_flagged(store: Store) -> None:
    base = {"model": "/m/qwen.gguf", "ubatch_size": 512, "spec_type": []}
    a = store_run(store, mtp=False, tg=[30.0] * 3, pp=[1000.0] * 3, settings=base)
    b = store_run(store, mtp=True, tg=[40.0] * 3, pp=[900.0] * 3, acc=0.7,
                  settings={**base, "ubatch_size": 256, "spec_type": ["draft-mtp"], "spec_draft_n_max": 2})
    c = compare_runs(RunView.from_row(store.require(a)), RunView.from_row(store.require(b)))
    (w,) = [w for w in c.warnings if w.code == "not_paired"]
    assert "2 things differ (--ubatch-size, MTP on/off)" in w.message
