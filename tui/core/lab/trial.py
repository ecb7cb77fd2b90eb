"""The one record of a trial: one configuration an experiment (a sweep row, a tune candidate) considered,
what it cost and what it measured, or why it was pruned, failed or skipped.

Why one record: the sweep kept a `RowResult` (medians, summaries, the store's run) and the tune a
`TrialRecord` (per-pass samples, stage, verdict), and the tune converted its records into rows to
persist them in the sweep's state file. Now both keep this `Trial` in the one journal
(`lab.journal`). The per-pass `Samples` are the figures; medians and ranges are read from them
(`summary`), so a sweep's table and a tune's race see the same numbers. Fields an experiment does not
use stay at their defaults (a sweep has no `stage`, a tune no store `run_id`).
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, asdict, dataclass, field
from typing import Any, Literal, Protocol

from tui.core.config.jsonshape import fields
from tui.core.lab.failures import FailureClass
from tui.core.probes.positions import DraftPositions, total
from tui.core.probes.stats import Summary, summarize

#: `ok`: measured (a tune's: still in the running); `eliminated`: measured and clearly slower than its
#: side's leader after the short probe; `failed`: the launch or the probe failed; `invalid`: refused
#: by the validator or the planner; `duplicate`: the same launch and numbers as another row;
#: `predicted_oom`: the planner predicts it runs out of memory; `dominated`: needs at least the memory
#: of a launch that ran out; `pending`: not run yet (never stored in a journal).
Status = Literal["ok", "eliminated", "failed", "invalid", "duplicate", "predicted_oom", "dominated", "pending"]
STATUSES: tuple[str, ...] = Status.__args__  # type: ignore[attr-defined]
MEASURED = frozenset({"ok", "eliminated"})
PRUNED = frozenset({"predicted_oom", "invalid", "dominated"})
#: A sweep does not run these again on resume (`predicted_oom` runs again with try-anyway).
FINISHED = frozenset({"ok", "failed", "invalid", "duplicate", "predicted_oom"})
#: What each pass holds (`Samples.passes`).
PASS_FIGURES = ("pp_tps", "tg_tps", "acceptance", "e2e_s")


class Timed(Protocol):
    """What turns PP and TG speeds into a request's seconds (`tune.workload.Workload`)."""

    def seconds(self, pp_tps: float | None, tg_tps: float | None) -> float | None: ...


