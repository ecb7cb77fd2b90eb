"""NVML through nvidia-ml-py (module `pynvml`): lazy, lock-guarded, and never raising.

Modelled on nvitop's `api/libnvml.py`: initialise on first use under a lock, shut down at exit,
and turn every NVML error into the `NA` sentinel so one failing device or one function an old
driver lacks costs a field, not the screen. The module is injectable so tests run a fake
`pynvml` that behaves like the real bindings.

Device order is NVML's (PCI bus order), which is not CUDA's default order; see docs/gpu-order.md.
"""

from __future__ import annotations

import atexit
import importlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from tui.core.gpu.types import (
    NA,
    GpuDevice,
    GpuProcess,
    GpuReading,
    NaType,
    ProcessKind,
    Source,
    Status,
)

MiB: Final = 1024 * 1024

# NVML return codes (nvml.h); stable ABI values, identical in every binding version.
ERROR_UNINITIALIZED: Final = 1
ERROR_NOT_SUPPORTED: Final = 3
ERROR_NO_PERMISSION: Final = 4
ERROR_NOT_FOUND: Final = 6
ERROR_INSUFFICIENT_SIZE: Final = 7
ERROR_DRIVER_NOT_LOADED: Final = 9
ERROR_LIBRARY_NOT_FOUND: Final = 12
ERROR_FUNCTION_NOT_FOUND: Final = 13
ERROR_GPU_IS_LOST: Final = 15
ERROR_RESET_REQUIRED: Final = 16
ERROR_LIB_RM_VERSION_MISMATCH: Final = 18
ERROR_ARGUMENT_VERSION_MISMATCH: Final = 25
ERROR_GPU_NOT_FOUND: Final = 28
ERROR_UNKNOWN: Final = 999

#: Codes that mean the device itself is gone: stop querying it for this pass.
DEVICE_DEAD_CODES: Final = frozenset({ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED, ERROR_GPU_NOT_FOUND, ERROR_UNKNOWN})

#: nvidia-ml-py's default process and memory queries (`*_v3`, memory v2) exist from driver R510 on.
MIN_DRIVER_MAJOR: Final = 510

#: How long a failed initialisation is remembered before NVML is tried again.
INIT_RETRY_S: Final = 30.0

NOT_AVAILABLE_PREFIX: Final = "NVML not available: "


@dataclass(frozen=True, slots=True)
class NvmlFailure:
    """Why one NVML call gave no value."""

    function: str
    code: int | None  # NVML return code, None for non-NVML errors
    text: str
    #: the function is missing from the driver or the bindings (FunctionNotFound, mismatch error).
    missing: bool = False


