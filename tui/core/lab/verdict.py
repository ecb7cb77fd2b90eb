"""The MTP on/off verdict for the user's workload, from the per-pass samples of an A/B run.

Pure: `decide(samples, workload)` gives the verdict, so a UI recomputes it for new input/output
lengths without running anything again. Each side's samples are its passes (one probe run per
pass, interleaved A B A B by `lab.ab.run_ab`); per pass the end-to-end time of one request is
prompt / PP + output / TG (`probes.compare.workload_view`), and a side is called faster only when
the difference is beyond the measured noise (`probes.stats.verdict`); otherwise the verdict is
`inconclusive`, with the reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tui.core.probes.breakeven import BreakEven, break_even
from tui.core.probes.compare import RunView, workload_view
from tui.core.probes.records import PassStats
from tui.core.probes.stats import BETTER, WORSE, Summary, Verdict, fmt_rel, fmt_summary, summarize, verdict

Side = Literal["off", "on"]
Label = Literal["mtp_wins", "mtp_loses", "inconclusive"]
#: The workload a verdict starts with: a task-sized request (the TUI lets the user edit it).
DEFAULT_WORKLOAD = (1000, 500)


@dataclass(frozen=True)
class PassSample:
    """One pass of one side: its PP, TG and acceptance (None when the pass measured none)."""

    side: Side
    index: int  # the pass number of this side, from 0
    order: int  # its position in the interleaved sequence, from 0
    pp_tps: float | None
    tg_tps: float | None
    acceptance: float | None
    run_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PassSample:
        return cls(d["side"], int(d["index"]), int(d["order"]), d.get("pp_tps"), d.get("tg_tps"), d.get("acceptance"),
                   d.get("run_id"))


@dataclass(frozen=True)
class SideResult:
    """One side's numbers over its passes: median and range of each."""

    side: Side
    passes: int
    pp_tps: Summary | None
    tg_tps: Summary | None
    acceptance: Summary | None
    e2e_s: Summary | None  # seconds per request of the workload

    def to_json(self) -> dict[str, Any]:
        return {"side": self.side, "passes": self.passes,
                **{k: (getattr(self, k).to_json() if getattr(self, k) else None)
                   for k in ("pp_tps", "tg_tps", "acceptance", "e2e_s")}}


@dataclass
class MtpVerdict:
    """MTP on against MTP off for one workload. `label` is the answer; `answer` says it in words."""

    workload: tuple[int, int]  # (input tokens, output tokens) per request
    samples: list[PassSample]
    off: SideResult
    on: SideResult
    pp: Verdict  # MTP on judged against off, per metric
    tg: Verdict
    e2e: Verdict  # lower is better
    break_even: BreakEven
    label: Label
    answer: str
    status: str = "complete"  # complete | cancelled | failed
    error: str | None = None
    settings: dict[str, Any] | None = None  # the settings both sides share (redacted)
    run_ids: list[int] = field(default_factory=list)

    @property
    def conclusive(self) -> bool:
        return self.label != "inconclusive"

    def for_workload(self, prompt_tokens: int, output_tokens: int) -> MtpVerdict:
        """The same samples judged for another request shape (nothing is run)."""
        return decide(self.samples, (prompt_tokens, output_tokens), status=self.status, error=self.error,
                      settings=self.settings, run_ids=self.run_ids)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": {"prompt_tokens": self.workload[0], "output_tokens": self.workload[1]},
            "label": self.label, "answer": self.answer, "status": self.status, "error": self.error,
            "off": self.off.to_json(), "on": self.on.to_json(),
            "pp": self.pp.to_json(), "tg": self.tg.to_json(), "e2e": self.e2e.to_json(),
            "break_even": self.break_even.to_json(), "samples": [s.to_json() for s in self.samples],
            "settings": self.settings, "run_ids": list(self.run_ids),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MtpVerdict:
        w = d.get("workload") or {}
        return decide([PassSample.from_json(s) for s in d.get("samples") or []],
                      (int(w.get("prompt_tokens", DEFAULT_WORKLOAD[0])), int(w.get("output_tokens", DEFAULT_WORKLOAD[1]))),
                      status=d.get("status", "complete"), error=d.get("error"), settings=d.get("settings"),
                      run_ids=list(d.get("run_ids") or []))


