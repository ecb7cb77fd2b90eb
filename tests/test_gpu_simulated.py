"""Simulated hardware: profiles, baseline + server allocation, and the "simulated" label everywhere."""

from __future__ import annotations

import pytest

from tui.core.gpu import NA, ProcessKind, ServerView, SimulatedGpus, Source, Status, collect_snapshot, device_index
from tui.core.gpu.profiles import PROFILES

ISSUE_PROFILES = ("rtx3060-laptop-6g", "rtx3090-24g", "rtx4090-24g", "2xv100-16g", "h200-141g")


@pytest.mark.parametrize("key", ISSUE_PROFILES)
def test_every_named_profile_reads_with_its_totals_and_baseline(key: str) -> None:
    profile = PROFILES[key]
    r = SimulatedGpus(key).read()
    assert (r.source, r.status) == (Source.SIMULATED, Status.SIMULATED)
    assert len(r.devices) == len(profile.devices) >= 1
    for dev, sim in zip(r.devices, profile.devices, strict=True):
        assert dev.memory_total_mib == sim.total_mib
        assert dev.memory_used_mib == sim.baseline_mib
        assert dev.memory_free_mib == sim.total_mib - sim.baseline_mib
        assert dev.simulated and dev.name == f"{sim.name} (simulated)"


def test_totals_are_realistic() -> None:
    mib = {k: [d.memory_total_mib for d in SimulatedGpus(k).read().devices] for k in ISSUE_PROFILES}
    assert mib["rtx3060-laptop-6g"] == [6144]
    assert mib["2xv100-16g"] == [16384, 16384]
    assert 140_000 < mib["h200-141g"][0] < 145_000  # NVML reports ~143771 MiB on an H200


def test_used_is_baseline_plus_allocation_by_index_or_device_name() -> None:
    r = SimulatedGpus("2xv100-16g", {0: 1000, "CUDA1": 2500.4, "CPU_Mapped": 9999, "CUDA_Host": 7}).read(ours={99})
    d0, d1 = r.devices
    assert d0.memory_used_mib == 300 + 1000 and d1.memory_used_mib == 300 + 2500
    assert d0.memory_used_mib + d0.memory_free_mib == d0.memory_total_mib
    server = [p for p in d1.processes if p.is_ours]
    assert len(server) == 1 and server[0].pid == 99 and server[0].used_memory_mib == 2500
    assert server[0].kind is ProcessKind.SIMULATED and "simulated" in str(server[0].name)


def test_allocation_from_a_callable_is_read_every_pass() -> None:
    plan = {"CUDA0": 0.0}
    sim = SimulatedGpus("rtx3090-24g", lambda: plan)
    assert sim.read().devices[0].memory_used_mib == 260
    plan["CUDA0"] = 17904.0  # the server's log now says so
    assert sim.read().devices[0].memory_used_mib == 260 + 17904


def test_a_failing_allocation_provider_is_a_warning() -> None:
    def broken() -> dict[int | str, float]:
        raise KeyError("log not parsed yet")

    r = SimulatedGpus("rtx3090-24g", broken).read()
    assert r.devices[0].memory_used_mib == 260 and any("allocation unavailable" in w for w in r.warnings)


def test_overcommit_warns_and_free_is_never_negative() -> None:
    r = SimulatedGpus("rtx3060-laptop-6g", {0: 7000}).read()
    (dev,) = r.devices
    assert dev.memory_used_mib == 7310 and dev.memory_free_mib == 0
    assert any("out of memory" in w for w in r.warnings)


def test_allocation_on_a_device_the_profile_lacks() -> None:
    r = SimulatedGpus("rtx3090-24g", {"CUDA3": 100}).read()
    assert r.devices[0].memory_used_mib == 260 and any("CUDA3" in w for w in r.warnings)


def test_labelled_simulated_everywhere() -> None:
    snap = collect_snapshot(SimulatedGpus("rtx4090-24g", {0: 100}), server=ServerView(pid=1))
    assert snap.simulated and snap.source is Source.SIMULATED and "simulated" in snap.message.lower()
    d = snap.to_dict()
    assert d["source"] == "simulated" and d["simulated"] is True
    for dev in d["devices"]:
        assert dev["simulated"] is True and "(simulated)" in dev["name"] and dev["uuid"].startswith("SIM-")
        assert dev["utilization_gpu_percent"] is None  # not invented
        for p in dev["processes"]:
            assert p["type"] == "simulated" and "simulated" in p["name"]


def test_custom_specs_and_cpu() -> None:
    r = SimulatedGpus("6GiB,24GiB").read()
    assert [d.memory_total_mib for d in r.devices] == [6144, 24576]
    cpu = SimulatedGpus("cpu").read()
    assert cpu.devices == () and cpu.status is Status.SIMULATED and "CPU only" in cpu.message
    with pytest.raises(ValueError, match="not a size"):
        SimulatedGpus("rtx9999")


def test_device_index() -> None:
    assert [device_index(k) for k in (0, "1", "CUDA2", "RPC3", "Vulkan0")] == [0, 1, 2, 3, 0]
    assert [device_index(k) for k in ("CPU", "CPU_Mapped", "CUDA_Host", -1)] == [None] * 4
    assert SimulatedGpus("rtx3090-24g").read().devices[0].pci_bus_id is NA
