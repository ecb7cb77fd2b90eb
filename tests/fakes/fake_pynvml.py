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
"""

from __future__ import annotations

import string
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

MiB = 1024 * 1024

# nvml.h return codes, as in pynvml.
ERROR_CODES: dict[str, int] = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_ALREADY_INITIALIZED": 5,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_INSUFFICIENT_SIZE": 7,
    "NVML_ERROR_INSUFFICIENT_POWER": 8,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_TIMEOUT": 10,
    "NVML_ERROR_IRQ_ISSUE": 11,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_CORRUPTED_INFOROM": 14,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_RESET_REQUIRED": 16,
    "NVML_ERROR_OPERATING_SYSTEM": 17,
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": 18,
    "NVML_ERROR_IN_USE": 19,
    "NVML_ERROR_MEMORY": 20,
    "NVML_ERROR_NO_DATA": 21,
    "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED": 22,
    "NVML_ERROR_INSUFFICIENT_RESOURCES": 23,
    "NVML_ERROR_FREQ_NOT_SUPPORTED": 24,
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": 25,
    "NVML_ERROR_DEPRECATED": 26,
    "NVML_ERROR_NOT_READY": 27,
    "NVML_ERROR_GPU_NOT_FOUND": 28,
    "NVML_ERROR_INVALID_STATE": 29,
    "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED": 30,
    "NVML_ERROR_UNKNOWN": 999,
}
C = {name.removeprefix("NVML_ERROR_"): code for name, code in ERROR_CODES.items()}

_MESSAGES = {
    1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
    5: "Already Initialized", 6: "Not Found", 7: "Insufficient Size", 8: "Insufficient External Power",
    9: "Driver Not Loaded", 10: "Timeout", 11: "Interrupt Request Issue", 12: "NVML Shared Library Not Found",
    13: "Function Not Found", 14: "Corrupted infoROM", 15: "GPU is lost", 16: "GPU requires restart",
    17: "The operating system has blocked the request.", 18: "RM has detected an NVML/RM version mismatch.",
    20: "Insufficient Memory", 999: "Unknown Error",
}

#: The C symbols an R470 driver lacks but nvidia-ml-py 13's default wrappers use.
OLD_DRIVER_MISSING = frozenset({
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetTemperatureV",
})
#: ...and a driver so old that no versioned process query exists.
ANCIENT_DRIVER_MISSING = OLD_DRIVER_MISSING | {
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
}


@dataclass
class FakeProcess:
    pid: int
    used_mib: int | None  # None: NVML reports N/A (WDDM, some containers)
    name: str | None = None  # what nvmlSystemGetProcessName returns; None -> NVMLError_NotFound


@dataclass
class FakeGpu:
    name: str = "NVIDIA GeForce RTX 3090"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:01:00.0"
    total_mib: int = 24576
    used_mib: int = 300
    reserved_mib: int = 250  # v2 memory: "used" excludes this; v1 "used" includes it
    util_gpu: int = 0
    util_mem: int = 0
    temp_c: int = 40
    power_mw: int = 25000
    limit_mw: int = 350000
    compute: list[FakeProcess] = field(default_factory=list)
    graphics: list[FakeProcess] = field(default_factory=list)
    #: every call on this device's handle raises this NVML code (15: GPU is lost, 999: unknown).
    fail_code: int | None = None
    #: nvmlDeviceGetHandleByIndex itself raises this code.
    handle_code: int | None = None
    #: functions answering NVML_ERROR_NOT_SUPPORTED on this device.
    unsupported: set[str] = field(default_factory=set)


class _Handle:
    """An opaque device handle (the real one is a ctypes pointer)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<c_nvmlDevice_t fake {self.index}>"


