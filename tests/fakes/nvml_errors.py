"""NVML's error codes and pynvml's error classes, built the way nvidia-ml-py builds them.

`NVMLError(code)` returns the `NVMLError_<Name>` subclass for that code, exactly as pynvml's
`_extractNVMLErrorsAsClasses` arranges, so code under test can catch either the base or a subclass.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from types import ModuleType
from typing import Any

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

MESSAGES = {
    1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
    5: "Already Initialized", 6: "Not Found", 7: "Insufficient Size", 8: "Insufficient External Power",
    9: "Driver Not Loaded", 10: "Timeout", 11: "Interrupt Request Issue", 12: "NVML Shared Library Not Found",
    13: "Function Not Found", 14: "Corrupted infoROM", 15: "GPU is lost", 16: "GPU requires restart",
    17: "The operating system has blocked the request.", 18: "RM has detected an NVML/RM version mismatch.",
    20: "Insufficient Memory", 999: "Unknown Error",
}

def make_errors(mod: ModuleType) -> None:
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
            return MESSAGES.get(self.value, f"NVML Error with code {self.value}")

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