def _view(samples: list[PassSample], side: Side) -> RunView:
    mine = [s for s in samples if s.side == side]
    passes = [PassStats(s.index, True, s.tg_tps, s.pp_tps, s.acceptance) for s in mine]
    return RunView(None, f"MTP {side}", side == "on", "ok", None, None, None, None, passes, [])


def decide(samples: list[PassSample], workload: tuple[int, int] = DEFAULT_WORKLOAD, *, status: str = "complete",
           error: str | None = None, settings: dict[str, Any] | None = None,
           run_ids: list[int] | None = None) -> MtpVerdict:
    """The verdict for `workload` = (input tokens, output tokens) from the passes of both sides."""
    n_in, n_out = int(workload[0]), int(workload[1])
    if n_in < 0 or n_out < 0:
        raise ValueError(f"workload: token counts must be >= 0, not {n_in} in / {n_out} out")
    off_v, on_v = _view(samples, "off"), _view(samples, "on")
    wl = workload_view(off_v, on_v, n_in, n_out)
    sides = {}
    for side, v, e2e in (("off", off_v, wl.a), ("on", on_v, wl.b)):
        sides[side] = SideResult(side, len(v.passes), summarize(v.samples("pp_tps")), summarize(v.samples("tg_tps")),
                                 summarize(v.samples("acceptance")), e2e)  # type: ignore[arg-type]
    off, on = sides["off"], sides["on"]
    pp = verdict(off.pp_tps, on.pp_tps)
    tg = verdict(off.tg_tps, on.tg_tps)
    be = break_even(n_in, _med(off.pp_tps), _med(off.tg_tps), _med(on.pp_tps), _med(on.tg_tps))
    e2e = wl.verdict  # B = MTP on; lower seconds are better
    label: Label = "mtp_wins" if e2e.label == BETTER else "mtp_loses" if e2e.label == WORSE else "inconclusive"
    answer = _answer(label, (n_in, n_out), off, on, pp, tg, e2e, be, status, error)
    return MtpVerdict((n_in, n_out), list(samples), off, on, pp, tg, e2e, be, label, answer, status, error, settings,
                      list(run_ids or []))


def _med(s: Summary | None) -> float | None:
    return s.median if s else None


def _answer(label: Label, workload: tuple[int, int], off: SideResult, on: SideResult, pp: Verdict, tg: Verdict,
            e2e: Verdict, be: BreakEven, status: str, error: str | None) -> str:
    n_in, n_out = workload
    shape = f"{n_in} tokens in, {n_out} out"
    if off.e2e_s is None or on.e2e_s is None:
        head = f"{shape}: not enough data (each side needs PP and TG from at least one pass)."
    else:
        times = f"MTP off {fmt_summary(off.e2e_s, 2)} s, MTP on {fmt_summary(on.e2e_s, 2)} s per request"
        if label == "inconclusive":
            head = f"{shape}: inconclusive ({times}): {e2e.reason}."
        elif label == "mtp_wins":
            head = f"{shape}: MTP wins ({times}, {fmt_rel(e2e.rel_change)} time, beyond the noise of {(e2e.noise or 0):.1%})."
        else:
            why = ("the PP loss outweighs the TG gain" if (tg.rel_change or 0) > 0 and (pp.rel_change or 0) < 0
                   else "it is slower at generation" if (tg.rel_change or 0) < 0 else "it is slower")
            head = f"{shape}: MTP loses: {why} ({times}, {fmt_rel(e2e.rel_change)} time)."
    parts = [head, f"PP {fmt_summary(off.pp_tps)} -> {fmt_summary(on.pp_tps)} t/s ({fmt_rel(pp.rel_change)}), "
                   f"TG {fmt_summary(off.tg_tps)} -> {fmt_summary(on.tg_tps)} t/s ({fmt_rel(tg.rel_change)}), "
                   f"acceptance {fmt_summary(on.acceptance, 2)}.", be.text()]
    if status != "complete":
        parts.append(f"The run {status}{': ' + error if error else ''}; only the passes done count.")
    return " ".join(parts)
