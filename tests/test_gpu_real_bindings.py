"""The real nvidia-ml-py wrappers over a fake C library: what changes on a real machine is only the .so.

`pynvml.nvmlLib` is normally `CDLL("libnvidia-ml.so.1")`; here it is an object whose attributes
answer like the C functions (return codes, out-parameters written through `byref`). Everything
above it is nvidia-ml-py's own code: string decoding, ctypes structs, the two-call process list,
NVML_VALUE_NOT_AVAILABLE, FunctionNotFound for a missing symbol, NVMLLibraryMismatchError.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pytest

from tui.core.gpu import NA, Nvml, Status

pynvml = pytest.importorskip("pynvml")

SUCCESS, INSUFFICIENT_SIZE, GPU_IS_LOST, INVALID_ARGUMENT = 0, 7, 15, 2
MiB = 1024 * 1024
NOT_AVAILABLE = 2**64 - 1


@dataclass
class CGpu:
    name: bytes
    uuid: bytes
    bus: bytes
    total: int
    used: int
    procs: list[tuple[int, int]] = field(default_factory=list)  # (pid, bytes or NOT_AVAILABLE)
    lost: bool = False


def _out(arg: Any) -> Any:
    """The ctypes object behind a byref() argument."""
    return arg._obj


def _index(handle: Any) -> int:
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0) - 1


class FakeLibNvml:
    """Stands in for the loaded libnvidia-ml.so.1; symbols in `missing` do not exist."""

    def __init__(self, gpus: list[CGpu], driver: bytes = b"570.86.15", missing: frozenset[str] = frozenset()) -> None:
        self.gpus = gpus
        self.driver = driver
        self.missing = missing

    def __getattr__(self, name: str) -> Any:
        if name in self.missing or not hasattr(type(self), "c_" + name):
            raise AttributeError(name)  # CDLL raises AttributeError for an unknown symbol
        return getattr(self, "c_" + name)

    def _gpu(self, handle: Any) -> CGpu | None:
        i = _index(handle)
        return self.gpus[i] if 0 <= i < len(self.gpus) else None

    # -- system --
    def c_nvmlInitWithFlags(self, flags: int) -> int:
        return SUCCESS

    def c_nvmlShutdown(self) -> int:
        return SUCCESS

    def c_nvmlErrorString(self, result: int) -> bytes:
        return b"Unknown Error"

    def c_nvmlSystemGetDriverVersion(self, buf: Any, size: Any) -> int:
        buf.value = self.driver
        return SUCCESS

    def c_nvmlSystemGetNVMLVersion(self, buf: Any, size: Any) -> int:
        buf.value = b"12." + self.driver
        return SUCCESS

    def c_nvmlSystemGetCudaDriverVersion_v2(self, out: Any) -> int:
        _out(out).value = 12080
        return SUCCESS

    def c_nvmlSystemGetProcessName(self, pid: Any, buf: Any, size: Any) -> int:
        buf.value = f"/usr/bin/proc-{pid.value}".encode()
        return SUCCESS

    def c_nvmlDeviceGetCount_v2(self, out: Any) -> int:
        _out(out).value = len(self.gpus)
        return SUCCESS

    def c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> int:
        if not 0 <= index.value < len(self.gpus):
            return INVALID_ARGUMENT
        slot = ctypes.cast(ctypes.pointer(_out(out)), ctypes.POINTER(ctypes.c_void_p))
        slot.contents.value = index.value + 1
        return SUCCESS

    # -- per device --
    def c_nvmlDeviceGetName(self, handle: Any, buf: Any, size: Any) -> int:
        g = self._gpu(handle)
        if g is None or g.lost:
            return GPU_IS_LOST
        buf.value = g.name
        return SUCCESS

    def c_nvmlDeviceGetUUID(self, handle: Any, buf: Any, size: Any) -> int:
        g = self._gpu(handle)
        if g is None or g.lost:
            return GPU_IS_LOST
        buf.value = g.uuid
        return SUCCESS

    def c_nvmlDeviceGetPciInfo_v3(self, handle: Any, out: Any) -> int:
        g = self._gpu(handle)
        if g is None or g.lost:
            return GPU_IS_LOST
        _out(out).busId = g.bus
        return SUCCESS

    def _memory(self, handle: Any, out: Any, v2: bool) -> int:
        g = self._gpu(handle)
        if g is None or g.lost:
            return GPU_IS_LOST
        m = _out(out)
        m.total, m.used, m.free = g.total * MiB, g.used * MiB, (g.total - g.used) * MiB
        return SUCCESS

    def c_nvmlDeviceGetMemoryInfo_v2(self, handle: Any, out: Any) -> int:
        return self._memory(handle, out, True)

    def c_nvmlDeviceGetMemoryInfo(self, handle: Any, out: Any) -> int:
        return self._memory(handle, out, False)

    def c_nvmlDeviceGetUtilizationRates(self, handle: Any, out: Any) -> int:
        if (g := self._gpu(handle)) is None or g.lost:
            return GPU_IS_LOST
        _out(out).gpu, _out(out).memory = 55, 21
        return SUCCESS

    def c_nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, out: Any) -> int:
        if (g := self._gpu(handle)) is None or g.lost:
            return GPU_IS_LOST
        _out(out).value = 47
        return SUCCESS

    def c_nvmlDeviceGetPowerUsage(self, handle: Any, out: Any) -> int:
        if (g := self._gpu(handle)) is None or g.lost:
            return GPU_IS_LOST
        _out(out).value = 123456
        return SUCCESS

    def c_nvmlDeviceGetEnforcedPowerLimit(self, handle: Any, out: Any) -> int:
        if (g := self._gpu(handle)) is None or g.lost:
            return GPU_IS_LOST
        _out(out).value = 700000
        return SUCCESS

    def _procs(self, handle: Any, count: Any, array: Any) -> int:
        g = self._gpu(handle)
        if g is None or g.lost:
            return GPU_IS_LOST
        n = _out(count)
        if array is None:  # first call: size query
            n.value = len(g.procs)
            return INSUFFICIENT_SIZE if g.procs else SUCCESS
        for i, (pid, used) in enumerate(g.procs):
            array[i].pid, array[i].usedGpuMemory = pid, used
        n.value = len(g.procs)
        return SUCCESS

    def c_nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any, count: Any, array: Any) -> int:
        return self._procs(handle, count, array)

    def c_nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any, count: Any, array: Any) -> int:
        return self._procs(handle, count, array)

    def c_nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: Any, count: Any, array: Any) -> int:
        if (g := self._gpu(handle)) is None or g.lost:
            return GPU_IS_LOST
        _out(count).value = 0
        return SUCCESS

    def c_nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: Any, count: Any, array: Any) -> int:
        return self.c_nvmlDeviceGetGraphicsRunningProcesses_v3(handle, count, array)


@pytest.fixture
def real_bindings(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Install a fake C library under the real pynvml module (restored afterwards)."""

    def install(lib: FakeLibNvml) -> ModuleType:
        monkeypatch.setattr(pynvml, "nvmlLib", lib)
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)
        return pynvml

    yield install


