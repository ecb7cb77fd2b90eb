"""llama-server's own memory measurements, read from the log of a `--fit` dry run (pure parsing).

With `--fit on`, llama-server b11434 first measures the settings as given with `no_alloc`
(common/fit.cpp, "step 1"): the target context, then the MTP/draft context ("the extra model"),
each ending with one `fit_memory_breakdown` JSON line under `--log-jsonl` (MiB, floored per device:
model, context, compute). At `-lv 5` the same pass also prints the per-buffer lines of each
measurement (compute, RS and output buffers, KV totals) with 0.01 MiB precision. Then fit decides
(no changes / a smaller context / layers moved), logs its last word (`RE_DECIDED`) and then
`fitting params to free memory took`, after which the real load starts: the first of those lines is
where a dry run stops the server.

`DryRunLog.feed()` takes raw log lines (JSON-wrapped or plain), splits them into measurements and
collects fit's decision, so the caller can rebuild the exact settings fit chose (-c, -ngl, -ts, -ot).
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass, field

from tui.core.server.memreport import MemoryReport

RE_FIT_START = re.compile(r"fitting params to device memory \.\.\.")
RE_FIT_END = re.compile(r"fitting params to free memory took ([\d.]+) seconds")
RE_INITIAL = re.compile(r"getting device memory data for initial parameters")
RE_NOT_UNIFIED = re.compile(r"context size unset and KV cache not unified -> using (\d+) for (\d+) sequences")
RE_EXTRA = re.compile(r"getting device memory data for the extra model at a context size of (\d+)")
RE_DECISION = re.compile(r"projected to use \d+ MiB of (?:host|device) memory|projected memory use with initial parameters")
RE_NO_CHANGES = re.compile(r"no changes needed")
RE_REDUCED = re.compile(r"context size reduced from (\d+) to (\d+)")
RE_CTX_ONLY = re.compile(r"entire model can be fit by reducing context")
RE_SUCCESS = re.compile(r"successfully fit params to free device memory")
RE_FAILURE = re.compile(r"failed to fit params to free device memory: (.*)")
RE_FIT_ERROR = re.compile(r"encountered an error while trying to fit params to free device memory: (.*)")
#: fit's last word before it returns (common/fit.cpp): the earliest line after which nothing it
#: measures or decides is still to come; "took" follows it, then the real load
RE_DECIDED = re.compile(r"no changes needed|entire model can be fit by reducing context|successfully fit params to free device memory"
                        r"|failed to fit params to free device memory|encountered an error while trying to fit params")
RE_SUMMARY = re.compile(r"common_params_fit_impl:\s+- (.+?):\s+(\d+) layers(?: \(\s*(\d+) overflowing\))?,\s+(-?\d+) MiB used")
RE_OVERFLOW = re.compile(r"set ngl_per_device\[(\d+)\]\.\(n_layer, n_part, overflow_type\)=\((\d+), (\d+), (UP|GATE|ATTN)\)")
RE_TRY_ATTN = re.compile(r"trying to fit one extra layer with overflow_type=LAYER_FRACTION_ATTN")
RE_MODEL_LOAD = re.compile(r"llama_model_loader: loaded meta data")
RE_LOAD_ERROR = re.compile(r"(error loading model[^\n]*|unknown model architecture[^\n]*|failed to load model[^\n]*)")
RE_ABORT = re.compile(r"(GGML_ASSERT\(.*\) failed|terminate called after throwing[^\n]*)")
RE_RPC_ERROR = re.compile(r"(Failed to connect to \S+|RPC handshake failed for \S+)")
RE_ARG_ERROR = re.compile(r"(error: invalid argument: \S+|error while handling argument[^\n]*|unknown argument: \S+)")


@dataclass
class Row:
    """One row of a `fit_memory_breakdown` line (MiB, floored by llama.cpp)."""

    kind: str  # device | host | buffer_type
    name: str  # RPC0, CUDA0, Host, CPU_REPACK, ...
    description: str
    model: int
    context: int
    compute: int
    total: int | None = None
    free: int | None = None


@dataclass
class Measurement:
    """One no_alloc load: what llama.cpp counted, and the per-buffer detail lines (-lv 5) behind it."""

    label: str  # "target" (step 1), "extra" (the MTP/draft context), "probe" (fit's later trials)
    rows: list[Row] = field(default_factory=list)
    detail: MemoryReport = field(default_factory=MemoryReport)
    n_ctx: int | None = None

    def devices(self) -> list[Row]:
        return [r for r in self.rows if r.kind == "device"]

    def host_rows(self) -> list[Row]:
        """Host memory: the host row plus host buffer types printed apart (CPU_REPACK, ...)."""
        return [r for r in self.rows if r.kind != "device"]


@dataclass
class DeviceLayers:
    name: str  # "RPC0 (description)" as fit prints it
    n_layer: int
    n_part: int


@dataclass
class FitTrace:
    """What `--fit` decided, from its trace lines."""

    started: bool = False
    finished: bool = False
    seconds: float | None = None
    status: str | None = None  # "none" (no changes), "changed", "failed" (gave up), "error"
    message: str = ""
    reduced_ctx: int | None = None
    ctx_only: bool = False
    layers: dict[str, DeviceLayers] = field(default_factory=dict)  # last summary per device name
    overflow: dict[int, str] = field(default_factory=dict)  # device index -> UP | GATE | ATTN

    @property
    def changed(self) -> bool:
        return self.status == "changed"


class DryRunLog:
    """Incremental parser of a dry run's log; `done` once fit has decided (or the server failed)."""

    def __init__(self) -> None:
        self.measurements: list[Measurement] = []
        self.fit = FitTrace()
        self.errors: list[str] = []
        self.lines = 0
        self.tail: deque[str] = deque(maxlen=6)  # the last lines, for saying why a run ended early
        self._current: Measurement | None = None
        self._label: str | None = None
        self._label_ctx: int | None = None
        self._step1_done = False
        self._pending_attn: int | None = None

    # ---- feeding ---------------------------------------------------------------------------

    def feed(self, raw: str) -> None:
        """One raw log line: a `--log-jsonl` object or plain text."""
        self.lines += 1
        text = raw.strip()
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                if obj.get("type") == "fit_memory_breakdown":
                    self._close(obj.get("data") or {})
                    return
                msg = obj.get("msg")
                if isinstance(msg, str):
                    self._line(msg.rstrip("\n"), str(obj.get("level", "")))
                return
        self._line(text, "")

    def _line(self, msg: str, level: str) -> None:
        if msg.strip():
            self.tail.append(msg.strip())
        if self.fit.started and not self.fit.finished:
            self._fit_line(msg)
        elif self.fit.finished and self.fit.seconds is None and (m := RE_FIT_END.search(msg)) is not None:
            self.fit.seconds = float(m.group(1))  # when it still came through (the server is stopped before)
        elif RE_FIT_START.search(msg):
            self.fit.started = True
        if level == "error" or (not level and any(k in msg for k in ("error", "Failed", "GGML_ASSERT", "terminate"))):
            m = RE_LOAD_ERROR.search(msg) or RE_ARG_ERROR.search(msg) or RE_RPC_ERROR.search(msg) or RE_ABORT.search(msg)
            if m and m.group(1) not in self.errors:
                self.errors.append(m.group(1).strip())

    def _fit_line(self, msg: str) -> None:
        fit = self.fit
        if RE_MODEL_LOAD.search(msg):
            self._current = Measurement(self._label or ("probe" if self._step1_done else "target"), n_ctx=self._label_ctx)
            self._label, self._label_ctx = None, None
        if self._current is not None:
            self._current.detail.feed(msg)
        m = RE_FIT_END.search(msg)
        if m:
            fit.finished = True
            fit.seconds = float(m.group(1))
            if fit.status is None:
                fit.status = "changed"
            return
        if RE_INITIAL.search(msg):
            self._label = "target"
        elif (m := RE_NOT_UNIFIED.search(msg)) is not None:
            self._label, self._label_ctx = "target", int(m.group(1))
        elif (m := RE_EXTRA.search(msg)) is not None:
            self._label, self._label_ctx = ("extra" if not self._step1_done else "probe-extra"), int(m.group(1))
        elif RE_DECISION.search(msg):
            self._step1_done = True
        elif RE_NO_CHANGES.search(msg):
            fit.status, fit.message = "none", "fits with the --fit-target margin: --fit changes nothing."
        elif (m := RE_REDUCED.search(msg)) is not None:
            fit.reduced_ctx = int(m.group(2))
        elif RE_CTX_ONLY.search(msg):
            fit.ctx_only = True
        elif RE_SUCCESS.search(msg):
            fit.status = fit.status or "changed"
        elif (m := RE_FAILURE.search(msg)) is not None:
            fit.status, fit.message = "failed", m.group(1).strip()
        elif (m := RE_FIT_ERROR.search(msg)) is not None:
            fit.status, fit.message = "error", m.group(1).strip()
        elif (m := RE_SUMMARY.search(msg)) is not None:
            name = m.group(1).strip()
            fit.layers[name] = DeviceLayers(name, int(m.group(2)), int(m.group(3) or 0))
        elif (m := RE_OVERFLOW.search(msg)) is not None:
            fit.overflow[int(m.group(1))] = m.group(4)
        if RE_DECIDED.search(msg):
            fit.finished = True
            fit.status = fit.status or "changed"

    def _close(self, data: dict) -> None:
        meas = self._current or Measurement(self._label or ("probe" if self._step1_done else "target"), n_ctx=self._label_ctx)
        self._current = None
        for r in data.get("rows") or []:
            if not isinstance(r, dict):
                continue
            meas.rows.append(Row(
                str(r.get("kind", "")), str(r.get("name", "?")), str(r.get("description", "")),
                _int(r.get("model")), _int(r.get("context")), _int(r.get("compute")),
                _opt_int(r.get("total")), _opt_int(r.get("free"))))
        self.measurements.append(meas)

    # ---- views -------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """Fit has decided (the real load starts next), or the server reported a fatal error."""
        return self.fit.finished or bool(self.errors)

    def step1(self) -> tuple[Measurement | None, Measurement | None]:
        """(target, draft) measured at the settings as given: the last of each before fit's decision."""
        target = extra = None
        for m in self.measurements:
            if m.label == "target":
                target = m
            elif m.label == "extra":
                extra = m
        return target, extra


def _int(v: object) -> int:
    try:
        return int(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0


def _opt_int(v: object) -> int | None:
    return None if v is None else _int(v)
