"""The one trial launcher: every experiment (sweep, tune, A/B, knob searches) starts llama-server
through `SupervisorLauncher`, waits until it is ready, decodes a few tokens (MTP runs out of memory at the
first decode more often than at load) and classifies a failure (`failures.classify_memory`).

Why one: four experiments each built their own supervisor wrapper, and each wrote every trial into
the user's launch history, which the TUI restores at its next start (one CLI tune left 24 history
files; quitting during an A/B restored its MTP-off side). A trial is kept in the results store and
its experiment's state file, so the launcher's supervisor runs with `record_history=False`.

Simulated GPUs played by capped loopback stand-ins (`planning.standin.StandIns`) are an option of
the same launcher (`stand_ins=`): every launch goes to them (`--rpc`) with the fit-target translated
to what the stand-in reports, fit-target_i = host RAM - simulated free_i + margin_i, so an
allocation past the simulated free memory fails for real and a fit-target search walks the user's
margin (what `--fit-target` would be on the real GPU). `CountingLauncher` is the one wrapper: it
counts every launch for an experiment's launch count. `equipped` is the one way an experiment gets
(and lets go of) its launcher and results store, with the one error (`events.LabError`).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import httpx

from tui.core.lab.events import LabError
from tui.core.lab.failures import classify_memory
from tui.core.options.settings import Settings
from tui.core.planning.standin import on_stand_ins
from tui.core.server.events import ServerState
from tui.core.server.failures import Failure, FailureKind
from tui.core.server.handle import RunningSettings
from tui.core.server.supervisor import Supervisor

#: Tokens decoded right after a launch to catch first-decode OOMs.
FIRST_DECODE_TOKENS = 4
DEFAULT_READY_TIMEOUT = 120.0
_ENDED = [ServerState.FAILED, ServerState.EXITED, ServerState.STOPPED]


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


class Launcher(Protocol):
    """Launches llama-server for one configuration at a time (`SupervisorLauncher` is the real one)."""

    def launch(self, settings: Settings, cancel: threading.Event) -> LaunchOutcome: ...

    def stop(self) -> None: ...

    def close(self) -> None: ...

    def failure(self) -> Failure | None:
        """How the current server ended, if it has (after a probe saw it go away)."""
        ...


class SupervisorLauncher:
    """Launches through one `Supervisor` for the whole experiment (launch ids and log names stay
    distinct; every child is stopped on close), never recording a trial in the launch history."""

    def __init__(self, binary: str | Path, *, stand_ins: Any = None, env: Mapping[str, str] | None = None,
                 ready_timeout: float = DEFAULT_READY_TIMEOUT, log_dir: str | Path | None = None) -> None:
        self.binary = Path(binary)
        self.stand_ins = stand_ins  # a started, capped `StandIns`, or None
        self.env = env
        self.ready_timeout = ready_timeout
        self.log_dir = log_dir
        self._sup: Supervisor | None = None
        #: What the first-decode check sends (`aim_first_decode`: an experiment's first prompt).
        self.first_decode_messages: list[dict[str, str]] | None = None
        self.first_decode_prompt: str | None = None
        self._lines: list[str] = []

    def translate(self, settings: Settings) -> Settings:
        """`settings` as launched: on stand-ins, their endpoints first in --rpc and the fit-target per
        stand-in from the user's margins (one value for all, as a search gives); else unchanged."""
        return settings if self.stand_ins is None else on_stand_ins(settings, self.stand_ins)

    def launch(self, settings: Settings, cancel: threading.Event) -> LaunchOutcome:
        self.stop()
        t0 = time.monotonic()
        wanted = replace(self.translate(settings), port=None)
        if self._sup is None:
            self._sup = Supervisor(self.binary, wanted, env=self.env, ready_timeout=self.ready_timeout,
                                   log_dir=self.log_dir, record_history=False)
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
                    sup.wait_for(_ENDED, 5.0)
                if not sup.state.final:
                    # Alive but the request failed (e.g. HTTP 500 "std::bad_alloc"): that is the failure.
                    out.failure = Failure(FailureKind.UNKNOWN, f"The first decode failed: {err}.", None,
                                          "Check the server log.", raw_log_path=sup.log_path, evidence=err)
                    self._lines.append(err)  # so an allocation error in the response is classified too
        self._finish(out, sup)
        out.seconds = time.monotonic() - t0
        return out

    def _on_line(self, line: str) -> None:
        if len(self._lines) < 20000:
            self._lines.append(line)

    def _finish(self, out: LaunchOutcome, sup: Supervisor) -> None:
        if not out.ok and out.failure is None:
            sup.wait_for([s for s in ServerState if s.final], 10.0)
            out.failure = sup.failure
        out.memory = sup.memory_snapshot()
        rep = sup.memory_report()
        out.devices = list(getattr(rep, "devices", []) or []) or _devices_from_lines(self._lines)
        if not out.ok:
            classify_memory(out, self._lines)

    def _first_decode(self, url: str | None, api_key: str | None) -> tuple[str | None, bool]:
        """A few tokens of the experiment's first prompt: MTP OOMs often come at the first decode.
        Returns (error or None, whether the server answered at all)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        n = FIRST_DECODE_TOKENS
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
            sup.wait_for(_ENDED, 2.0)
        if not sup.state.final or sup.failure is None:
            return None
        out = LaunchOutcome(False, failure=sup.failure)
        classify_memory(out, self._lines)  # e.g. an RPC buffer or an abort after "insufficient memory"
        return out.failure

    def running_settings(self) -> RunningSettings | None:
        """What the current server was launched with, as its supervisor records it (runs are labelled from this)."""
        return self._sup.running_settings() if self._sup is not None else None

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


@contextlib.contextmanager
def equipped(launcher: Launcher | None, server_bin: str | Path | None = None, store: Any = None,
             **kw: Any) -> Iterator[tuple[Launcher, Any]]:
    """The launcher and results store of one experiment run, let go of on exit.

    `launcher`: the caller's (only its server is stopped on exit), or None: a `SupervisorLauncher` of (server_bin,
    **kw), closed on exit. `store`: a results store, None (nothing recorded), or "default": the
    user's (`data_dir()/results.sqlite`), opened here and closed on exit. LabError without a launcher
    or a binary, or when the store cannot be opened."""
    with contextlib.ExitStack() as stack:
        if launcher is None:
            if server_bin is None:
                raise LabError("no llama-server binary given: pass server_bin or a launcher (`mtp-tune doctor` finds "
                               "or builds one, or set $MTP_TUNE_LLAMA_SERVER).")
            launcher = SupervisorLauncher(server_bin, **kw)
            stack.callback(launcher.close)
        else:
            stack.callback(launcher.stop)
        if store == "default":
            from tui.core.results.store import StoreError, open_store  # sqlite3, loaded only when an experiment runs

            try:
                store = open_store()
            except StoreError as e:
                raise LabError(str(e)) from None
            stack.callback(_close_quietly, store)
        yield launcher, store


def _close_quietly(store: Any) -> None:
    """A results store closed at the end of an experiment: a failure there must not hide its outcome."""
    with contextlib.suppress(Exception):
        store.close()


class CountingLauncher:
    """A launcher that counts every launch (the figure an experiment is judged by), the recovery's and
    the fit searches' included, and tells `on_launch(settings)` before each starts (progress). It does
    not time them: the pace weighs a whole launch group (`runner.Lab.trial`), recovery included."""

    def __init__(self, inner: Launcher, *, on_launch: Callable[[Settings], None] | None = None) -> None:
        self.inner, self.on_launch, self.n = inner, on_launch, 0

    def launch(self, settings: Settings, cancel: threading.Event) -> LaunchOutcome:
        if self.on_launch is not None:
            self.on_launch(settings)
        out = self.inner.launch(settings, cancel)
        self.n += 1
        return out

    def stop(self) -> None:
        self.inner.stop()

    def close(self) -> None:
        self.inner.close()

    def failure(self) -> Failure | None:
        return self.inner.failure()


def aim_first_decode(launcher: Launcher, prompt: Any) -> None:
    """The first-decode check sends `prompt` (a suite's `Prompt`: `messages` or `raw`), so it
    allocates what the experiment's own requests will. Any launcher with the two fields is aimed
    (a test's fake records them); one without has no check to aim."""
    if prompt is not None and hasattr(launcher, "first_decode_messages"):
        launcher.first_decode_messages = [dict(m) for m in prompt.messages] if prompt.messages else None  # type: ignore[attr-defined]
        launcher.first_decode_prompt = prompt.raw  # type: ignore[attr-defined]


_DEVICE_LINE = re.compile(r"using device (\S+) \((.*?)\)(?: \((.*?)\))? - (\d+) MiB free")


def _devices_from_lines(lines: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for ln in lines:
        m = _DEVICE_LINE.search(ln)
        if m:
            out.append({"name": m.group(1), "description": m.group(2), "free_mib": int(m.group(4))})
    return out


def stand_ins_problem(gpus: str | None, devices: Any = None) -> str | None:
    """Why `--stand-ins` cannot run (None when it can): it plays simulated GPUs, so `--gpus` must name
    some, and `devices` (a `DeviceSet`, when known) must hold one that is not an RPC server."""
    local = None if devices is None else any(not d.remote for d in devices.devices)
    if gpus in (None, "cpu") or local is False:
        return "--stand-ins plays simulated GPUs: give them with --gpus SPEC (e.g. --gpus rtx3060-laptop-6g)."
    return None


def stand_in_note(simulated: Any) -> str:
    """What a report says about trials launched on stand-ins."""
    names = ", ".join(f"{d.key} ({d.name}, {d.free_mib:.0f} MiB free)" for d in simulated)
    return (f"every candidate ran on loopback ggml-rpc-server stand-ins capped at the simulated GPUs' free memory: "
            f"{names}. Out-of-memory failures and the smallest --fit-target (the margin to give on the real GPU) "
            "are real; speeds are this CPU's and compute buffers the CPU backend's, so the table is the GPU's in shape.")
