"""A fake `pynvml` that behaves like nvidia-ml-py's bindings, for tests and benchmarks.

Not a mock of mtp-tune's code: a real module object with the bindings' names, error classes built
the way pynvml builds them (`NVMLError(code)` returns the `NVMLError_<Name>` subclass, same codes),
and the same failure modes a real machine shows:

- no driver: `nvmlInit` raises `NVMLError_LibraryNotFound` (what `CDLL("libnvidia-ml.so.1")` failing becomes);
- a device failing among good ones: every call on its handle raises `NVMLError_GpuIsLost` (or any code);
- an old driver: a C symbol missing from the "library" makes its wrapper raise
  `NVMLError_FunctionNotFound`; the unversioned process queries then raise
  `NVMLLibraryMismatchError`, exactly as the real `throwOnVersionMismatch` wrapper does;
- older bindings: a function absent from the module altogether (`absent=`);
- processes appearing and leaving between calls (mutate `FakeGpu.compute` or use `on_call`).

Use `FakeNvml(...).module` to inject it, or `.install(monkeypatch)` to put it in `sys.modules`.
The machine it describes is `fake_gpus` (FakeGpu, FakeProcess, `gpu()`, the old-driver symbol sets);
its error classes are `nvml_errors`.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from tests.fakes.fake_gpus import FakeGpu, Handle, MiB, Struct
from tests.fakes.nvml_errors import MESSAGES, C, make_errors


class FakeNvml:
    """The state behind one fake `pynvml` module; tests mutate it between calls."""

    def __init__(
        self,
        gpus: Iterable[FakeGpu] = (),
        *,
        driver_version: str = "570.86.15",
        cuda_version: int = 12080,
        library_present: bool = True,
        init_code: int | None = None,
        missing: Iterable[str] = (),
        absent: Iterable[str] = (),
        on_call: Callable[[str], None] | None = None,
    ) -> None:
        self.gpus: list[FakeGpu] = list(gpus)
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.library_present = library_present
        self.init_code = init_code
        #: C symbols the "driver library" lacks (-> NVMLError_FunctionNotFound when called).
        self.missing: set[str] = set(missing)
        self.on_call = on_call
        self.calls: Counter[str] = Counter()
        self.refcount = 0
        self.lock = threading.RLock()
        self.module = self._build(set(absent))

    # -- helpers used by the fake functions -----------------------------------------------------

    def _enter(self, fn_name: str, symbol: str | None = None) -> None:
        """Bookkeeping every wrapper does: hook, count, library loaded, symbol present, initialised."""
        if self.on_call is not None:
            self.on_call(fn_name)
        self.calls[fn_name] += 1
        err = self.module.NVMLError
        if not self.library_present:
            raise err(C["UNINITIALIZED"])  # nvmlLib is None: pynvml raises Uninitialized
        if (symbol or fn_name) in self.missing:
            raise err(C["FUNCTION_NOT_FOUND"])
        if self.refcount <= 0:
            raise err(C["UNINITIALIZED"])

    def _gpu(self, handle: Handle, fn_name: str) -> FakeGpu:
        err = self.module.NVMLError
        if not isinstance(handle, Handle) or handle.index >= len(self.gpus):
            raise err(C["INVALID_ARGUMENT"])
        gpu = self.gpus[handle.index]
        if gpu.fail_code is not None:
            raise err(gpu.fail_code)
        if fn_name in gpu.unsupported:
            raise err(C["NOT_SUPPORTED"])
        return gpu

    def install(self, monkeypatch: Any) -> ModuleType:
        """Put the module in sys.modules as `pynvml` for the test's duration."""
        monkeypatch.setitem(sys.modules, "pynvml", self.module)
        return self.module

    # -- the module ----------------------------------------------------------------------------

    def _build(self, absent: set[str]) -> ModuleType:  # noqa: C901 - one closure per NVML function
        mod = ModuleType("pynvml", "Fake nvidia-ml-py bindings (tests/fakes/fake_pynvml.py).")
        mod.__file__ = __file__
        make_errors(mod)
        mod.NVML_SUCCESS = 0
        mod.NVML_TEMPERATURE_GPU = 0
        mod.NVML_VALUE_NOT_AVAILABLE_ulonglong = 2**64 - 1
        mod.nvmlMemory_v2 = 0x02000028
        mod.nvmlTemperature_v1 = 0x0100000C
        state = self
        err = mod.NVMLError

        def nvmlInitWithFlags(flags: int) -> None:
            with state.lock:
                if state.on_call is not None:
                    state.on_call("nvmlInitWithFlags")
                state.calls["nvmlInitWithFlags"] += 1
                if not state.library_present:
                    raise err(C["LIBRARY_NOT_FOUND"])
                if state.init_code is not None:
                    raise err(state.init_code)
                state.refcount += 1

        def nvmlInit() -> None:
            nvmlInitWithFlags(0)

        def nvmlShutdown() -> None:
            with state.lock:
                state._enter("nvmlShutdown")
                state.refcount -= 1

        def nvmlErrorString(result: int) -> str:
            return MESSAGES.get(result, "Unknown Error")

        def nvmlSystemGetDriverVersion() -> str:
            with state.lock:
                state._enter("nvmlSystemGetDriverVersion")
                return state.driver_version

        def nvmlSystemGetCudaDriverVersion() -> int:
            with state.lock:
                state._enter("nvmlSystemGetCudaDriverVersion")
                return state.cuda_version

        def nvmlSystemGetCudaDriverVersion_v2() -> int:
            with state.lock:
                state._enter("nvmlSystemGetCudaDriverVersion_v2")
                return state.cuda_version

        def nvmlSystemGetNVMLVersion() -> str:
            with state.lock:
                state._enter("nvmlSystemGetNVMLVersion")
                major = state.cuda_version // 1000
                return f"{major}.{state.driver_version}"

        def nvmlSystemGetProcessName(pid: int) -> str:
            with state.lock:
                state._enter("nvmlSystemGetProcessName")
                for gpu in state.gpus:
                    for proc in (*gpu.compute, *gpu.graphics):
                        if proc.pid == pid and proc.name is not None:
                            return proc.name
                raise err(C["NOT_FOUND"])

        def nvmlDeviceGetCount() -> int:
            with state.lock:
                state._enter("nvmlDeviceGetCount", "nvmlDeviceGetCount_v2")
                return len(state.gpus)

        def nvmlDeviceGetHandleByIndex(index: int) -> Handle:
            with state.lock:
                state._enter("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2")
                if not 0 <= index < len(state.gpus):
                    raise err(C["INVALID_ARGUMENT"])
                if state.gpus[index].handle_code is not None:
                    raise err(state.gpus[index].handle_code)
                return Handle(index)

        def device_fn(name: str, symbol: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def wrap(body: Callable[..., Any]) -> Callable[..., Any]:
                def fn(handle: Handle, *args: Any, **kwargs: Any) -> Any:
                    with state.lock:
                        state._enter(name, symbol)
                        return body(state._gpu(handle, name), *args, **kwargs)

                fn.__name__ = name
                return fn

            return wrap

        @device_fn("nvmlDeviceGetName")
        def nvmlDeviceGetName(gpu: FakeGpu) -> str:
            return gpu.name

        @device_fn("nvmlDeviceGetUUID")
        def nvmlDeviceGetUUID(gpu: FakeGpu) -> str:
            return gpu.uuid

        def pci(gpu: FakeGpu) -> Struct:
            domain, bus, rest = gpu.bus_id.split(":")
            return Struct(busIdLegacy=gpu.bus_id[-12:].encode(), domain=int(domain, 16), bus=int(bus, 16),
                           device=int(rest.split(".")[0], 16), pciDeviceId=0x233510DE, pciSubSystemId=0,
                           busId=gpu.bus_id.encode())  # real: bytes (a ctypes char array)

        nvmlDeviceGetPciInfo_v3 = device_fn("nvmlDeviceGetPciInfo_v3")(pci)

        def nvmlDeviceGetPciInfo(handle: Handle) -> Struct:
            return nvmlDeviceGetPciInfo_v3(handle)

        def nvmlDeviceGetMemoryInfo(handle: Handle, version: int | None = None) -> Struct:
            with state.lock:
                if version:
                    state._enter("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2")
                    gpu = state._gpu(handle, "nvmlDeviceGetMemoryInfo")
                    if version != mod.nvmlMemory_v2:
                        raise err(C["ARGUMENT_VERSION_MISMATCH"])
                    free = gpu.total_mib - gpu.used_mib - gpu.reserved_mib
                    return Struct(version=version, total=gpu.total_mib * MiB, reserved=gpu.reserved_mib * MiB,
                                   free=free * MiB, used=gpu.used_mib * MiB)
                state._enter("nvmlDeviceGetMemoryInfo")
                gpu = state._gpu(handle, "nvmlDeviceGetMemoryInfo")
                used = gpu.used_mib + gpu.reserved_mib
                return Struct(total=gpu.total_mib * MiB, free=(gpu.total_mib - used) * MiB, used=used * MiB)

        @device_fn("nvmlDeviceGetUtilizationRates")
        def nvmlDeviceGetUtilizationRates(gpu: FakeGpu) -> Struct:
            return Struct(gpu=gpu.util_gpu, memory=gpu.util_mem)

        @device_fn("nvmlDeviceGetTemperature")
        def nvmlDeviceGetTemperature(gpu: FakeGpu, sensor: int) -> int:
            if sensor != 0:
                raise err(C["INVALID_ARGUMENT"])
            return gpu.temp_c

        @device_fn("nvmlDeviceGetTemperatureV")
        def nvmlDeviceGetTemperatureV(gpu: FakeGpu, sensor: int, version: int = 0x0100000C) -> int:
            return gpu.temp_c

        @device_fn("nvmlDeviceGetCurrentClocksEventReasons")
        def nvmlDeviceGetCurrentClocksEventReasons(gpu: FakeGpu) -> int:
            return gpu.clock_event_reasons

        @device_fn("nvmlDeviceGetCurrentClocksThrottleReasons")
        def nvmlDeviceGetCurrentClocksThrottleReasons(gpu: FakeGpu) -> int:
            return gpu.clock_event_reasons

        @device_fn("nvmlDeviceGetPowerUsage")
        def nvmlDeviceGetPowerUsage(gpu: FakeGpu) -> int:
            return gpu.power_mw

        @device_fn("nvmlDeviceGetEnforcedPowerLimit")
        def nvmlDeviceGetEnforcedPowerLimit(gpu: FakeGpu) -> int:
            return gpu.limit_mw

        @device_fn("nvmlDeviceGetPowerManagementLimit")
        def nvmlDeviceGetPowerManagementLimit(gpu: FakeGpu) -> int:
            return gpu.limit_mw

        def procs(kind: str, suffix: str) -> Callable[[Handle], list[Struct]]:
            name = f"nvmlDevice{kind}RunningProcesses{suffix}"

            @device_fn(name)
            def fn(gpu: FakeGpu) -> list[Struct]:
                source = gpu.compute if kind == "GetCompute" else gpu.graphics
                return [
                    Struct(pid=p.pid, usedGpuMemory=None if p.used_mib is None else p.used_mib * MiB,
                            gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                    for p in list(source)
                ]

            fn.__name__ = name
            return fn

        def unversioned(kind: str) -> Callable[[Handle], list[Struct]]:
            v3 = procs(kind, "_v3")

            def fn(handle: Handle) -> list[Struct]:
                try:
                    return v3(handle)
                except mod.NVMLError_FunctionNotFound:  # pynvml's throwOnVersionMismatch
                    raise mod.NVMLLibraryMismatchError(
                        "Unversioned function called and the pyNVML version does not match the NVML lib "
                        f"version. Either use matching pyNVML and NVML lib versions or use a versioned "
                        f"function such as nvmlDevice{kind}RunningProcesses_v2"
                    ) from None

            fn.__name__ = f"nvmlDevice{kind}RunningProcesses"
            return fn

        functions: dict[str, Callable[..., Any]] = {
            "nvmlInit": nvmlInit,
            "nvmlInitWithFlags": nvmlInitWithFlags,
            "nvmlShutdown": nvmlShutdown,
            "nvmlErrorString": nvmlErrorString,
            "nvmlSystemGetDriverVersion": nvmlSystemGetDriverVersion,
            "nvmlSystemGetCudaDriverVersion": nvmlSystemGetCudaDriverVersion,
            "nvmlSystemGetCudaDriverVersion_v2": nvmlSystemGetCudaDriverVersion_v2,
            "nvmlSystemGetNVMLVersion": nvmlSystemGetNVMLVersion,
            "nvmlSystemGetProcessName": nvmlSystemGetProcessName,
            "nvmlDeviceGetCount": nvmlDeviceGetCount,
            "nvmlDeviceGetHandleByIndex": nvmlDeviceGetHandleByIndex,
            "nvmlDeviceGetName": nvmlDeviceGetName,
            "nvmlDeviceGetUUID": nvmlDeviceGetUUID,
            "nvmlDeviceGetPciInfo": nvmlDeviceGetPciInfo,
            "nvmlDeviceGetPciInfo_v3": nvmlDeviceGetPciInfo_v3,
            "nvmlDeviceGetMemoryInfo": nvmlDeviceGetMemoryInfo,
            "nvmlDeviceGetUtilizationRates": nvmlDeviceGetUtilizationRates,
            "nvmlDeviceGetTemperature": nvmlDeviceGetTemperature,
            "nvmlDeviceGetTemperatureV": nvmlDeviceGetTemperatureV,
            "nvmlDeviceGetPowerUsage": nvmlDeviceGetPowerUsage,
            "nvmlDeviceGetEnforcedPowerLimit": nvmlDeviceGetEnforcedPowerLimit,
            "nvmlDeviceGetPowerManagementLimit": nvmlDeviceGetPowerManagementLimit,
            "nvmlDeviceGetCurrentClocksEventReasons": nvmlDeviceGetCurrentClocksEventReasons,
            "nvmlDeviceGetCurrentClocksThrottleReasons": nvmlDeviceGetCurrentClocksThrottleReasons,
            "nvmlDeviceGetComputeRunningProcesses_v3": procs("GetCompute", "_v3"),
            "nvmlDeviceGetComputeRunningProcesses_v2": procs("GetCompute", "_v2"),
            "nvmlDeviceGetComputeRunningProcesses": unversioned("GetCompute"),
            "nvmlDeviceGetGraphicsRunningProcesses_v3": procs("GetGraphics", "_v3"),
            "nvmlDeviceGetGraphicsRunningProcesses_v2": procs("GetGraphics", "_v2"),
            "nvmlDeviceGetGraphicsRunningProcesses": unversioned("GetGraphics"),
        }
        for name, fn in functions.items():
            if name not in absent:
                setattr(mod, name, fn)
        return mod
