"""The tune checks the machine before every launch (issue 21): another process on the GPU or clocks held
down by heat make a trial's numbers lie, so each trial carries what was found, the run says so as it
goes, and the report lists it. NVML is the fake `pynvml` (no GPU here); the report's PP-vs-TG plot
is text in the Markdown."""

from __future__ import annotations

import json

from dataclasses import replace
from types import SimpleNamespace

from tests.fakes.fake_gpus import FakeProcess, gpu
from tests.fakes.fake_pynvml import FakeNvml
from tests.helpers import tune_samples
from tests.test_tuning_tuner import WL, Fake, space
from tui.core.gpu import Nvml
from tui.core.tune.result import ReportFacts, TuneResult, pp_tg_plot, render_report
from tui.core.tune.machine import Machine, gpu_hygiene
from tui.core.lab.journal import Journal
from tui.core.lab.trial import Trial
from tui.core.tune.search import TuneOptions, tune


def test_every_launch_is_preceded_by_a_check_and_the_trial_keeps_what_it_found() -> None:
    fake = Fake(3)
    calls: list[int] = []

    def hygiene() -> list[str]:
        calls.append(len(fake.launched))
        return ["GPU 0 (fake): 1 other process(es) hold 900 MiB"] if len(calls) == 3 else []

    events: list[str] = []
    res = run_with(fake, replace(fake.machine(), hygiene=hygiene), events)
    launched = [r for r in res.records if r.launches]
    assert len(calls) == len(launched) and calls == sorted(calls)  # once per candidate, before its launch
    dirty = [r for r in res.records if r.warnings]
    assert len(dirty) == 1 and dirty[0] is launched[2] and "900 MiB" in dirty[0].warnings[0]
    assert any(e.startswith(f"before #{dirty[0].number}: GPU 0 (fake)") for e in events)
    j = Journal("tune", "tune-x", {})
    j.record(dirty[0])
    again = Journal.from_json(json.loads(json.dumps(j.to_json()))).trials[dirty[0].key]  # kept in the resumable journal
    assert again.warnings == dirty[0].warnings
    md = render_report(res, ReportFacts("m.gguf", WL, hygiene_checked=True))
    assert f"- #{dirty[0].number}: GPU 0 (fake): 1 other process(es) hold 900 MiB" in md


def run_with(fake: Fake, machine: Machine, events: list[str]) -> TuneResult:
    return tune(space(), WL, machine, TuneOptions(), on_event=lambda ev: events.append(ev.message))


def test_a_broken_check_is_a_warning_not_a_stopped_tune() -> None:
    fake = Fake(3)

    def broken() -> list[str]:
        raise RuntimeError("NVML went away")

    res = run_with(fake, replace(fake.machine(), hygiene=broken), [])
    assert res.best is not None
    assert all(r.warnings == ["the machine's hygiene could not be checked: NVML went away"]
               for r in res.records if r.launches)


def test_gpu_hygiene_names_foreign_processes_and_throttling_and_skips_simulated_gpus() -> None:
    fake = FakeNvml([gpu(0, name="NVIDIA GeForce RTX 3060 Laptop GPU", compute=[FakeProcess(777, 1200, "python3")],
                         temp_c=91, clock_event_reasons=0x20)])
    devices = SimpleNamespace(devices=[SimpleNamespace(remote=False, key="CUDA0")])
    check = gpu_hygiene(devices, None, Nvml(fake.module, register_atexit=False))  # type: ignore[arg-type]
    assert check is not None
    procs, hot = check()
    assert "1 other process(es) hold 1200 MiB (pid 777 python3 1200 MiB)" in procs
    assert "throttled at 91 C: software thermal slowdown" in hot
    assert gpu_hygiene(devices, "rtx3060-laptop-6g") is None  # simulated: nothing real to check
    assert gpu_hygiene(SimpleNamespace(devices=[SimpleNamespace(remote=True, key="RPC0")]), None) is None


def test_the_report_plots_pp_against_tg_with_the_front_and_the_best_marked() -> None:
    res = tune_samples.outcome().result
    lines = pp_tg_plot(res.records, res.pareto, res.best)
    assert lines[0] == "TG t/s (generation), 6 measured trials"
    body = "\n".join(lines[1:15])
    assert body.count("B") == 1 and "*" in body and "x" in body  # the best, the front, an MTP-off trial
    # TG goes up: the best (MTP on, TG ~34) sits above the MTP-off trials (TG ~26)
    row_of = {m: next(i for i, ln in enumerate(lines) if m in ln.split("|", 1)[-1]) for m in ("B", "x")}
    assert row_of["B"] < row_of["x"]
    md = render_report(res, ReportFacts("m.gguf", tune_samples.WORKLOAD))
    assert "```text\nTG t/s (generation)" in md and "Not checked: no GPU NVML can see" in md
    assert pp_tg_plot(res.records[:1], [], None) == []  # one point is no plot