@dataclass
class Samples:
    """Per-pass figures of one launch (pass i of every list is one pass); `error` when the probe broke."""

    pp_tps: list[float | None] = field(default_factory=list)
    tg_tps: list[float | None] = field(default_factory=list)
    acceptance: list[float | None] = field(default_factory=list)
    e2e_s: list[float | None] = field(default_factory=list)  # seconds of one mean request, per pass
    error: str | None = None
    #: Accepted tokens per draft position over every measured pass (`probes.positions.DraftPositions`
    #: as stored): counts, so the measurements of one trial add up.
    positions: dict[str, Any] | None = None

    @property
    def n(self) -> int:
        """Passes with an end-to-end time (what the tune's noise rule counts)."""
        return sum(1 for v in self.e2e_s if v is not None and math.isfinite(v))

    @property
    def status(self) -> str:
        """As a probe run's: `ok`, or `failed` when the probe broke (what the lab's loop reads)."""
        return "ok" if self.error is None else "failed"

    def extend(self, more: Samples) -> None:
        self.pp_tps += more.pp_tps
        self.tg_tps += more.tg_tps
        self.acceptance += more.acceptance
        self.e2e_s += more.e2e_s
        self.error = more.error or self.error
        both = total(DraftPositions.from_json(p) for p in (self.positions, more.positions))
        self.positions = both.to_json() if both else None

    def fill_e2e(self, workload: Timed) -> None:
        """Per-pass end-to-end seconds from PP and TG where the measurement gave none."""
        for i in range(len(self.e2e_s), max(len(self.pp_tps), len(self.tg_tps))):
            pp = self.pp_tps[i] if i < len(self.pp_tps) else None
            tg = self.tg_tps[i] if i < len(self.tg_tps) else None
            self.e2e_s.append(workload.seconds(pp, tg))  # None when the workload needs a speed this pass lacks

    def summary(self, metric: str) -> Summary | None:
        return summarize(getattr(self, metric))

    def passes(self) -> list[dict[str, Any]]:
        """One dict per pass (missing figures None), as the sweep's JSON and reports list them."""
        n = max(len(self.pp_tps), len(self.tg_tps), len(self.acceptance), len(self.e2e_s))

        def pad(xs: list[Any]) -> list[Any]:
            return list(xs) + [None] * (n - len(xs))

        return [dict(zip(PASS_FIGURES, vs)) for vs in zip(pad(self.pp_tps), pad(self.tg_tps), pad(self.acceptance),
                                                          pad(self.e2e_s))]

    @classmethod
    def of_passes(cls, passes: list[dict[str, Any]]) -> Samples:
        """The samples of a probe's passes (dicts with `pp_tps`, `tg_tps`, `acceptance`, maybe `e2e_s`)."""
        s = cls([p.get("pp_tps") for p in passes], [p.get("tg_tps") for p in passes],
                [p.get("acceptance") for p in passes])
        if any(p.get("e2e_s") is not None for p in passes):
            s.e2e_s = [p.get("e2e_s") for p in passes]
        return s

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Trial:
    """One configuration as an experiment left it. `number` is a tune's order of consideration (from 1;
    a sweep's table numbers its grid itself)."""

    key: str  # the configuration's key (a sweep row's key, a tune's launch key)
    status: Status = "ok"
    _: KW_ONLY
    number: int = 0
    stage: str = ""  # why a tune considered it: "start", "walk ubatch", "grid", ...
    values: dict[str, Any] = field(default_factory=dict)  # the searched values that made it
    memory_key: str = ""  # what decides its memory (a tune prunes by it)
    mtp: bool = False
    settings: dict[str, Any] = field(default_factory=dict)  # what ran (or would have), redacted
    n_predict: int | None = None
    reason: str | None = None  # why it failed or was skipped, one paragraph
    failure: FailureClass | None = None  # the coarse class a tune races on (`lab.failures`)
    failure_kind: str | None = None  # the server's `FailureKind` value (or "planner", "probe_failed")
    plan: dict[str, Any] | None = None  # {"risk", "message"}
    vram_mib: float | None = None  # the planner's device total
    fit_target: int | None = None
    finding: dict[str, Any] | None = None  # the knob search it ran (KnobFinding / SearchResult .to_json())
    samples: Samples | None = None
    acceptance: float | None = None  # accepted / drafted over the whole run, when the probe counted it
    mean_accept_len: float | None = None
    memory: dict[str, Any] | None = None  # {"total_mib", "devices": {dev: MiB}, "n_ctx"}
    verdict: dict[str, Any] | None = None  # against its side's leader when it was judged
    launches: int = 0  # server launches it cost (fit search, measurement, the step after an OOM)
    launch: int | None = None  # which launch of the experiment measured it (counts from 1)
    seconds: float = 0.0
    run_id: int | None = None  # the results store's run
    log_path: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    resumed: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        return self.status in MEASURED and self.samples is not None and self.samples.n > 0

    def summary(self, metric: str) -> Summary | None:
        """Median, range and count of one per-pass figure (`pp_tps`, `tg_tps`, `acceptance`, `e2e_s`)."""
        return self.samples.summary(metric) if self.samples else None

    def e2e(self) -> Summary | None:
        return self.summary("e2e_s")

    def median(self, metric: str = "e2e_s") -> float | None:
        s = self.summary(metric)
        return s.median if s else None

    def accept_rate(self) -> float | None:
        """The run's acceptance (accepted / drafted) when counted, else the median over passes."""
        return self.acceptance if self.acceptance is not None else self.median("acceptance")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples"] = self.samples.to_json() if self.samples else None
        return d

    @classmethod
    def from_json(cls, d: Any, where: str = "trial") -> Trial:
        """A stored trial; ShapeError (a ValueError) naming the first field of the wrong shape."""
        f = fields(cls, d, where, required=("key", "status"))
        samples = f.pop("samples", None)
        return cls(**f, samples=None if samples is None else Samples(**fields(Samples, samples, f"{where}.samples")))
