"""What NVML's answers mean: return codes, why one call gave no value, what an init failure tells the user.

Pure values and functions (nothing calls NVML here), shared by the guarded call layer (`nvml_calls`),
the per-device reader (`nvml_devices`) and the pass over all devices (`nvml`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from tui.core.gpu.types import NA, NaType, Status

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

NOT_AVAILABLE_PREFIX: Final = "NVML not available: "


@dataclass(frozen=True, slots=True)
class NvmlFailure:
    """Why one NVML call gave no value."""

    function: str
    code: int | None  # NVML return code, None for non-NVML errors
    text: str
    #: the function is missing from the driver or the bindings (FunctionNotFound, mismatch error).
    missing: bool = False


def error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def decode(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return value


def bindings_version(module: ModuleType) -> str | NaType:
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    if getattr(module, "__name__", "") == "pynvml":
        return _dist_info_version(getattr(module, "__file__", None))
    return NA


def _dist_info_version(module_file: str | None) -> str | NaType:
    """nvidia-ml-py's version from its dist-info folder's name beside pynvml.py. Not importlib.metadata:
    importing it costs 30 ms (email, zipfile, csv) that every `mtp-tune plan` paid on a machine with the
    bindings installed; pip names the folder `<dist>-<version>.dist-info`, which is all this needs."""
    if not module_file:
        return NA
    try:
        found = sorted(Path(module_file).parent.glob("nvidia_ml_py-*.dist-info"))
    except OSError:
        return NA
    if not found:
        return NA
    version = found[-1].name[len("nvidia_ml_py-"):-len(".dist-info")]
    return version or NA


def driver_major(version: str | NaType) -> int | None:
    if version is NA:
        return None
    head = str(version).split(".", 1)[0]
    return int(head) if head.isdigit() else None


def cuda_version_text(value: Any) -> str | NaType:
    if not isinstance(value, int) or value <= 0:
        return NA
    return f"{value // 1000}.{(value % 1000) // 10}"


def init_failure_state(exc: BaseException) -> tuple[Status, str]:
    """The state and the one-sentence fix for an exception from `nvmlInit`."""
    code = error_code(exc)
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

# Clocks event (throttle) reasons (nvml.h nvmlClocksEventReason*): the bits that slow a measurement
# down for a reason outside the configuration. Idle, application clocks, sync boost and the display
# clock say nothing about speed; the software power cap is normal under load on a laptop.
CLOCK_EVENT_SLOWDOWNS: Final = {
    0x8: "hardware slowdown (temperature or power brake)",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}


def clock_slowdowns(mask: int) -> list[str]:
    """The slowdown reasons set in NVML's clocks event mask, in bit order."""
    return [why for bit, why in CLOCK_EVENT_SLOWDOWNS.items() if mask & bit]
