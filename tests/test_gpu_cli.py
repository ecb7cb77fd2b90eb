"""`mtp-tune gpus`: every device and process, the not-available state, and simulation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fakes.fake_gpus import OLD_DRIVER_MISSING, FakeProcess, gpu
from tests.fakes.fake_pynvml import FakeNvml
from tests.fakes.nvml_errors import C
from tui.cli import main


def _fake_machine() -> FakeNvml:
    return FakeNvml([
        gpu(0, name="NVIDIA H200", total_mib=143771, used_mib=20480,
            compute=[FakeProcess(4242, 20000, "/usr/local/bin/llama-server")],
            graphics=[FakeProcess(1000, 5, "Xorg")]),
        gpu(1, name="NVIDIA H200", total_mib=143771, fail_code=C["GPU_IS_LOST"]),
        gpu(2, name="NVIDIA H200", total_mib=143771, compute=[FakeProcess(5151, 900, "python3")]),
    ])


def test_json_lists_every_device_and_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _fake_machine().install(monkeypatch)
    assert main(["gpus", "--json", "--server-pid", "4242"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["source"], out["status"]) == ("nvml", "ok")
    assert [d["index"] for d in out["devices"]] == [0, 1, 2]
    for key in ("index", "name", "uuid", "memory_total_mib", "memory_used_mib", "memory_free_mib",
                "utilization_gpu_percent", "temperature_c", "power_draw_w", "power_limit_w", "processes"):
        assert all(key in d for d in out["devices"]), key
    d0, d1, d2 = out["devices"]
    assert {(p["pid"], p["name"], p["ours"]) for p in d0["processes"]} == {(4242, "llama-server", True), (1000, "Xorg", False)}
    assert d1["error"] and d1["memory_used_mib"] is None
    assert [(p["pid"], p["used_memory_mib"]) for p in d2["processes"]] == [(5151, 900)]
    assert set(out["host"]) >= {"ram_total_mib", "ram_available_mib"}
    assert any("GPU 1" in w for w in out["warnings"])
    assert any("pid 5151 python3" in w for w in out["warnings"])  # leftover process, automatically


def test_human_output_lists_every_device_and_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _fake_machine().install(monkeypatch)
    assert main(["gpus", "--server-pid", "4242"]) == 0
    out = capsys.readouterr().out
    for text in ("GPU 0  NVIDIA H200", "GPU 1  N/A", "GPU 2  NVIDIA H200", "ERROR: device failed",
                 "llama-server", "Xorg", "python3", "<- ours", "Host RAM:", "driver 570.86.15"):
        assert text in out, text
    assert out.count("pid ") >= 3


@pytest.mark.parametrize("as_json", [False, True])
def test_no_library_is_a_clear_state_and_exit_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], as_json: bool) -> None:
    FakeNvml(library_present=False).install(monkeypatch)
    assert main(["gpus", *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    if as_json:
        d = json.loads(out)
        assert (d["source"], d["status"], d["devices"]) == ("none", "library_not_found", [])
        assert d["message"].startswith("NVML not available: ")
    else:
        assert out.startswith("NVML not available: ") and "Host RAM:" in out


@pytest.mark.parametrize("code", [C["LIB_RM_VERSION_MISMATCH"], C["DRIVER_NOT_LOADED"], C["NO_PERMISSION"]])
def test_init_failures_print_one_not_available_paragraph(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int
) -> None:
    FakeNvml([gpu(0)], init_code=code).install(monkeypatch)
    assert main(["gpus"]) == 0
    first, *rest = capsys.readouterr().out.splitlines()
    assert first.startswith("NVML not available: ") and "GPU 0" not in "\n".join(rest)


def test_version_mismatch_with_devices_still_lists_them(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    FakeNvml([gpu(0, compute=[FakeProcess(9, 10, "x")])], driver_version="470.82.01", missing=OLD_DRIVER_MISSING).install(monkeypatch)
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("NVML: driver and bindings disagree") and "GPU 0" in out and "pid        9" in out


def test_simulate_is_labelled(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus", "--simulate", "rtx3060-laptop-6g", "--alloc", "CUDA0=4000"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("SIMULATED: ") and "RTX 3060 Laptop GPU (simulated)" in out
    assert "4310 MiB used / 6144 MiB total" in out and "<- ours" in out
    assert main(["gpus", "--simulate", "2xv100-16g", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["source"], d["status"], d["simulated"]) == ("simulated", "simulated", True)
    assert [x["memory_total_mib"] for x in d["devices"]] == [16384, 16384]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--simulate", "rtx9999"], "--simulate: 'rtx9999'"),
        (["--alloc", "0=1"], "--alloc only applies with --simulate"),
        (["--simulate", "rtx3090-24g", "--alloc", "x=1"], "--alloc 'x=1'"),
        (["--interval", "0", "--watch"], "--interval"),
    ],
)
def test_bad_arguments_fail_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    assert main(["gpus", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_watch_json_prints_one_object_per_sample(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeNvml([gpu(0)])
    fake.install(monkeypatch)
    assert main(["gpus", "--watch", "--json", "--count", "3", "--interval", "0.001"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3]


def test_watch_human(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus", "--watch", "--simulate", "h200-141g", "--count", "2", "--interval", "0.001"]) == 0
    out = capsys.readouterr().out
    assert out.count("SIMULATED: ") == 2 and "NVIDIA H200 (simulated)" in out


def test_real_command_on_this_machine() -> None:
    """The smoke test as users run it: real pynvml, whatever this machine has. Never a traceback."""
    proc = subprocess.run([sys.executable, "-m", "tui.cli", "gpus", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["source"] in ("nvml", "none") and d["simulated"] is False
    if d["source"] == "none":
        assert d["message"].startswith("NVML not available: ") and d["devices"] == []
    elif d["status"] == "ok":
        assert d["devices"] and all(x["memory_total_mib"] for x in d["devices"])
    assert "Traceback" not in proc.stderr
