"""One dry run of llama-server: the argv that measures a configuration, the supervised run that stops
at fit's decision, and the one sentence that says why a run gave no measurement.

The argv is the settings' own (`settings_to_argv`) with `--fit on` (the user's `--fit off` pins -c
and -ngl instead, so fit changes nothing), fit's choice pinned when given, `--log-jsonl -lv 5` for
the breakdown and per-buffer lines, and the options that never change memory left out. The run goes
through the product's Supervisor (own process group, parent-death signal) and is stopped as soon as
`DryRunLog.done`: nothing is loaded for real.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from tui.core.options.argv import settings_from_argv, settings_to_argv
from tui.core.options.reader import without
from tui.core.options.settings import Settings
from tui.core.config.paths import cache_dir
from tui.core.planning.breakdown import DryRunLog
from tui.core.planning.fitchoice import FitChoice
from tui.core.server.supervisor import Supervisor

#: options that never change what llama.cpp allocates (left out of the argv and so of the cache key)
_NO_MEMORY = ("--threads", "--threads-batch", "--host", "--port", "--api-key", "--metrics", "--alias")


def default_root() -> Path:
    """Where exact mode keeps its cache entries, sparse copies and dry-run logs (`MTP_TUNE_EXACT_DIR`
    wins: tests keep their dry runs out of the real cache, which also holds the server build)."""
    env = os.environ.get("MTP_TUNE_EXACT_DIR")
    return Path(env) if env else cache_dir() / "exact"


def dry_run_args(settings: Settings, model: str | Path, *, pin: FitChoice | None = None, rpc: Sequence[str] = (),
                 fit_targets: Sequence[int] = (), n_ctx_train: int = 0) -> list[str]:
    """llama-server's arguments for a dry run of `settings` (no binary, no host/port)."""
    s = replace(settings, model=str(model), hf_repo=None, fit=True, port=None, api_key=None, metrics=False)
    if settings.fit is False:  # --fit off loads as given: pin what fit could change
        s = replace(s, ctx_size=settings.ctx_size or (n_ctx_train or None),
                    n_gpu_layers=settings.n_gpu_layers if settings.n_gpu_layers not in (None, "auto", "-1") else "all")
    extra = list(s.extra_args)
    if pin is not None:
        s = replace(s, ctx_size=pin.n_ctx or s.ctx_size)
        if pin.n_gpu_layers is not None:
            s = replace(s, n_gpu_layers=str(pin.n_gpu_layers))
        if pin.tensor_split:
            s = replace(s, tensor_split=list(pin.tensor_split))
        if pin.overrides:
            extra += ["-ot", ",".join(pin.overrides)]
    if rpc:
        s = replace(s, rpc=list(rpc))
    if fit_targets:
        s = replace(s, fit_target=list(fit_targets))
    argv = without(settings_to_argv(replace(s, extra_args=extra)), *_NO_MEMORY)
    return [*argv, "--log-jsonl", "-lv", "5", "--no-warmup", "-t", "1"]


def run_dry(server_bin: str | Path, args: Sequence[str], *, timeout_s: float, cancel: threading.Event | None,
            env: Mapping[str, str] | None = None, log_dir: Path | None = None,
            progress: Callable[[str], None] | None = None, finish_on_cancel: bool = False) -> tuple[DryRunLog, str]:
    """Start the server via the Supervisor, feed its log to a DryRunLog, stop it once fit has decided.
    Returns the log and "" or "cancelled" / "timeout" / "exited". `finish_on_cancel`: a cancel waits
    for fit's decision before stopping the server (the user's own RPC servers: killing llama-server
    mid-measurement can kill them), and the run still reports "cancelled"."""
    log = DryRunLog()
    done = threading.Event()
    lock = threading.Lock()

    def on_line(line: str) -> None:
        with lock:
            if done.is_set():
                return
            log.feed(line)
            if log.done:
                # freeze it on this (the reader's) thread at once: the real load starts right after
                # fit's decision, and must not get as far as a device (an RPC server that loses its
                # client mid-command can die of the broken pipe)
                pid = sup.pid
                if log.fit.finished and pid:
                    try:
                        os.kill(pid, signal.SIGSTOP)
                    except OSError:
                        pass
                done.set()

    # our own deadline stops it; the supervisor's readiness timeout only backs that up
    sup = Supervisor(server_bin, settings_from_argv(list(args)).settings, env=env,  # the args are canonical
                     ready_timeout=timeout_s + 60.0, stop_grace=0.0,
                     log_dir=log_dir or (default_root() / "logs"), record_history=False, memreport_factory=None)
    sup.on_log_line(on_line)
    sup.add_state_listener(lambda ev: done.set() if ev.state.final else None)
    outcome = ""
    try:
        sup.start()
        if progress is not None:
            progress("dry run started")
        deadline = time.monotonic() + timeout_s
        cancelled = False
        while not done.wait(0.02):
            if cancel is not None and cancel.is_set():
                cancelled = True
                if not finish_on_cancel:
                    break
            if time.monotonic() > deadline:
                outcome = "timeout"
                break
        if cancelled or (cancel is not None and cancel.is_set()):
            outcome = "cancelled"
        elif not outcome and not log.done:
            outcome = "exited"
    finally:
        sup.close()
        done.set()
    failure = sup.failure
    if outcome == "exited" and not log.errors and failure is not None:  # the supervisor's classification of the end
        log.errors.append("the dry run failed: " + failure.message.rstrip(". "))
    if not outcome and not log.errors and sup.log_path is not None:  # keep only the logs of runs that failed
        sup.log_path.unlink(missing_ok=True)
    return log, outcome


def why_unavailable(log: DryRunLog, outcome: str, timeout_s: float) -> str | None:
    if outcome == "timeout":
        return f"llama-server's dry run did not finish within {timeout_s:g} s."
    if log.errors:
        first = log.errors[0]
        if "--log-jsonl" in first or "invalid argument" in first or "unknown argument" in first:
            return f"this llama-server is too old to print its memory breakdown ({first}); exact mode needs b11434 or newer."
        if first.startswith("the dry run failed: "):
            return first + "."
        return f"llama-server could not measure this model: {first}."
    target, _ = log.step1()
    if target is None:
        if not log.fit.started:
            return "this llama-server printed no --fit measurement (too old, or it failed before loading the model)."
        last = next((t for t in reversed(log.tail) if "error" in t.lower() or "fail" in t.lower() or "abort" in t.lower()),
                    log.tail[-1] if log.tail else "")
        return ("llama-server's dry run ended before it printed its memory breakdown"
                + (f" (its last words: {last[:200]!r})." if last else "."))
    return None