def _h200s() -> list[CGpu]:
    return [
        CGpu(b"NVIDIA H200", b"GPU-11111111-2222-3333-4444-555555555555", b"00000000:19:00.0", 143771, 20480,
             [(4242, 20000 * MiB), (5151, NOT_AVAILABLE)]),
        CGpu(b"NVIDIA H200", b"GPU-66666666-7777-8888-9999-000000000000", b"00000000:3B:00.0", 143771, 0, [], lost=True),
        CGpu(b"NVIDIA H200", b"GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", b"00000000:4C:00.0", 143771, 1),
    ]


def test_real_wrappers_give_every_device_and_process(real_bindings: Any) -> None:
    mod = real_bindings(FakeLibNvml(_h200s()))
    r = Nvml(mod, register_atexit=False).read(ours={4242})
    assert r.status is Status.OK and r.driver_version == "570.86.15" and r.cuda_driver_version == "12.8"
    d0, d1, d2 = r.devices
    assert (d0.name, d0.uuid, d0.pci_bus_id) == ("NVIDIA H200", "GPU-11111111-2222-3333-4444-555555555555", "00000000:19:00.0")
    assert (d0.memory_total_mib, d0.memory_used_mib, d0.memory_free_mib) == (143771, 20480, 143771 - 20480)
    assert (d0.utilization_gpu_percent, d0.temperature_c, d0.power_draw_w, d0.power_limit_w) == (55, 47, 123.5, 700.0)
    procs = {p.pid: p for p in d0.processes}
    assert procs[4242].is_ours and procs[4242].used_memory_mib == 20000 and procs[4242].name == "proc-4242"
    assert procs[5151].used_memory_mib is NA and not procs[5151].is_ours  # NVML_VALUE_NOT_AVAILABLE
    assert d1.error and "GPU is lost" in d1.error and d1.memory_total_mib is NA
    assert d2.error is None and d2.processes == () and d2.pci_bus_id == "00000000:4C:00.0"


def test_real_wrappers_on_an_old_driver(real_bindings: Any) -> None:
    lib = FakeLibNvml(
        _h200s()[:1],
        driver=b"470.82.01",
        missing=frozenset({"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3",
                           "nvmlDeviceGetMemoryInfo_v2"}),
    )
    r = Nvml(real_bindings(lib), register_atexit=False).read()
    assert r.status is Status.VERSION_MISMATCH and "470.82.01" in r.message
    (dev,) = r.devices
    assert dev.memory_used_mib == 20480 and [p.pid for p in dev.processes] == [4242, 5151]  # via _v2


def test_real_wrappers_when_no_process_query_exists(real_bindings: Any) -> None:
    missing = frozenset({f"nvmlDevice{k}RunningProcesses{v}" for k in ("GetCompute", "GetGraphics") for v in ("_v3", "_v2")})
    r = Nvml(real_bindings(FakeLibNvml(_h200s()[:1], missing=missing)), register_atexit=False).read()
    assert r.status is Status.VERSION_MISMATCH  # NVMLLibraryMismatchError from the unversioned call
    assert r.devices[0].processes == () and "disagree" in r.devices[0].processes_status
    assert r.devices[0].memory_total_mib == 143771