class _Struct:
    """Attribute bag standing in for ctypes structs and pynvml's nvmlFriendlyObject."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__dict__})"


def _make_errors(mod: ModuleType) -> None:
    """Build NVMLError and its subclasses the way pynvml's `_extractNVMLErrorsAsClasses` does."""

    class NVMLError(Exception):
        _valClassMapping: dict[int, type] = {}

        def __new__(typ, value: int) -> Any:  # noqa: N804 - mirrors pynvml
            if typ == NVMLError:
                typ = NVMLError._valClassMapping.get(value, typ)
            obj = Exception.__new__(typ)
            obj.value = value
            return obj

        def __str__(self) -> str:
            return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")

        def __eq__(self, other: object) -> bool:
            return self.value == getattr(other, "value", None)

        __hash__ = Exception.__hash__

    NVMLError.__module__ = "pynvml"
    mod.NVMLError = NVMLError
    for err_name, val in ERROR_CODES.items():
        setattr(mod, err_name, val)
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")

        def gen_new(v: int) -> Callable[..., Any]:
            def new(typ: type, *args: Any) -> Any:
                return NVMLError.__new__(typ, v)

            return new

        cls = type(class_name, (NVMLError,), {"__new__": gen_new(val)})
        cls.__module__ = "pynvml"
        setattr(mod, class_name, cls)
        NVMLError._valClassMapping[val] = cls

    class NVMLLibraryMismatchError(Exception):
        pass

    NVMLLibraryMismatchError.__module__ = "pynvml"
    mod.NVMLLibraryMismatchError = NVMLLibraryMismatchError

    def nvmlExceptionClass(code: int) -> type:
        if code not in NVMLError._valClassMapping:
            raise ValueError(f"nvmlErrorCode {code} is not valid")
        return NVMLError._valClassMapping[code]

    mod.nvmlExceptionClass = nvmlExceptionClass


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

    def _gpu(self, handle: _Handle, fn_name: str) -> FakeGpu:
        err = self.module.NVMLError
        if not isinstance(handle, _Handle) or handle.index >= len(self.gpus):
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
        _make_errors(mod)
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
            return _MESSAGES.get(result, "Unknown Error")

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

        def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
            with state.lock:
                state._enter("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByIndex_v2")
                if not 0 <= index < len(state.gpus):
                    raise err(C["INVALID_ARGUMENT"])
                if state.gpus[index].handle_code is not None:
                    raise err(state.gpus[index].handle_code)
                return _Handle(index)

        def device_fn(name: str, symbol: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def wrap(body: Callable[..., Any]) -> Callable[..., Any]:
                def fn(handle: _Handle, *args: Any, **kwargs: Any) -> Any:
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

        def pci(gpu: FakeGpu) -> _Struct:
            domain, bus, rest = gpu.bus_id.split(":")
            return _Struct(busIdLegacy=gpu.bus_id[-12:].encode(), domain=int(domain, 16), bus=int(bus, 16),
                           device=int(rest.split(".")[0], 16), pciDeviceId=0x233510DE, pciSubSystemId=0,
                           busId=gpu.bus_id.encode())  # real: bytes (a ctypes char array)

        nvmlDeviceGetPciInfo_v3 = device_fn("nvmlDeviceGetPciInfo_v3")(pci)

        def nvmlDeviceGetPciInfo(handle: _Handle) -> _Struct:
            return nvmlDeviceGetPciInfo_v3(handle)

        def nvmlDeviceGetMemoryInfo(handle: _Handle, version: int | None = None) -> _Struct:
            with state.lock:
                if version:
                    state._enter("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2")
                    gpu = state._gpu(handle, "nvmlDeviceGetMemoryInfo")
                    if version != mod.nvmlMemory_v2:
                        raise err(C["ARGUMENT_VERSION_MISMATCH"])
                    free = gpu.total_mib - gpu.used_mib - gpu.reserved_mib
                    return _Struct(version=version, total=gpu.total_mib * MiB, reserved=gpu.reserved_mib * MiB,
                                   free=free * MiB, used=gpu.used_mib * MiB)
                state._enter("nvmlDeviceGetMemoryInfo")
                gpu = state._gpu(handle, "nvmlDeviceGetMemoryInfo")
                used = gpu.used_mib + gpu.reserved_mib
                return _Struct(total=gpu.total_mib * MiB, free=(gpu.total_mib - used) * MiB, used=used * MiB)

        @device_fn("nvmlDeviceGetUtilizationRates")
        def nvmlDeviceGetUtilizationRates(gpu: FakeGpu) -> _Struct:
            return _Struct(gpu=gpu.util_gpu, memory=gpu.util_mem)

        @device_fn("nvmlDeviceGetTemperature")
        def nvmlDeviceGetTemperature(gpu: FakeGpu, sensor: int) -> int:
            if sensor != 0:
                raise err(C["INVALID_ARGUMENT"])
            return gpu.temp_c

        @device_fn("nvmlDeviceGetTemperatureV")
        def nvmlDeviceGetTemperatureV(gpu: FakeGpu, sensor: int, version: int = 0x0100000C) -> int:
            return gpu.temp_c

        @device_fn("nvmlDeviceGetPowerUsage")
        def nvmlDeviceGetPowerUsage(gpu: FakeGpu) -> int:
            return gpu.power_mw

        @device_fn("nvmlDeviceGetEnforcedPowerLimit")
        def nvmlDeviceGetEnforcedPowerLimit(gpu: FakeGpu) -> int:
            return gpu.limit_mw

        @device_fn("nvmlDeviceGetPowerManagementLimit")
        def nvmlDeviceGetPowerManagementLimit(gpu: FakeGpu) -> int:
            return gpu.limit_mw

        def procs(kind: str, suffix: str) -> Callable[[_Handle], list[_Struct]]:
            name = f"nvmlDevice{kind}RunningProcesses{suffix}"

            @device_fn(name)
            def fn(gpu: FakeGpu) -> list[_Struct]:
                source = gpu.compute if kind == "GetCompute" else gpu.graphics
                return [
                    _Struct(pid=p.pid, usedGpuMemory=None if p.used_mib is None else p.used_mib * MiB,
                            gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                    for p in list(source)
                ]

            fn.__name__ = name
            return fn

        def unversioned(kind: str) -> Callable[[_Handle], list[_Struct]]:
            v3 = procs(kind, "_v3")

            def fn(handle: _Handle) -> list[_Struct]:
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


def gpu(index: int = 0, **kwargs: Any) -> FakeGpu:
    """A FakeGpu with a distinct UUID and bus id per index."""
    defaults: dict[str, Any] = {
        "uuid": f"GPU-{index:08x}-aaaa-bbbb-cccc-{index:012x}",
        "bus_id": f"00000000:{0x17 + 0x10 * index:02X}:00.0",
    }
    defaults.update(kwargs)
    return FakeGpu(**defaults)
