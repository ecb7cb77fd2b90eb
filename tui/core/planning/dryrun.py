"""One dry run of llama-server: the argv that measures a configuration, the supervised run that stops
at fit's decision, and the one sentence that says why a run gave no measurement.

The argv is the settings' own (`settings_to_argv`) with `--fit on` (the user's `--fit off` pins -c
and -ngl instead, so fit changes nothing), fit's choice pinned when given, `--log-jsonl -lv 5` for
the breakdown and per-buffer lines, and the options that never change memory left out. The run goes
through the product's Supervisor (own process group, parent-death signal) and is frozen (SIGSTOP, on
the log reader's thread) at fit's first word of decision, then killed. llama.cpp logs from a thread,
so the real load may have begun by then; what makes that harmless is structural, not timing: the
model is a header-only sparse copy (a late read reads zeros of a cache file) and every RPC device is
reached through an RpcGuard (no tensor data ever reaches one). A build whose decision line is not
recognised is stopped at the first sign of a real load, or after LOG_IDLE_S without a log line.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from tui.core.options.argv import settings_from_argv, settings_to_argv
from tui.core.options.reader import without
from tui.core.options.redact import SECRET_OPTIONS
from tui.core.options.settings import Settings
from tui.core.planning.breakdown import DryRunLog
from tui.core.planning.cache import default_root
from tui.core.planning.fitchoice import FitChoice
from tui.core.server.supervisor import Supervisor

#: options that never change what llama.cpp allocates (left out of the argv and so of the cache key)
_NO_MEMORY = ("--threads", "--threads-batch", "--host", "--port", "--metrics", "--alias", *SECRET_OPTIONS)
#: the options a dry run adds itself: a server that rejects one of these is too old for exact mode
_OURS = ("--log-jsonl", "-lv", "--log-verbosity", "--verbosity", "--fit", "-fit", "--fit-target", "-fitt", "--no-warmup")
#: a dry run whose server prints nothing for this long is stopped (fit logs every measurement at
#: -lv 5; a silence this long means it waits on something, or loaded and now listens)
LOG_IDLE_S = 15.0
#: lines only a real load prints (mapped weights, a loaded model, a listening server): seen after
#: fit started but before its decision was read, they mean this build words that decision otherwise
RE_REAL_LOAD = re.compile(r"_Mapped model buffer size|main: model loaded|server is listening|load_all_data")
_RE_REJECTED = re.compile(r'error: invalid argument: (\S+)|error while handling argument "([^"]+)": (.*)')


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
            progress: Callable[[str], None] | None = None, finish_on_cancel: bool = False,
            idle_s: float | None = None, held: threading.Event | None = None) -> tuple[DryRunLog, str]:
    """Start the server via the Supervisor, feed its log to a DryRunLog, stop it once fit has decided.
    Returns the log and "" or "cancelled" / "timeout" / "exited" / "stalled" (no log line for
    `idle_s`) / "loaded" (the server went on to load for real: fit's decision was never read) /
    "held" (`held`, an RpcGuard's event, is set: the real load reached an RPC device).
    `finish_on_cancel`: a cancel waits for fit's decision before stopping the server (the user's own
    RPC servers: killing llama-server mid-measurement can kill them), and reports "cancelled"."""
    idle_s = LOG_IDLE_S if idle_s is None else idle_s
    log = DryRunLog()
    done = threading.Event()
    lock = threading.Lock()
    last = [time.monotonic()]
    loaded = [False]

    def freeze() -> None:
        pid = sup.pid
        if pid:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass

    def on_line(line: str) -> None:
        with lock:
            if done.is_set():
                return
            last[0] = time.monotonic()
            log.feed(line)
            if log.fit.finished or (log.fit.started and RE_REAL_LOAD.search(line)):
                # freeze it on this (the reader's) thread at once: the real load starts right after
                # fit's decision, and must not get as far as a device (an RPC server that loses its
                # client mid-command can die of the broken pipe)
                loaded[0] = not log.fit.finished
                freeze()
                done.set()
            elif log.done:
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
        last[0] = time.monotonic()
        cancelled = False
        while not done.wait(0.02):
            if held is not None and held.is_set():
                with lock:
                    if not done.is_set():
                        freeze()
                        outcome = "" if log.fit.finished else "held"
                        done.set()
                break
            if cancel is not None and cancel.is_set():
                cancelled = True
                if not finish_on_cancel:
                    break
            now = time.monotonic()
            if now > deadline:
                outcome = "timeout"
                break
            if now - last[0] > idle_s:
                outcome = "stalled"
                break
        if cancelled or (cancel is not None and cancel.is_set()):
            outcome = "cancelled"
        elif loaded[0]:
            outcome = "loaded"
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


def why_unavailable(log: DryRunLog, outcome: str, timeout_s: float, idle_s: float | None = None) -> str | None:
    """One sentence why a dry run gave no measurement (None: it did)."""
    idle_s = LOG_IDLE_S if idle_s is None else idle_s
    last = log.tail[-1][:200] if log.tail else ""
    if outcome == "timeout":
        return f"llama-server's dry run did not finish within {timeout_s:g} s."
    if outcome in ("loaded", "held"):
        how = "started loading the model for real" if outcome == "loaded" else "began sending the model to an RPC device"
        return (f"llama-server {how} before mtp-tune read --fit's decision (this build words it differently, "
                "or logs no fit trace); it was stopped.")
    if outcome == "stalled":
        stage = "after --fit started" if log.fit.started else "before --fit started"
        return (f"llama-server's dry run printed nothing for {idle_s:g} s {stage}"
                + (f" (its last line: {last!r})" if last else "") + "; it was stopped.")
    if log.errors:
        first = log.errors[0]
        if (m := _RE_REJECTED.search(first)) is not None:
            flag = m.group(1) or m.group(2)
            if flag in _OURS:
                return f"this llama-server is too old to print its memory breakdown ({first}); exact mode needs b11434 or newer."
            reason = (m.group(3) or "not an option this llama-server knows").strip()
            return f"llama-server rejected {flag}: {reason}."
        if "--log-jsonl" in first:
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
