"""Launching llama-server for a sweep: one supervisor for the whole sweep, a first-decode check,
and telling memory allocation failures apart from everything else.

Why the extra classification on top of `failures.classify`: a sweep must know *whether memory ran
out* to start its knob search, even when llama.cpp's last words point elsewhere (a draft context
whose compute buffer did not fit ends with "failed to create MTP context"; an RPC device's buffer
has a name like `RPC0[127.0.0.1:50052]`; a process under an address-space limit may abort right
after "insufficient memory"). The first allocation error in the log decides.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import httpx

from tui.core.server.failures import Failure, FailureKind
from tui.core.server.handle import RunningSettings
from tui.core.options.settings import Settings

#: Tokens decoded right after a launch to catch first-decode OOMs.
FIRST_DECODE_TOKENS = 4
DEFAULT_READY_TIMEOUT = 120.0
#: Log lines that mean an allocation failed, for failures the classifier does not name as OOM
#: (e.g. an RPC device's buffer, or an abort right after `insufficient memory`).
ALLOC_FAIL = re.compile(
    r"failed to allocate|insufficient memory|out of memory|bad_alloc|Cannot allocate memory|"
    r"unable to allocate|alloc(?:ation)? failed", re.I)
#: `--fit` could not meet the target at all and loaded with the original parameters.
_FIT_GAVE_UP = re.compile(r"failed to fit params to free device memory|cannot meet free memory target.*?(?:abort|giving up)", re.I)
_HOST_BUF = re.compile(r"\b(?:CPU|Host)\b|cpu_buffer_type", re.I)
_FIT_PROJECTED = re.compile(r"projected to use (\d+) MiB of device memory vs\. (\d+) MiB of free device memory")


@dataclass
class LaunchOutcome:
    """A launch attempt: ready and past a first decode (`ok`), or why not."""

    ok: bool
    url: str | None = None
    failure: Failure | None = None
    memory_failure: bool = False  # an allocation failed (at load or at the first decode)
    memory_on_device: bool = False  # ... on a GPU/RPC device rather than in host RAM
    fit_gave_up: bool = False  # --fit could not meet the fit-target and loaded unchanged
    at_first_decode: bool = False
    cancelled: bool = False
    memory: dict[str, Any] | None = None  # MemoryReport.to_dict()
    devices: list[dict[str, Any]] = field(default_factory=list)  # {"name", "free_mib", ...} as the server saw them
    fit_headroom_mib: int | None = None  # free minus projected use in --fit's first measurement (one device)
    log_path: str | None = None
    seconds: float = 0.0

    @property
    def reason(self) -> str:
        if self.failure is not None:
            return self.failure.explain()
        return "the server did not start"


class Backend(Protocol):
    """Launches llama-server for one configuration at a time (`SupervisorBackend` is the real one)."""

    def launch(self, settings: Settings, cancel: threading.Event) -> LaunchOutcome: ...

    def stop(self) -> None: ...

    def close(self) -> None: ...

    def failure(self) -> Failure | None:
        """How the current server ended, if it has (after a probe saw it go away)."""
        ...


class SupervisorBackend:
    """Launches through `tui.core.server.supervisor.Supervisor` (one process at a time, logs kept)."""

    def __init__(self, binary: str | Path, *, env: Mapping[str, str] | None = None,
                 ready_timeout: float = DEFAULT_READY_TIMEOUT, first_decode_tokens: int = FIRST_DECODE_TOKENS,
                 log_dir: str | Path | None = None) -> None:
        self.binary = Path(binary)
        self.env = env
        self.ready_timeout = ready_timeout
        self.first_decode_tokens = first_decode_tokens
        self.log_dir = log_dir
        self._sup: Any = None
        #: What the first-decode check sends (the sweep sets the suite's first prompt).
        self.first_decode_messages: list[dict[str, str]] | None = None
        self.first_decode_prompt: str | None = None
        self._lines: list[str] = []

    def launch(self, settings: Settings, cancel: threading.Event) -> LaunchOutcome:
        from tui.core.server.events import ServerState
        from tui.core.server.supervisor import Supervisor

        self.stop()
        t0 = time.monotonic()
        wanted = replace(settings, port=None)
        if self._sup is None:
            # One supervisor for the whole sweep: launch ids (and log file names) stay distinct.
            self._sup = Supervisor(self.binary, wanted, env=self.env, ready_timeout=self.ready_timeout,
                                   log_dir=self.log_dir)
            self._sup.on_log_line(self._on_line)
        sup = self._sup
        self._lines = []
        sup.start(wanted)
        state = sup.state
        while not cancel.is_set():
            state = sup.wait_ready(timeout=0.2)
            if state == ServerState.READY or state.final:
                break
        if cancel.is_set() and state != ServerState.READY:
            self.stop()
            return LaunchOutcome(False, cancelled=True, seconds=time.monotonic() - t0)
        out = LaunchOutcome(False, url=sup.base_url, log_path=str(sup.log_path) if sup.log_path else None)
        if state == ServerState.READY:
            err, answered = self._first_decode(sup.base_url, settings.api_key)
            if err is None:
                out.ok = True
            else:
                out.at_first_decode = True
                if not answered:  # the connection broke: the server is probably going down; let it finish
                    sup.wait_for([ServerState.FAILED, ServerState.EXITED, ServerState.STOPPED], 5.0)
                if not sup.state.final:
                    # Alive but the request failed (e.g. HTTP 500 "std::bad_alloc"): that is the failure.
                    out.failure = Failure(FailureKind.UNKNOWN, f"The first decode failed: {err}.", None,
                                          "Check the server log.", raw_log_path=sup.log_path, evidence=err)
                    self._lines.append(err)  # so an allocation error in the response is classified too
        self._finish(out, sup, self._lines)
        out.seconds = time.monotonic() - t0
        return out

    def _on_line(self, line: str) -> None:
        lines = self._lines
        if len(lines) < 20000:
            lines.append(line)

    def _finish(self, out: LaunchOutcome, sup: Any, lines: list[str]) -> None:
        if not out.ok and out.failure is None:
            sup.wait_for([s for s in type(sup.state) if s.final], 10.0)
            out.failure = sup.failure
        snap = sup.memory_snapshot()
        out.memory = snap
        rep = sup.memory_report()
        out.devices = list(getattr(rep, "devices", []) or [])
        if not out.devices:
            out.devices = _devices_from_lines(lines)
        if not out.ok:
            classify_memory(out, lines)

    def _first_decode(self, url: str | None, api_key: str | None) -> tuple[str | None, bool]:
        """A few tokens of the probe's first prompt: MTP OOMs often come at the first decode.
        Returns (error or None, whether the server answered at all)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        n = self.first_decode_tokens
        if self.first_decode_messages:
            path = "/v1/chat/completions"
            body: dict[str, Any] = {"messages": self.first_decode_messages, "max_tokens": n, "n_predict": n,
                                    "temperature": 0, "cache_prompt": False}
        else:
            path = "/completion"
            body = {"prompt": self.first_decode_prompt or "Hello", "n_predict": n, "temperature": 0, "cache_prompt": False}
        try:
            with httpx.Client(timeout=httpx.Timeout(120.0, connect=5.0), trust_env=False, headers=headers) as c:
                r = c.post(f"{url}{path}", json=body)
        except httpx.HTTPError as e:
            return f"{type(e).__name__}: {e}", False
        if r.status_code != 200:
            return f"HTTP {r.status_code}: {r.text[:300]}", True
        return None, True

    def failure(self) -> Failure | None:
        sup = self._sup
        if sup is None:
            return None
        if not sup.state.final:
            from tui.core.server.events import ServerState

            sup.wait_for([ServerState.FAILED, ServerState.EXITED, ServerState.STOPPED], 2.0)
        if not sup.state.final or sup.failure is None:
            return None
        out = LaunchOutcome(False, failure=sup.failure)
        classify_memory(out, self._lines)  # e.g. an RPC buffer or an abort after "insufficient memory"
        return out.failure

    def running_settings(self) -> RunningSettings | None:
        """What the current server was launched with, as its supervisor records it (runs are labelled from this)."""
        return self._sup.running_settings() if self._sup is not None else None

    def lines(self) -> list[str]:
        return list(self._lines)

    def stop(self) -> None:
        """Stop the running server (the supervisor stays for the next launch)."""
        if self._sup is not None:
            with contextlib.suppress(Exception):
                self._sup.stop()

    def close(self) -> None:
        """Stop the server and release the supervisor."""
        sup, self._sup = self._sup, None
        if sup is not None:
            with contextlib.suppress(Exception):
                sup.close()


