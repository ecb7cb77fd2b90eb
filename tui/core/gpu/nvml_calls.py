"""The guarded NVML call layer: lazy initialisation under a lock, shutdown at exit, calls that never raise.

Modelled on nvitop's `api/libnvml.py`. Every call returns a value, or `NA` and an `NvmlFailure`;
functions an old driver or old bindings lack are remembered so they cost one failed call, not one
per pass, and a NotSupported answer is remembered per device. A failed initialisation is
remembered for `INIT_RETRY_S`, so a machine without a driver is not probed on every pass.
"""

from __future__ import annotations

import atexit
import importlib
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from tui.core.gpu.nvml_codes import (
    ERROR_ARGUMENT_VERSION_MISMATCH,
    ERROR_FUNCTION_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    NOT_AVAILABLE_PREFIX,
    NvmlFailure,
    decode,
    error_code,
    init_failure_state,
)
from tui.core.gpu.types import NA, Status

#: How long a failed initialisation is remembered before NVML is tried again.
INIT_RETRY_S: Final = 30.0


def _default_loader() -> ModuleType:
    return importlib.import_module("pynvml")


class NvmlCalls:
    """One `pynvml` module, initialised on first use; `lock` serialises whoever uses it."""

    def __init__(
        self,
        module: ModuleType | None = None,
        *,
        loader: Callable[[], ModuleType] | None = None,
        clock: Callable[[], float] = time.monotonic,
        init_retry_s: float = INIT_RETRY_S,
        register_atexit: bool = True,
    ) -> None:
        self._module: ModuleType | None = module
        self._loader = loader or _default_loader
        self._clock = clock
        self._init_retry_s = init_retry_s
        self._register_atexit = register_atexit
        self.lock = threading.RLock()
        self.initialized = False
        self._atexit_registered = False
        self._init_failure: tuple[Status, str, float] | None = None
        #: functions (with their struct version, if any) proven missing from driver or bindings.
        self.missing: set[str] = set()
        #: (device index, function) pairs that answered NotSupported.
        self.unsupported: set[tuple[int, str]] = set()
        self._handles: dict[int, Any] = {}

    @property
    def module(self) -> ModuleType | None:
        return self._module

    # -- lifecycle ---------------------------------------------------------------------------

    def ensure_init(self) -> tuple[Status, str] | None:
        """Initialise once; returns (status, message) when NVML cannot be used now."""
        if self.initialized:
            return None
        if self._init_failure is not None:
            status, message, at = self._init_failure
            if self._clock() - at < self._init_retry_s:
                return status, message
        failure = self._try_init()
        if failure is None:
            self._init_failure = None
            self.initialized = True
            if self._register_atexit and not self._atexit_registered:
                atexit.register(self.shutdown)
                self._atexit_registered = True
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
        init = getattr(self._module, "nvmlInit", None)
        if not callable(init):
            return (
                Status.VERSION_MISMATCH,
                f"{NOT_AVAILABLE_PREFIX}the installed `pynvml` module has no nvmlInit; another package "
                "replaced nvidia-ml-py's module. Run `pip install --force-reinstall nvidia-ml-py`.",
            )
        try:
            init()
        except Exception as exc:  # noqa: BLE001 - every init failure becomes a state
            return init_failure_state(exc)
        return None

    def shutdown(self) -> None:
        """Release NVML (registered with atexit); the next use initialises again."""
        with self.lock:
            if not self.initialized or self._module is None:
                return
            self.initialized = False
            self._handles.clear()
            fn = getattr(self._module, "nvmlShutdown", None)
            if callable(fn):
                try:
                    fn()
                except Exception:  # noqa: BLE001 - shutting down is best effort
                    pass

    # -- one guarded call ----------------------------------------------------------------------

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, NvmlFailure | None]:
        """Call `pynvml.<name>`; a value, or NA and why. Missing functions are remembered."""
        key = name if "version" not in kwargs else f"{name}(v{kwargs['version']:#x})"
        if key in self.missing:
            return NA, NvmlFailure(name, ERROR_FUNCTION_NOT_FOUND, "function not found", missing=True)
        mod = self._module
        fn = getattr(mod, name, None)
        if not callable(fn):
            self.missing.add(key)
            return NA, NvmlFailure(name, None, "not in these bindings", missing=True)
        mismatch = getattr(mod, "NVMLLibraryMismatchError", None)
        nvml_error = getattr(mod, "NVMLError", None)
        try:
            return decode(fn(*args, **kwargs)), None
        except Exception as exc:  # noqa: BLE001 - NVML errors and anything odd become NA
            if isinstance(mismatch, type) and isinstance(exc, mismatch):
                self.missing.add(key)
                return NA, NvmlFailure(name, None, str(exc), missing=True)
            code = error_code(exc) if isinstance(nvml_error, type) and isinstance(exc, nvml_error) else None
            if code in (ERROR_FUNCTION_NOT_FOUND, ERROR_ARGUMENT_VERSION_MISMATCH):
                self.missing.add(key)
                return NA, NvmlFailure(name, code, str(exc) or "function not found", missing=True)
            text = f"{type(exc).__name__}: {exc}" if code is None else f"{exc} (NVML error {code})"
            return NA, NvmlFailure(name, code, text)

    def device_call(self, index: int, name: str, *args: Any, **kwargs: Any) -> tuple[Any, NvmlFailure | None]:
        """Like `call`, but a NotSupported answer is remembered per device."""
        if (index, name) in self.unsupported:
            return NA, NvmlFailure(name, ERROR_NOT_SUPPORTED, "Not Supported")
        value, failure = self.call(name, *args, **kwargs)
        if failure is not None and failure.code == ERROR_NOT_SUPPORTED:
            self.unsupported.add((index, name))
        return value, failure

    # -- device handles (valid until shutdown) -------------------------------------------------

    def handle(self, index: int) -> tuple[Any, NvmlFailure | None]:
        handle = self._handles.get(index)
        if handle is not None:
            return handle, None
        handle, failure = self.call("nvmlDeviceGetHandleByIndex", index)
        if failure is None:
            self._handles[index] = handle
        return handle, failure

    def forget_handle(self, index: int) -> None:
        self._handles.pop(index, None)
