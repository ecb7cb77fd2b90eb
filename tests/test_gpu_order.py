"""NVML order vs CUDA order: mapping llama.cpp's CUDA0.. names to NVML devices by PCI bus id / UUID."""

from __future__ import annotations

from tests.fakes.fake_gpus import gpu
from tests.fakes.fake_pynvml import FakeNvml
from tui.core.gpu import Nvml
from tui.core.gpu.order import cuda_order, find_device, llama_names, match_llama_devices, pci_key


def _devices(names: list[str]):  # type: ignore[no-untyped-def]
    fake = FakeNvml([gpu(i, name=n) for i, n in enumerate(names)])
    return Nvml(fake.module, register_atexit=False).read().devices


def test_pci_key_normalises_nvml_and_cuda_spellings() -> None:
    assert pci_key("00000000:41:00.0") == pci_key("0000:41:00.0") == pci_key("41:00.0") == (0, 0x41, 0, 0)
    assert pci_key("0000:3b:00.0") == pci_key("00000000:3B:00.0")
    assert pci_key("GPU-1234") is None and pci_key(None) is None


def test_match_llama_devices_by_pci_bus_id_and_uuid() -> None:
    devs = _devices(["NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"])
    # llama.cpp prints CUDA's lowercase 4-digit-domain bus ids; CUDA0 is the 4090 (fastest first).
    ids = {"CUDA0": "0000:27:00.0", "CUDA1": devs[0].uuid[:12], "CUDA2": "0000:37:00.0", "RPC0": "127.0.0.1:50052"}
    assert match_llama_devices(ids, devs) == {"CUDA0": 1, "CUDA1": 0, "CUDA2": 2}
    assert find_device("GPU-0", devs) is None  # too short / ambiguous prefix


def test_cuda_order_pci_bus_id_and_identical_models() -> None:
    mixed = _devices(["NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090"])
    assert cuda_order(mixed, cuda_device_order="PCI_BUS_ID") == (0, 1)
    assert cuda_order(mixed) is None  # FASTEST_FIRST: only CUDA knows
    same = _devices(["Tesla V100-SXM2-16GB"] * 2)
    assert cuda_order(same) == (0, 1)


def test_cuda_visible_devices_remaps_and_stops_at_invalid_entries() -> None:
    devs = _devices(["NVIDIA H200"] * 4)
    assert cuda_order(devs, cuda_visible_devices="2,0") == (2, 0)
    assert llama_names(cuda_order(devs, cuda_visible_devices="2,0") or ()) == {"CUDA0": 2, "CUDA1": 0}
    assert cuda_order(devs, cuda_visible_devices="1,7,2") == (1,)  # 7 is invalid: 2 is ignored too
    assert cuda_order(devs, cuda_visible_devices="-1") == ()
    assert cuda_order(devs, cuda_visible_devices="") == ()
    assert cuda_order(devs, cuda_visible_devices=f"{devs[3].uuid},0") == (3, 0)
    mixed = _devices(["NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090"])
    assert cuda_order(mixed, cuda_visible_devices=mixed[1].uuid) == (1,)  # UUIDs work in any order
    assert cuda_order(mixed, cuda_visible_devices="0") is None
