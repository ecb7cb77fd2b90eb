"""NVML through nvidia-ml-py (module `pynvml`): one pass over every device, lock-guarded, never raising.

Modelled on nvitop's `api/libnvml.py`: `nvml_calls` initialises on first use under a lock, shuts
down at exit and turns every NVML error into the `NA` sentinel, so one failing device or one
function an old driver lacks costs a field, not the screen; `nvml_devices` reads one device. The
module is injectable so tests run a fake `pynvml` that behaves like the real bindings.

Device order is NVML's (PCI bus order), which is not CUDA's default order; see docs/gpu-order.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType

from tui.core.gpu.nvml_calls import INIT_RETRY_S, NvmlCalls
from tui.core.gpu.nvml_codes import MIN_DRIVER_MAJOR, NOT_AVAILABLE_PREFIX, bindings_version, cuda_version_text, driver_major
from tui.core.gpu.nvml_devices import DeviceReader
from tui.core.gpu.types import NA, GpuDevice, GpuReading, NaType, Source, Status


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
        self._calls = NvmlCalls(module, loader=loader, clock=clock, init_retry_s=init_retry_s,
                                register_atexit=register_atexit)
        self._devices = DeviceReader(self._calls, proc_root)
        self._versions: tuple[str | NaType, str | NaType, str | NaType] = (NA, NA, NA)
        self._bindings: str | NaType | None = None  # looked up once: metadata reads cost ~2 ms

    @property
    def module(self) -> ModuleType | None:
        return self._calls.module

    def shutdown(self) -> None:
        """Release NVML (registered with atexit); the next read initialises again."""
        self._calls.shutdown()

    def read(self, ours: Iterable[int] | int | None = ()) -> GpuReading:
        """One pass over every device. Never raises; `ours` is our server's pid, or a set of pids."""
        ours_set = frozenset((ours,) if isinstance(ours, int) else (ours or ()))
        with self._calls.lock:
            try:
                return self._read_locked(ours_set)
            except Exception as exc:  # noqa: BLE001 - last line of defence: a state, not a crash
                return GpuReading(
                    Source.NONE,
                    Status.ERROR,
                    f"{NOT_AVAILABLE_PREFIX}unexpected error while reading NVML: {type(exc).__name__}: {exc}.",
                )

    def _read_versions(self) -> None:
        call = self._calls.call
        driver, _ = call("nvmlSystemGetDriverVersion")
        cuda, _ = call("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is NA:
            cuda, _ = call("nvmlSystemGetCudaDriverVersion")
        nvml_version, _ = call("nvmlSystemGetNVMLVersion")
        self._versions = (
            driver if isinstance(driver, str) else NA,
            cuda_version_text(cuda),
            nvml_version if isinstance(nvml_version, str) else NA,
        )

    def _read_locked(self, ours: frozenset[int]) -> GpuReading:
        was_initialized = self._calls.initialized
        failure = self._calls.ensure_init()
        if failure is None and not was_initialized:
            self._read_versions()
        if self._bindings is None and self._calls.module is not None:
            self._bindings = bindings_version(self._calls.module)
        bindings = self._bindings if self._bindings is not None else NA
        if failure is not None:
            status, message = failure
            return GpuReading(Source.NONE, status, message, bindings_version=bindings)
        driver, cuda, nvml_version = self._versions
        mismatch: list[str] = []
        major = driver_major(driver)
        if major is not None and major < MIN_DRIVER_MAJOR:
            mismatch.append(
                f"driver {driver} is older than nvidia-ml-py {bindings} expects (R{MIN_DRIVER_MAJOR} or "
                "newer for its process and memory queries); update the driver or install an older "
                "nvidia-ml-py"
            )
        count, count_failure = self._calls.call("nvmlDeviceGetCount")
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
            device = self._devices.read_device(index, ours, mismatch)
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