def _error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _decode(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return value


def _bindings_version(module: ModuleType) -> str | NaType:
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    if getattr(module, "__name__", "") == "pynvml":
        try:
            from importlib.metadata import version as dist_version

            return dist_version("nvidia-ml-py")
        except Exception:  # noqa: BLE001 - metadata is best effort
            return NA
    return NA


def _driver_major(version: str | NaType) -> int | None:
    if version is NA:
        return None
    head = str(version).split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _cuda_version_text(value: Any) -> str | NaType:
    if not isinstance(value, int) or value <= 0:
        return NA
    return f"{value // 1000}.{(value % 1000) // 10}"


def _default_loader() -> ModuleType:
    return importlib.import_module("pynvml")


class Nvml:
    """A `TelemetrySource` reading real devices. Thread-safe; `read()` passes are serialised.

    `module`: an already imported `pynvml` (tests inject a fake); else `loader()` imports it on
    first use. `proc_root` is where process names are looked up when NVML gives none.
    """

    def __init__(
        self,
        module: ModuleType | None = None,
        *,
        loader: Callable[[], ModuleType] | None = None,
        proc_root: Path | str = "/proc",
        clock: Callable[[], float] = time.monotonic,
        init_retry_s: float = INIT_RETRY_S,
        register_atexit: bool = True,
    ) -> None:
        self._module: ModuleType | None = module
        self._loader = loader or _default_loader
        self._proc_root = Path(proc_root)
        self._clock = clock
        self._init_retry_s = init_retry_s
        self._register_atexit = register_atexit
        self._lock = threading.RLock()
        self._initialized = False
        self._atexit_registered = False
        self._init_failure: tuple[Status, str, float] | None = None
        # Caches filled as functions prove missing or devices prove static.
        self._missing: set[str] = set()
        self._unsupported: set[tuple[int, str]] = set()
        self._handles: dict[int, Any] = {}
        self._static: dict[int, tuple[Any, Any, Any]] = {}
        self._versions: tuple[str | NaType, str | NaType, str | NaType] = (NA, NA, NA)
        self._memory_v2_ok = True
        self._bindings: str | NaType | None = None  # looked up once: metadata reads cost ~2 ms

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def module(self) -> ModuleType | None:
        return self._module

    def _ensure_init(self) -> tuple[Status, str] | None:
        """Initialise once; returns (status, message) when NVML cannot be used now."""
        if self._initialized:
            return None
        if self._init_failure is not None:
            status, message, at = self._init_failure
            if self._clock() - at < self._init_retry_s:
                return status, message
        failure = self._try_init()
        if failure is None:
            self._init_failure = None
            self._initialized = True
            if self._register_atexit and not self._atexit_registered:
                atexit.register(self.shutdown)
                self._atexit_registered = True
            self._read_versions()
            return None
        self._init_failure = (failure[0], failure[1], self._clock())
        return failure

    def _try_init(self) -> tuple[Status, str] | None:
        if self._module is None:
            try:
                self._module = self._loader()
            except ImportError as exc:
                return (
                    Status.LIBRARY_NOT_FOUND,
                    f"{NOT_AVAILABLE_PREFIX}the Python bindings (package nvidia-ml-py, module pynvml) "
                    f"are not installed ({exc}). Reinstall mtp-tune, or run `pip install nvidia-ml-py`.",
                )
        mod = self._module
        init = getattr(mod, "nvmlInit", None)
        if not callable(init):
            return (
                Status.VERSION_MISMATCH,
                f"{NOT_AVAILABLE_PREFIX}the installed `pynvml` module has no nvmlInit; another package "
                "replaced nvidia-ml-py's module. Run `pip install --force-reinstall nvidia-ml-py`.",
            )
        try:
            init()
        except Exception as exc:  # noqa: BLE001 - every init failure becomes a state
            return self._init_failure_state(exc)
        return None

    def _init_failure_state(self, exc: BaseException) -> tuple[Status, str]:
        code = _error_code(exc)
        if code == ERROR_LIBRARY_NOT_FOUND:
            return (
                Status.LIBRARY_NOT_FOUND,
                f"{NOT_AVAILABLE_PREFIX}no NVIDIA driver: the NVML library (libnvidia-ml.so.1) was not "
                "found. Install the NVIDIA driver (in a container: run it with the NVIDIA container "
                "toolkit, e.g. `--gpus all`), or plan without a GPU with `--simulate PROFILE`.",
            )
        if code == ERROR_DRIVER_NOT_LOADED:
            return (
                Status.DRIVER_NOT_LOADED,
                f"{NOT_AVAILABLE_PREFIX}the NVIDIA kernel driver is not loaded (NVML error 9). "
                "Check `nvidia-smi` and `lsmod | grep nvidia`; a reboot after a driver install usually fixes it.",
            )
        if code == ERROR_NO_PERMISSION:
            return (
                Status.NO_PERMISSION,
                f"{NOT_AVAILABLE_PREFIX}permission denied opening the NVIDIA devices (NVML error 4). "
                "Check that your user may open /dev/nvidia* (groups `video`/`render`).",
            )
        if code == ERROR_LIB_RM_VERSION_MISMATCH:
            return (
                Status.VERSION_MISMATCH,
                f"{NOT_AVAILABLE_PREFIX}driver and bindings disagree: the NVML library and the loaded "
                "kernel driver are different versions (NVML error 18), usually after a driver upgrade "
                "without a reboot. Reboot, or reload the nvidia kernel modules.",
            )
        if code is None:
            return (
                Status.ERROR,
                f"{NOT_AVAILABLE_PREFIX}initialising NVML failed: {type(exc).__name__}: {exc}.",
            )
        return Status.ERROR, f"{NOT_AVAILABLE_PREFIX}initialising NVML failed: {exc} (NVML error {code})."

    def shutdown(self) -> None:
        """Release NVML (registered with atexit); the next read initialises again."""
        with self._lock:
            if not self._initialized or self._module is None:
                return
            self._initialized = False
            self._handles.clear()
            fn = getattr(self._module, "nvmlShutdown", None)
            if callable(fn):
                try:
                    fn()
                except Exception:  # noqa: BLE001 - shutting down is best effort
                    pass

    # -- one guarded call ----------------------------------------------------------------------

    def _call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, NvmlFailure | None]:
        """Call `pynvml.<name>`; a value, or NA and why. Missing functions are remembered."""
        key = name if "version" not in kwargs else f"{name}(v{kwargs['version']:#x})"
        if key in self._missing:
            return NA, NvmlFailure(name, ERROR_FUNCTION_NOT_FOUND, "function not found", missing=True)
        mod = self._module
        fn = getattr(mod, name, None)
        if not callable(fn):
            self._missing.add(key)
            return NA, NvmlFailure(name, None, "not in these bindings", missing=True)
        mismatch = getattr(mod, "NVMLLibraryMismatchError", None)
        nvml_error = getattr(mod, "NVMLError", None)
        try:
            return _decode(fn(*args, **kwargs)), None
        except Exception as exc:  # noqa: BLE001 - NVML errors and anything odd become NA
            if isinstance(mismatch, type) and isinstance(exc, mismatch):
                self._missing.add(key)
                return NA, NvmlFailure(name, None, str(exc), missing=True)
            code = _error_code(exc) if isinstance(nvml_error, type) and isinstance(exc, nvml_error) else None
            if code in (ERROR_FUNCTION_NOT_FOUND, ERROR_ARGUMENT_VERSION_MISMATCH):
                self._missing.add(key)
                return NA, NvmlFailure(name, code, str(exc) or "function not found", missing=True)
            text = f"{type(exc).__name__}: {exc}" if code is None else f"{exc} (NVML error {code})"
            return NA, NvmlFailure(name, code, text)

    def _device_call(self, index: int, name: str, *args: Any, **kwargs: Any) -> tuple[Any, NvmlFailure | None]:
        """Like `_call`, but a NotSupported answer is remembered per device."""
        if (index, name) in self._unsupported:
            return NA, NvmlFailure(name, ERROR_NOT_SUPPORTED, "Not Supported")
        value, failure = self._call(name, *args, **kwargs)
        if failure is not None and failure.code == ERROR_NOT_SUPPORTED:
            self._unsupported.add((index, name))
        return value, failure

    # -- reading -------------------------------------------------------------------------------

    def _read_versions(self) -> None:
        driver, _ = self._call("nvmlSystemGetDriverVersion")
        cuda, _ = self._call("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is NA:
            cuda, _ = self._call("nvmlSystemGetCudaDriverVersion")
        nvml_version, _ = self._call("nvmlSystemGetNVMLVersion")
        self._versions = (
            driver if isinstance(driver, str) else NA,
            _cuda_version_text(cuda),
            nvml_version if isinstance(nvml_version, str) else NA,
        )

    def read(self, ours: Iterable[int] | int | None = ()) -> GpuReading:
        """One pass over every device. Never raises; `ours` is our server's pid, or a set of pids."""
        ours_set = frozenset((ours,) if isinstance(ours, int) else (ours or ()))
        with self._lock:
            try:
                return self._read_locked(ours_set)
            except Exception as exc:  # noqa: BLE001 - last line of defence: a state, not a crash
                return GpuReading(
                    Source.NONE,
                    Status.ERROR,
                    f"{NOT_AVAILABLE_PREFIX}unexpected error while reading NVML: {type(exc).__name__}: {exc}.",
                )

    def _read_locked(self, ours: frozenset[int]) -> GpuReading:
        failure = self._ensure_init()
        if self._bindings is None and self._module is not None:
            self._bindings = _bindings_version(self._module)
        bindings = self._bindings if self._bindings is not None else NA
        if failure is not None:
            status, message = failure
            return GpuReading(Source.NONE, status, message, bindings_version=bindings)
        driver, cuda, nvml_version = self._versions
        mismatch: list[str] = []
        major = _driver_major(driver)
        if major is not None and major < MIN_DRIVER_MAJOR:
            mismatch.append(
                f"driver {driver} is older than nvidia-ml-py {bindings} expects (R{MIN_DRIVER_MAJOR} or "
                "newer for its process and memory queries); update the driver or install an older "
                "nvidia-ml-py"
            )
        count, count_failure = self._call("nvmlDeviceGetCount")
        if count is NA:
            assert count_failure is not None
            return GpuReading(
                Source.NVML,
                Status.ERROR,
                f"{NOT_AVAILABLE_PREFIX}counting devices failed: {count_failure.text}.",
                driver_version=driver,
                cuda_driver_version=cuda,
                nvml_version=nvml_version,
                bindings_version=bindings,
            )
        devices: list[GpuDevice] = []
        warnings: list[str] = []
        for index in range(int(count)):
            device = self._read_device(index, ours, mismatch)
            if device.error:
                warnings.append(f"GPU {index}: {device.error}")
            devices.append(device)
        if not devices:
            status, message = Status.NO_DEVICES, (
                f"NVML works (driver {driver}) but reports no devices. Check `nvidia-smi`; in a "
                "container, the GPUs may not be passed through (NVIDIA_VISIBLE_DEVICES)."
            )
        elif mismatch:
            status = Status.VERSION_MISMATCH
            message = "driver and bindings disagree: " + "; ".join(dict.fromkeys(mismatch)) + "."
            warnings.insert(0, message)
        else:
            status, message = Status.OK, f"{len(devices)} NVIDIA device(s), driver {driver}"
        return GpuReading(
            Source.NVML,
            status,
            message,
            tuple(devices),
            tuple(warnings),
            driver_version=driver,
            cuda_driver_version=cuda,
            nvml_version=nvml_version,
            bindings_version=bindings,
        )

    def _handle(self, index: int) -> tuple[Any, NvmlFailure | None]:
        handle = self._handles.get(index)
        if handle is not None:
            return handle, None
        handle, failure = self._call("nvmlDeviceGetHandleByIndex", index)
        if failure is None:
            self._handles[index] = handle
        return handle, failure

    def _dead(self, index: int, failure: NvmlFailure) -> GpuDevice:
        self._handles.pop(index, None)
        static = self._static.get(index, (NA, NA, NA))
        return GpuDevice(
            index=index,
            name=static[0],
            uuid=static[1],
            pci_bus_id=static[2],
            memory_total_mib=NA,
            memory_used_mib=NA,
            memory_free_mib=NA,
            processes_status="not available: device failed",
            error=(
                f"device failed: {failure.text} in {failure.function}. Check `nvidia-smi` and `dmesg`"
                + ("; a lost GPU needs a reset or a reboot" if failure.code in DEVICE_DEAD_CODES else "")
            ),
        )

    def _read_device(self, index: int, ours: frozenset[int], mismatch: list[str]) -> GpuDevice:
        handle, failure = self._handle(index)
        if failure is not None:
            return self._dead(index, failure)
        static = self._static.get(index)
        if static is None:
            name, f1 = self._call("nvmlDeviceGetName", handle)
            if f1 is not None and f1.code in DEVICE_DEAD_CODES:
                return self._dead(index, f1)
            uuid, _ = self._call("nvmlDeviceGetUUID", handle)
            pci, _ = self._call("nvmlDeviceGetPciInfo_v3", handle)
            if pci is NA:
                pci, _ = self._call("nvmlDeviceGetPciInfo", handle)
            bus = _decode(getattr(pci, "busId", NA)) if pci is not NA else NA
            static = (name, uuid, bus or NA)
            if name is not NA and uuid is not NA:
                self._static[index] = static

        memory, mem_failure = self._memory(index, handle)
        if mem_failure is not None and mem_failure.code in DEVICE_DEAD_CODES:
            return self._dead(index, mem_failure)
        if mem_failure is not None and mem_failure.missing:
            mismatch.append("no memory query works (nvmlDeviceGetMemoryInfo v1/v2 missing)")
        total = used = free = NA
        if memory is not NA:
            total = int(memory.total) // MiB
            used = int(memory.used) // MiB
            free = int(memory.free) // MiB

        util, _ = self._device_call(index, "nvmlDeviceGetUtilizationRates", handle)
        temp, _ = self._device_call(index, "nvmlDeviceGetTemperature", handle, 0)  # NVML_TEMPERATURE_GPU
        if temp is NA and "nvmlDeviceGetTemperature" in self._missing:
            temp, _ = self._device_call(index, "nvmlDeviceGetTemperatureV", handle, 0)
        power, _ = self._device_call(index, "nvmlDeviceGetPowerUsage", handle)
        limit, _ = self._device_call(index, "nvmlDeviceGetEnforcedPowerLimit", handle)
        if limit is NA:
            limit, _ = self._device_call(index, "nvmlDeviceGetPowerManagementLimit", handle)

        processes, proc_status = self._processes(index, handle, ours, mismatch)
        return GpuDevice(
            index=index,
            name=static[0],
            uuid=static[1],
            pci_bus_id=static[2],
            memory_total_mib=total,
            memory_used_mib=used,
            memory_free_mib=free,
            utilization_gpu_percent=int(util.gpu) if util is not NA else NA,
            utilization_memory_percent=int(util.memory) if util is not NA else NA,
            temperature_c=int(temp) if isinstance(temp, int) else NA,
            power_draw_w=round(power / 1000.0, 1) if isinstance(power, int) else NA,
            power_limit_w=round(limit / 1000.0, 1) if isinstance(limit, int) else NA,
            processes=processes,
            processes_status=proc_status,
        )

    def _memory(self, index: int, handle: Any) -> tuple[Any, NvmlFailure | None]:
        """Memory v2 (what nvidia-smi shows: "used" excludes driver-reserved memory), else v1."""
        version = getattr(self._module, "nvmlMemory_v2", None)
        if self._memory_v2_ok and isinstance(version, int):
            memory, failure = self._call("nvmlDeviceGetMemoryInfo", handle, version=version)
            if failure is None or not failure.missing:
                return memory, failure
            self._memory_v2_ok = False
        return self._call("nvmlDeviceGetMemoryInfo", handle)

    def _process_list(self, family: str, handle: Any) -> tuple[list[Any] | NaType, NvmlFailure | None]:
        """`<family>_v3`, then `_v2`, then the unversioned call; NA when none works."""
        last: NvmlFailure | None = None
        for suffix in ("_v3", "_v2", ""):
            value, failure = self._call(family + suffix, handle)
            if failure is None:
                return list(value or ()), None
            last = failure
            if not failure.missing:
                return NA, failure
        return NA, last

    def _processes(
        self, index: int, handle: Any, ours: frozenset[int], mismatch: list[str]
    ) -> tuple[tuple[GpuProcess, ...], str]:
        merged: dict[int, tuple[set[str], int | NaType]] = {}
        notes: list[str] = []
        for family, kind in (
            ("nvmlDeviceGetComputeRunningProcesses", "compute"),
            ("nvmlDeviceGetGraphicsRunningProcesses", "graphics"),
        ):
            if (index, family) in self._unsupported:
                notes.append(f"{kind}: not supported")
                continue
            infos, failure = self._process_list(family, handle)
            if infos is NA:
                assert failure is not None
                if failure.missing:
                    notes.append(f"{kind}: driver and bindings disagree")
                    mismatch.append(f"no {kind} process query works ({family}_v3/_v2/unversioned missing)")
                elif failure.code == ERROR_NOT_SUPPORTED:
                    self._unsupported.add((index, family))
                    notes.append(f"{kind}: not supported")
                else:
                    notes.append(f"{kind}: {failure.text}")
                continue
            for info in infos:
                pid = getattr(info, "pid", None)
                if not isinstance(pid, int):
                    continue
                used_bytes = getattr(info, "usedGpuMemory", None)
                used: int | NaType = int(used_bytes) // MiB if isinstance(used_bytes, int) else NA
                kinds, prev = merged.get(pid, (set(), NA))
                kinds.add(kind)
                if prev is not NA and (used is NA or prev > used):  # type: ignore[operator]
                    used = prev
                merged[pid] = (kinds, used)
        processes = []
        for pid, (kinds, used) in sorted(merged.items()):
            kind = ProcessKind.BOTH if len(kinds) == 2 else ProcessKind(next(iter(kinds)))
            processes.append(GpuProcess(pid, self._process_name(pid), used, kind, pid in ours))
        status = "ok" if not notes else "not available: " + "; ".join(notes)
        return tuple(processes), status

    def _process_name(self, pid: int) -> str | NaType:
        """NVML's name for the pid, else /proc/PID/comm, else NA (the process may already be gone).

        Not cached: a pid can be reused between two passes, and the lookup is cheap.
        """
        name: str | NaType = NA
        value, _ = self._call("nvmlSystemGetProcessName", pid)
        if isinstance(value, str) and value.strip():
            name = os.path.basename(value.strip()) or value.strip()
        else:
            try:
                name = (self._proc_root / str(pid) / "comm").read_text().strip() or NA
            except OSError:
                name = NA
        return name
