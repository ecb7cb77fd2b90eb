"""What the CLI's tables and sentences say: counts agree with their nouns, the calibration's worth is
said plainly, and `gpus` on a machine without a GPU names the simulated profiles it can show."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.fake_pynvml import FakeNvml
from tui.cli import main
from tui.cli._common import counted
from tui.cli.plan_exact import calibration_line
from tui.cli.probe import render_run
from tui.core.gpu.profiles import PROFILES
from tui.core.probes.run_types import ProbeRun, RunConfig


def test_a_count_agrees_with_its_noun() -> None:
    assert [counted(n, "slot") for n in (0, 1, 2)] == ["0 slots", "1 slot", "2 slots"]
    assert counted(1, "pass", "passes") == "1 pass" and counted(3, "pass", "passes") == "3 passes"


@pytest.mark.parametrize("np_, said", [("1", "(1 slot)"), ("4", "(4 slots, KV per slot)")])
def test_the_plan_says_one_slot_not_one_slots(np_: str, said: str, tiny_models: dict[str, Path],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-m", str(tiny_models["tiny-mtp"]), "-np", np_, "--gpus", "cpu"]) == 0
    out = capsys.readouterr().out
    assert said in out.splitlines()[1] and "1 slots" not in out


@pytest.mark.parametrize("worst, said", [
    (0.118, "at these settings its compute buffers differ from llama.cpp's by up to 11.8 %"),
    (0.0, "at these settings its compute buffers match llama.cpp's"),
])
def test_the_calibration_says_how_far_its_compute_is_from_llama_cpps(worst: float, said: str) -> None:
    """`worst_compute_error_here` is an error: 0.882 once read "within 88.2 % of llama.cpp's"."""
    line = calibration_line({"status": "calibrated", "runs": 1, "seconds": 2.0, "worst_compute_error_here": worst})
    assert line.startswith("estimate: calibrated on this model (1 dry run, 2.0 s); ") and said in line
    assert "within" not in line


def test_a_probe_of_one_pass_says_one_pass() -> None:
    run = ProbeRun(run_id=7, status="ok", suite="tasks", config=RunConfig(repeat=1), requests=[],
                   summary={"n_passes": 1, "n_ok": 1, "n_requests": 1}, warnings=[])
    assert "over 1 pass)" in render_run(run)


def test_gpus_without_a_gpu_names_every_simulated_profile(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    FakeNvml(library_present=False).install(monkeypatch)
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "--simulate PROFILE" in out
    for key, profile in PROFILES.items():
        assert f"  {key}" in out and profile.description in out, key
    assert "2x16GiB" in out


def test_gpus_with_a_simulated_profile_does_not_list_the_others(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus", "--simulate", "rtx3090-24g"]) == 0
    assert "h200-141g" not in capsys.readouterr().out
