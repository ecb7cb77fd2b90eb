"""What a tune records: every candidate it considered, with its settings, plan, status, figures and
why it was pruned, failed or dropped (a failure classified by `lab.failures`).

Why a record per candidate (not per launch): a report says, for each configuration, what happened
to it; a resume needs exactly that to skip what is known (measured samples, failures, predictions).
`to_row()` maps a record onto the sweep's resumable row (`sweep.state.RowResult`), so the existing
state file can persist a tune; `to_json()` keeps the tuner's own fields (stage, verdict, keys).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tui.core.config.jsonshape import check, fields
from tui.core.probes.stats import Summary, summarize
from tui.core.lab.failures import FailureClass
from tui.core.sweep.state import RowResult
from tui.core.tuning.workload import Workload

#: `ok`: measured and still in the running; `eliminated`: measured and clearly slower than its side's
#: leader after the short probe; `predicted_oom` / `invalid`: pruned by the planner or the validator;
#: `dominated`: pruned because it needs at least the memory of a launch that ran out; `failed`.
Status = Literal["ok", "eliminated", "predicted_oom", "invalid", "dominated", "failed"]
MEASURED = frozenset({"ok", "eliminated"})
PRUNED = frozenset({"predicted_oom", "invalid", "dominated"})
#: what each stored pass holds (`Samples.passes`)
PASS_FIGURES = ("pp_tps", "tg_tps", "acceptance", "e2e_s")
_ROW_STATUS = {"ok": "ok", "eliminated": "ok", "predicted_oom": "predicted_oom", "dominated": "predicted_oom",
               "invalid": "invalid", "failed": "failed"}


@dataclass
class Samples:
    """Per-pass figures of one launch (pass i of every list is one pass); `error` when the probe broke."""

    pp_tps: list[float] = field(default_factory=list)
    tg_tps: list[float] = field(default_factory=list)
    acceptance: list[float | None] = field(default_factory=list)
    e2e_s: list[float | None] = field(default_factory=list)  # seconds of one mean request, per pass
    error: str | None = None

    @property
    def n(self) -> int:
        """Passes with an end-to-end time (what the noise rule counts)."""
        return sum(1 for v in self.e2e_s if v is not None and math.isfinite(v))

    def extend(self, more: Samples) -> None:
        self.pp_tps += more.pp_tps
        self.tg_tps += more.tg_tps
        self.acceptance += more.acceptance
        self.e2e_s += more.e2e_s
        self.error = more.error or self.error

    def fill_e2e(self, workload: Workload) -> None:
        """Per-pass end-to-end seconds from PP and TG where the measurement gave none."""
        for i in range(len(self.e2e_s), max(len(self.pp_tps), len(self.tg_tps))):
            pp = self.pp_tps[i] if i < len(self.pp_tps) else None
            tg = self.tg_tps[i] if i < len(self.tg_tps) else None
            t = workload.seconds(pp, tg)  # None when the workload needs a speed this pass lacks
            self.e2e_s.append(t)

    def summary(self, metric: str) -> Summary | None:
        return summarize(getattr(self, metric))

    def passes(self) -> list[dict[str, Any]]:
        n = len(self.e2e_s)

        def pad(xs: list[Any]) -> list[Any]:
            return list(xs) + [None] * (n - len(xs))

        return [{"pp_tps": p, "tg_tps": t, "acceptance": a, "e2e_s": e}
                for p, t, a, e in zip(pad(self.pp_tps), pad(self.tg_tps), pad(self.acceptance), self.e2e_s)]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> Samples | None:
        if d is None:
            return None
        return cls(list(d.get("pp_tps") or []), list(d.get("tg_tps") or []), list(d.get("acceptance") or []),
                   list(d.get("e2e_s") or []), d.get("error"))


@dataclass
class TrialRecord:
    """One candidate as the tune left it. `number` counts from 1 in the order considered."""

    number: int
    key: str  # launch key
    memory_key: str
    values: dict[str, Any]
    settings: dict[str, Any]  # what was (or would have been) launched, redacted, fit-target included
    mtp: bool
    stage: str  # why it was considered: "start", "walk ubatch", "grid", ...
    status: Status = "ok"
    reason: str | None = None
    failure: FailureClass | None = None
    plan: dict[str, Any] | None = None  # {"risk", "message"}
    vram_mib: float | None = None  # the planner's device total (or the launch's report)
    fit_target: int | None = None
    fit: dict[str, Any] | None = None  # the fit-target search this candidate ran (SearchResult.to_json())
    samples: Samples | None = None
    verdict: dict[str, Any] | None = None  # against its side's leader when it was judged
    launches: int = 0  # server launches it cost (fit search, measurement, the step after an OOM)
    seconds: float = 0.0
    resumed: bool = False
    warnings: list[str] = field(default_factory=list)  # the machine's hygiene just before its launch

    @property
    def measured(self) -> bool:
        return self.status in MEASURED and self.samples is not None and self.samples.n > 0

    def e2e(self) -> Summary | None:
        return self.samples.summary("e2e_s") if self.samples else None

    def median(self, metric: str = "e2e_s") -> float | None:
        s = self.samples.summary(metric) if self.samples else None
        return s.median if s else None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples"] = self.samples.to_json() if self.samples else None
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrialRecord:
        known = set(cls.__dataclass_fields__)
        rec = cls(**{k: v for k, v in d.items() if k in known and k != "samples"})
        rec.samples = Samples.from_json(d.get("samples"))
        return rec

    @classmethod
    def from_row(cls, row: RowResult) -> TrialRecord | None:
        """The record `to_row` stored (None for a row no tune wrote): what a resumed tune knows.
        ShapeError (a ValueError) naming the first field of the wrong shape: the row comes from a file."""
        finding = dict(row.finding or {})
        t = finding.pop("tune", None)
        if not isinstance(t, dict):
            return None
        fields(cls, t, f"rows.{row.key}.finding.tune")
        ps = row.passes or []
        for i, p in enumerate(ps):
            for k in PASS_FIGURES:
                check(p.get(k), float | None, f"rows.{row.key}.passes[{i}].{k}")
        samples = Samples([p.get("pp_tps") for p in ps], [p.get("tg_tps") for p in ps],  # type: ignore[misc]
                          [p.get("acceptance") for p in ps], [p.get("e2e_s") for p in ps]) if ps else None
        values = dict(t.get("values") or {})
        return cls(int(t.get("number") or 0), row.key, str(t.get("memory_key") or ""), values, dict(row.settings),
                   bool(values.get("mtp")), str(t.get("stage") or ""), t.get("status") or "ok", row.reason,
                   t.get("failure"), row.plan, t.get("vram_mib"), t.get("fit_target"), finding or None, samples,
                   t.get("verdict"), int(t.get("launches") or 0), warnings=list(row.warnings or []))

    def to_row(self) -> RowResult:
        """The sweep state's row for this record (medians and per-pass figures; tuner fields in `finding`)."""
        s = self.samples
        pp = s.summary("pp_tps") if s else None
        tg = s.summary("tg_tps") if s else None
        acc = s.summary("acceptance") if s else None
        tune = {k: getattr(self, k) for k in ("number", "memory_key", "values", "stage", "status", "failure",
                                              "vram_mib", "fit_target", "verdict", "launches")}
        finding = dict(self.fit or {}) | {"tune": tune}
        return RowResult(self.key, _ROW_STATUS[self.status], reason=self.reason, failure_kind=self.failure,
                         settings=dict(self.settings), tg_tps=tg.median if tg else None,
                         pp_tps=pp.median if pp else None, acceptance=acc.median if acc else None,
                         tg_summary=tg.to_json() if tg else None, pp_summary=pp.to_json() if pp else None,
                         passes=s.passes() if s else [], plan=self.plan, finding=finding,
                         warnings=list(self.warnings))
