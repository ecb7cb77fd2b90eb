"""The one classification of a failed trial: a launch, its first decode, or a probe afterwards.

Why one module: a sweep, a tune and the knob searches each used to decide "was it memory?" their own
way, and they disagreed at the edges (a crash after a knob change, an RPC buffer, a probe's 500).
Every question an experiment asks about a failure is answered here:

* `classify_memory`: did an allocation fail, on a device or in host RAM, did `--fit` give up, and how
  much room did fit's projection leave. The first allocation error in the log wins over the server
  classifier's guess: a draft context whose compute buffer did not fit ends with "failed to create
  MTP context"; an RPC device's buffer has a name like `RPC0[127.0.0.1:50052]`; a process under an
  address-space limit may abort right after "insufficient memory";
* `failure_class` / `search_failure_class` / `probe_failure_class`: the coarse class a trial record
  keeps (out of memory at load, at the first decode, or something else);
* `knob_outcome`: a launch as a knob-search trial (ok, oom, overshoot, failed, cancelled);
* `failure_kind`: the `FailureKind` value a result row stores.

Nothing here launches; the functions read what the launcher recorded (`Classifiable`, a protocol, so
this module sits below the launcher).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol

from tui.core.server.failures import Failure, FailureKind, strip_prefix

#: Log lines that mean an allocation failed, for failures the classifier does not name as OOM
#: (e.g. an RPC device's buffer, or an abort right after `insufficient memory`).
ALLOC_FAIL = re.compile(
    r"failed to allocate|insufficient memory|out of memory|bad_alloc|Cannot allocate memory|"
    r"unable to allocate|alloc(?:ation)? failed", re.I)
#: `--fit` could not meet the target at all and loaded with the original parameters.
_FIT_GAVE_UP = re.compile(r"failed to fit params to free device memory|cannot meet free memory target.*?(?:abort|giving up)", re.I)
_HOST_BUF = re.compile(r"\b(?:CPU|Host)\b|cpu_buffer_type", re.I)
_FIT_PROJECTED = re.compile(r"projected to use (\d+) MiB of device memory vs\. (\d+) MiB of free device memory")
_OOM_KINDS = (FailureKind.OOM_DEVICE, FailureKind.OOM_HOST)

#: A failed trial as a record keeps it: out of memory while loading, at the first decode, or else.
FailureClass = Literal["oom_load", "oom_decode", "other"]
#: A launch as a knob-search trial: `ok` loads and decodes; `oom` fails to allocate; `overshoot` the
#: knob is past what it can do (fit gave up); `failed` another failure (the knob does not explain it).
Outcome = Literal["ok", "oom", "overshoot", "failed", "cancelled"]


class Classifiable(Protocol):
    """What the classification reads and sets on a launch's outcome (`launcher.LaunchOutcome`)."""

    ok: bool
    cancelled: bool
    failure: Failure | None
    memory_failure: bool
    memory_on_device: bool
    fit_gave_up: bool
    at_first_decode: bool
    fit_headroom_mib: int | None


def classify_memory(out: Classifiable, lines: Sequence[str]) -> None:
    """Set `memory_failure`, `memory_on_device`, `fit_gave_up` and `fit_headroom_mib` from the
    failure and the log; an allocation error the server classifier missed becomes an OOM failure."""
    kind = out.failure.kind if out.failure is not None else None
    alloc_lines = [ln for ln in lines if ALLOC_FAIL.search(ln)]
    out.memory_failure = kind in _OOM_KINDS or bool(alloc_lines)
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
    if out.memory_failure and kind not in _OOM_KINDS:
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


def failure_kind(out: Classifiable) -> str | None:
    """The `FailureKind` value a result row stores for a failed launch (an OOM kind for any memory failure)."""
    kind = out.failure.kind.value if out.failure is not None else None
    if out.memory_failure and kind not in ("oom_device", "oom_host"):
        kind = "oom_device" if out.memory_on_device else "oom_host"
    return kind


def failure_class(out: Classifiable) -> FailureClass:
    """A failed launch: out of memory while loading, at the first decode, or something else."""
    if out.memory_failure:
        return "oom_decode" if out.at_first_decode else "oom_load"
    return "other"


def search_failure_class(trials: Sequence[Any]) -> FailureClass:
    """Why a fit-target search found nothing, from its last trial (`knob.KnobTry`)."""
    last = trials[-1] if trials else None
    if last is None or last.outcome == "failed":
        return "other"
    if last.outcome == "oom" and "first decode" in (last.detail or ""):
        return "oom_decode"
    return "oom_load"  # oom at load, or fit could not keep that much free (overshoot)


def probe_failure_class(errors: str | Iterable[str], failure: Failure | None = None, *,
                        knob_changed: bool = False) -> FailureClass:
    """A probe that broke mid-run: out of memory while decoding when an error names an allocation
    failure or the server died of one. `knob_changed`: the launch differs from a working one only in
    a memory knob, so a crash or a kill is that shortage surfacing elsewhere (as in `knob_outcome`)."""
    texts = [errors] if isinstance(errors, str) else list(errors)
    if any(ALLOC_FAIL.search(t or "") for t in texts):
        return "oom_decode"
    kinds = _OOM_KINDS + ((FailureKind.CRASH, FailureKind.KILLED) if knob_changed else ())
    return "oom_decode" if failure is not None and failure.kind in kinds else "other"


def knob_outcome(knob: str, out: Classifiable) -> tuple[Outcome, str]:
    """A launch's outcome as a knob-search trial, and why."""
    if out.cancelled:
        return "cancelled", ""
    if out.ok:
        return "ok", "loaded and decoded"
    if knob == "fit_target" and out.fit_gave_up:
        return "overshoot", "fit cannot keep that much free"
    if out.memory_failure:
        return "oom", ("out of memory at the first decode" if out.at_first_decode else "out of memory at load")
    if out.failure is not None and out.failure.kind in (FailureKind.CRASH, FailureKind.KILLED):
        # Only the knob changed since a genuine allocation failure: a crash or a kill while loading
        # or at the first decode is the same shortage surfacing elsewhere (an unchecked allocation,
        # the OOM killer).
        return "oom", f"{out.failure.message} Counted as out of memory: only {knob.replace('_', '-')} changed."
    return "failed", (out.failure.message if out.failure else "the launch failed")