_DEVICE_LINE = re.compile(r"using device (\S+) \((.*?)\)(?: \((.*?)\))? - (\d+) MiB free")


def _devices_from_lines(lines: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for ln in lines:
        m = _DEVICE_LINE.search(ln)
        if m:
            out.append({"name": m.group(1), "description": m.group(2), "free_mib": int(m.group(4))})
    return out


def classify_memory(out: LaunchOutcome, lines: Sequence[str]) -> None:
    """Set `memory_failure`, `memory_on_device` and `fit_gave_up` from the failure and the log."""
    kind = out.failure.kind if out.failure is not None else None
    alloc_lines = [ln for ln in lines if ALLOC_FAIL.search(ln)]
    # An allocation failure in the log wins over the classifier's first guess: e.g. a draft context
    # whose compute buffer does not fit ends with "failed to create MTP context", which reads like
    # a model without MTP layers.
    out.memory_failure = kind in (FailureKind.OOM_DEVICE, FailureKind.OOM_HOST) or bool(alloc_lines)
    if kind == FailureKind.OOM_DEVICE:
        out.memory_on_device = True
    elif kind == FailureKind.OOM_HOST:
        out.memory_on_device = False
    elif alloc_lines:
        out.memory_on_device = not all(_HOST_BUF.search(ln) for ln in alloc_lines)
    out.fit_gave_up = any(_FIT_GAVE_UP.search(ln) for ln in lines)
    projected = [m for m in (_FIT_PROJECTED.search(ln) for ln in lines) if m]
    if len(projected) == 1:
        out.fit_headroom_mib = int(projected[0].group(2)) - int(projected[0].group(1))
    if out.memory_failure and kind not in (FailureKind.OOM_DEVICE, FailureKind.OOM_HOST):
        from tui.core.server.failures import strip_prefix

        where = "a device (GPU or RPC)" if out.memory_on_device else "host memory"
        first = strip_prefix(alloc_lines[0]).strip() if alloc_lines else ""
        old = out.failure
        out.failure = Failure(
            FailureKind.OOM_DEVICE if out.memory_on_device else FailureKind.OOM_HOST,
            f"A memory allocation failed on {where}: {first}" + (f" (then: {old.message})" if old is not None else ""),
            old.flag_or_file if old is not None else None,
            "Lower the context or the micro-batch, quantize the KV caches, or raise --fit-target so --fit leaves more free.",
            raw_log_path=old.raw_log_path if old is not None else None,
            exit_code=old.exit_code if old is not None else None,
            signal=old.signal if old is not None else None, evidence=alloc_lines[0] if alloc_lines else None,
        )


