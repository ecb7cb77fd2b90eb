"""What a tune answers: the best configuration, the best with MTP off beside it, the ones within the
noise of the best, and the evidence (every record), with one paragraph that says it; and its report.

Kept apart from the loop so a report (CLI, TUI, `--json`) and a resume rebuild it from records
alone: `build_result(records, ...)` is pure. "Best" and "within the noise" are `lab.ranking`'s.

MTP on against off: when the tune ran its final interleaved A/B, the answer reports that verdict
(stronger evidence: both sides measured in turn on one machine state) instead of the trials' own
on/off comparison, so the message, `mtp_vs_off` and the A/B can never disagree.

The Markdown report (`render_report`): the answer, the best and the best MTP-off side by side with
their spread, the interleaved A/B verdict, the break-even output length, and every trial; pure as well,
from the result and a few facts about the run (`ReportFacts`), so a resumed tune, the CLI and a test
render the same report. A trial's settings are the values it was given on the searched axes (plus the
fit-target it found): everything else is the fixed flags, listed once. Its PP-vs-TG plot is plain
characters in a fenced block, so it reads the same in a terminal, a pull request and a Markdown
viewer, and needs no image file beside it (the TUI draws the same points as a widget).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import Any

from tui.core.lab import ranking
from tui.core.lab.candidate import value_text, values_label
from tui.core.lab.ranking import AbVerdict
from tui.core.lab.trial import MEASURED, PRUNED, Trial
from tui.core.probes.breakeven import BreakEven, break_even
from tui.core.probes.draft_advice import advise, measured_cost
from tui.core.probes.positions import DraftPositions, shares_text
from tui.core.probes.stats import Summary, fmt_rel, fmt_summary
from tui.core.tune.workload import Workload


@dataclass
class TuneResult:
    best: Trial | None
    best_mtp_off: Trial | None
    best_mtp_on: Trial | None
    same_as_best: list[Trial]
    records: list[Trial]
    launches: int  # server launches this run (fit-target searches included; resumed records cost none)
    grid_size: int  # valid candidates of the space: what a grid would launch at least once each
    stopped: str  # converged | complete (grid) | budget | cancelled
    elapsed_s: float
    message: str
    mtp_vs_off: dict[str, Any] | None = None  # the best MTP-on against the best MTP-off (stats verdict; "source": ab | trials)
    pareto: list[Trial] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.records:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def to_json(self, quality: Any = None) -> dict[str, Any]:
        """`quality` (a `kld.QualityBook`): each record carries its measured cost (null: not measured)."""
        def num(r: Trial | None) -> int | None:
            return r.number if r else None

        def rec(r: Trial) -> dict[str, Any]:
            return {**r.to_json(), "quality": quality.trial_json(r)} if quality is not None else r.to_json()

        return {"best": num(self.best), "best_mtp_off": num(self.best_mtp_off), "best_mtp_on": num(self.best_mtp_on),
                "same_as_best": [r.number for r in self.same_as_best], "launches": self.launches,
                "grid_size": self.grid_size, "stopped": self.stopped, "elapsed_s": round(self.elapsed_s, 3),
                "message": self.message, "mtp_vs_off": self.mtp_vs_off, "counts": self.counts(),
                "pareto": [r.number for r in self.pareto], "records": [rec(r) for r in self.records]}


def fmt_seconds(s: Summary | None) -> str:
    """Seconds per request with three significant digits (`0.0123 [0.0120-0.0131]`), `-` when missing."""
    if s is None:
        return "-"
    m = abs(s.median)
    digits = 1 if m >= 10 else 2 if m >= 1 or m == 0 else min(6, 2 - math.floor(math.log10(m)))
    return fmt_summary(s, digits)


def shown(name: str, v: Any) -> Any:
    """A value as a report shows it: a model file by its name (the path is in the settings)."""
    return PurePath(str(v)).name if name == "model" else v


def _describe(r: Trial) -> str:
    fit = f" fit-target={r.fit_target}" if r.fit_target is not None else ""
    return f"#{r.number} ({values_label((k, shown(k, v)) for k, v in r.values.items())}{fit}) at " \
           f"{fmt_seconds(r.e2e())} s per request"


def build_result(records: Sequence[Trial], rungs: Sequence[int], launches: int, grid_size: int, stopped: str,
                 elapsed_s: float, workload: Workload, ab: AbVerdict | None = None) -> TuneResult:
    """The answer from the records (pure: a resume or a report calls it again); `ab`, the final
    interleaved A/B when there is one, decides "MTP on against off"."""
    best, same = ranking.choose(records, rungs)
    off, _ = ranking.choose([r for r in records if not r.mtp], rungs)
    on, _ = ranking.choose([r for r in records if r.mtp], rungs)
    vs = _mtp_vs_off(on, off, ab)
    parts: list[str] = []
    if best is None:
        parts.append(f"No configuration could be measured for {workload.label}.")
    else:
        parts.append(f"Best for {workload.label}: {_describe(best)}.")
        if same:
            parts.append("Within the noise of the fastest: " + ", ".join(f"#{r.number}" for r in same)
                         + "; the cheapest of them is chosen (MTP off, smaller micro-batch, less VRAM first).")
        if off is not None and off is not best:
            parts.append(f"Best with MTP off: {_describe(off)}.")
        if vs is not None:
            parts.append(_mtp_sentence(vs, ab))
    measured = sum(1 for r in records if r.status in MEASURED)
    pruned = sum(1 for r in records if r.status in PRUNED)
    failed = sum(1 for r in records if r.status == "failed")
    parts.append(f"{launches} launches; {measured} measured, {pruned} pruned without a launch, {failed} failed, "
                 f"of {grid_size} configurations.")
    if stopped == "budget":
        parts.append("The budget ran out: this is the best so far; run again to continue.")
    elif stopped == "cancelled":
        parts.append("Cancelled: this is the best so far.")
    return TuneResult(best, off, on, same, list(records), launches, grid_size, stopped, elapsed_s, " ".join(parts), vs,
                      ranking.pareto(records))


def _mtp_vs_off(on: Trial | None, off: Trial | None, ab: AbVerdict | None) -> dict[str, Any] | None:
    """MTP on judged against off on seconds per request: the A/B's verdict when it ran, else the trials'."""
    if off is None or on is None:
        return None
    if ab is not None:
        return {"on": on.number, "off": off.number, "source": "ab", **ab.e2e.to_json()}
    return {"on": on.number, "off": off.number, "source": "trials", **ranking.versus(off, on).to_json()}


def _mtp_sentence(vs: dict[str, Any], ab: AbVerdict | None) -> str:
    label = vs["label"]
    src = "" if ab is None else f" (interleaved A/B, {min(ab.a.passes, ab.b.passes)} passes each" + \
        ("" if ab.status == "complete" else f", {ab.status}") + ")"
    if label == ranking.SAME:
        said = "the same within the noise."
    elif label == ranking.INCONCLUSIVE:
        said = f"inconclusive ({vs['reason']})."
    else:
        said = ("MTP wins" if label == ranking.BETTER else "MTP loses") + f", {fmt_rel(vs['rel_change'])} time."
    return f"MTP on against off{src}: {said}"


WIDTH, HEIGHT = 56, 14
#: What each mark means, in the order a cell keeps the most important one.
MARKS = (("B", "the best"), ("*", "on the PP-vs-TG front"), ("o", "MTP on"), ("x", "MTP off"))


def _rank(mark: str) -> int:
    return [m for m, _ in MARKS].index(mark)


def pp_tg_plot(records: Sequence[Trial], front: Sequence[Trial], best: Trial | None) -> list[str]:
    """The lines of a text scatter (TG up, PP across), or [] with fewer than two measured trials."""
    pts = [(r, r.median("pp_tps"), r.median("tg_tps")) for r in records if r.measured]
    pts = [(r, float(p), float(t)) for r, p, t in pts if p is not None and t is not None]
    if len(pts) < 2:
        return []
    p_lo, p_hi = min(p for _, p, _ in pts), max(p for _, p, _ in pts)
    t_lo, t_hi = min(t for _, _, t in pts), max(t for _, _, t in pts)
    p_span, t_span = (p_hi - p_lo) or 1.0, (t_hi - t_lo) or 1.0
    grid = [[" "] * WIDTH for _ in range(HEIGHT)]
    on_front = {r.number for r in front}
    for r, p, t in pts:
        x = round((p - p_lo) / p_span * (WIDTH - 1))
        y = HEIGHT - 1 - round((t - t_lo) / t_span * (HEIGHT - 1))
        mark = "B" if best is not None and r.number == best.number else "*" if r.number in on_front else \
            "o" if r.mtp else "x"
        if grid[y][x] == " " or _rank(mark) < _rank(grid[y][x]):
            grid[y][x] = mark
    label_w = max(len(f"{t_hi:.0f}"), len(f"{t_lo:.0f}"))
    out = [f"TG t/s (generation), {len(pts)} measured trials"]
    for i, row in enumerate(grid):
        label = f"{t_hi:.0f}" if i == 0 else f"{t_lo:.0f}" if i == HEIGHT - 1 else ""
        out.append(f"{label:>{label_w}} |" + "".join(row).rstrip())
    out.append(" " * label_w + " +" + "-" * WIDTH)
    lo, hi = f"{p_lo:.0f}", f"{p_hi:.0f}"
    out.append(" " * (label_w + 2) + lo + " " * max(1, WIDTH - len(lo) - len(hi)) + hi)
    out.append(" " * (label_w + 2) + "PP t/s (prompt processing)")
    out.append("  ".join(f"{m} {what}" for m, what in MARKS))
    return out


SHORT = {"draft-n-max": "n-max", "draft-p-min": "p-min", "ubatch": "ub", "batch": "b", "draft-kv": "dkv", "flash-attn": "fa",
         "n-cpu-moe": "ncmoe", "threads": "t"}


@dataclass
class ReportFacts:
    """What the report says about the run besides its records."""

    model: str
    workload: Workload
    hardware: str = ""
    fixed: str = ""  # the fixed llama-server flags, as an argv line
    axes: Sequence[tuple[str, Sequence[Any]]] = ()  # the searched axes and their values
    ctx: int | None = None
    tune_id: str = ""
    ab: AbVerdict | None = None
    ab_note: str = ""
    launches: int | None = None  # this run: sizing, trials and the A/B (the result counts the search's only)
    launches_total: int | None = None
    notes: Sequence[str] = field(default_factory=list)
    hygiene_checked: bool = False
    quality: Any = None  # a `kld.QualityBook`: the quality section, a KLD column, the answer's cost


def settings_text(r: Trial) -> str:
    """The searched values of a trial (`ub=512 dkv=q4_0`), MTP apart, and its fit-target."""
    parts = [f"{SHORT.get(k, k)}={value_text(shown(k, v))}" for k, v in r.values.items() if k != "mtp"]
    if r.fit_target is not None:
        parts.append(f"fitt={r.fit_target}")
    return " ".join(parts) or "-"


def _spread(s: Summary | None) -> str:
    return "-" if s is None or s.n < 2 else f"{s.spread:.1%}"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _plan(r: Trial) -> str:
    """`ok (exact) 3 MiB`: the verdict, whose figures (llama.cpp's dry run or the estimate), device need."""
    if not r.plan:
        return "-"
    src = "exact" if str(r.plan.get("message") or "").startswith("exact") else "estimate"
    vram = f" {r.vram_mib:.0f} MiB" if r.vram_mib is not None else ""
    return f"{r.plan.get('risk')} ({src}){vram}"


def _acc(r: Trial) -> str:
    s = r.samples.summary("acceptance") if r.samples else None
    return "-" if s is None else f"{s.median:.2f}"


def trial_table(records: Sequence[Trial], marks: dict[int, str] | None = None, quality: Any = None) -> list[str]:
    """Every trial: settings, plan verdict, status, PP, TG, acceptance, time per request, why (and its
    quality cost when `quality`, a `kld.QualityBook`, measured one)."""
    marks = marks or {}
    kld = " quality |" if quality is not None else ""
    out = ["| # | MTP | settings (besides the fixed flags) | stage | plan | status | PP t/s | TG t/s | accept | "
           f"s/request |{kld} launches | why |", "|---|---|---|---|---|---|---|---|---|---|" + "---|" * (3 if kld else 2)]
    for r in records:
        s = r.samples
        pp = s.summary("pp_tps") if s else None
        tg = s.summary("tg_tps") if s else None
        status = r.status + (f" ({r.failure})" if r.failure else "") + (" (saved)" if r.resumed else "")
        mark = marks.get(r.number, "")
        out.append("| " + " | ".join(_cell(c) for c in (
            f"{r.number}{' ' + mark if mark else ''}", value_text(r.mtp), settings_text(r), r.stage, _plan(r), status,
            fmt_summary(pp), fmt_summary(tg), _acc(r), fmt_seconds(r.e2e()),
            *([quality.trial_text(r)] if quality is not None else []), r.launches, r.reason or "")) + " |")
    return out


def side_by_side(result: TuneResult, quality: Any = None) -> list[str]:
    """The best and the best MTP-off (and the best MTP-on when it is neither) with their spread (and
    their quality cost when `quality` measured one)."""
    rows: list[tuple[str, Trial]] = []
    if result.best is not None:
        rows.append(("best", result.best))
    if result.best_mtp_off is not None and result.best_mtp_off is not result.best:
        rows.append(("best MTP off", result.best_mtp_off))
    if result.best_mtp_on is not None and result.best_mtp_on is not result.best:
        rows.append(("best MTP on", result.best_mtp_on))
    if not rows:
        return ["Nothing was measured."]
    kld = " quality |" if quality is not None else ""
    out = [f"| | # | MTP | settings | s/request | spread | PP t/s | TG t/s | accept | planned VRAM |{kld}",
           "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if kld else "")]
    for name, r in rows:
        s = r.samples
        vram = f"{r.vram_mib:.0f} MiB" if r.vram_mib is not None else "-"
        out.append("| " + " | ".join(_cell(c) for c in (
            name, r.number, value_text(r.mtp), settings_text(r), fmt_seconds(r.e2e()), _spread(r.e2e()),
            fmt_summary(s.summary("pp_tps") if s else None), fmt_summary(s.summary("tg_tps") if s else None), _acc(r), vram,
            *([quality.trial_text(r)] if quality is not None else []))) + " |")
    return out


def tune_break_even(result: TuneResult, workload: Workload, ab: AbVerdict | None) -> BreakEven | None:
    """From the A/B when it ran (interleaved: the better evidence), else from the tune's medians."""
    if ab is not None:
        return ab.break_even
    on, off = result.best_mtp_on, result.best_mtp_off
    if on is None or off is None:
        return None
    return break_even(round(workload.in_tokens), off.median("pp_tps"), off.median("tg_tps"), on.median("pp_tps"),
                      on.median("tg_tps"))


def position_lines(on: Trial | None, off: Trial | None) -> list[str]:
    """The best MTP-on trial's acceptance by draft position and the n-max advice, a drafted token's
    cost measured from the best MTP-off trial's TG (`probes.draft_advice`); [] without the figures."""
    pos = DraftPositions.from_json(on.samples.positions) if on is not None and on.samples is not None else None
    if on is None or pos is None:
        return []
    adv = advise(pos, measured_cost(pos, off.median("tg_tps") if off else None, on.median("tg_tps")))
    assert adv is not None  # from_json keeps only counts with drafts
    return [f"Acceptance by draft position (#{on.number}, {pos.steps} drafts): {shares_text(pos)}. {adv.text}", ""]


def render_report(result: TuneResult, facts: ReportFacts) -> str:
    w = facts.workload
    lines = [f"# mtp-tune tune: {facts.model}", ""]
    head = [f"Workload: **{w.label}** ({w.in_tokens:.0f} prompt tokens and {w.out_tokens:.0f} generated per request on "
            f"average, the longest {w.longest})"]
    if facts.ctx is not None:
        head.append(f"context {facts.ctx or 'the training context'}")
    if facts.hardware:
        head.append(f"hardware: {facts.hardware}")
    lines += ["; ".join(head) + ".", ""]
    if facts.fixed:
        lines += [f"Fixed flags: `{facts.fixed}`", ""]
    searched = [(n, vals) for n, vals in facts.axes if len(vals) > 1]
    kept = [(n, vals[0]) for n, vals in facts.axes if len(vals) == 1]
    if searched:
        lines += ["Searched: " + "; ".join(f"{n} {', '.join(value_text(v) for v in vals)}" for n, vals in searched) + ".", ""]
    if kept:
        lines += ["Kept at one value: " + "; ".join(f"{n} {value_text(v)}" for n, v in kept) + ".", ""]
    total = f" ({facts.launches_total} over every run of this tune)" if facts.launches_total is not None else ""
    run = facts.launches if facts.launches is not None else result.launches
    lines += [f"Stopped: **{result.stopped}** after {run} launches this run{total}, {result.launches} of them for "
              f"the search, "
              f"{len(result.records)} candidates considered of {result.grid_size} in the grid, "
              f"{result.elapsed_s:.0f} s." + (f" Tune id `{facts.tune_id}`." if facts.tune_id else ""), ""]
    cost = f" {facts.quality.answer(result.best)}" if facts.quality is not None and result.best is not None else ""
    lines += ["## Answer", "", result.message + cost, ""]
    lines += side_by_side(result, facts.quality) + [""]
    if facts.quality is not None:
        lines += ["## Quality", ""] + facts.quality.section()
    lines += ["## MTP on against off", ""]
    if facts.ab is not None:
        lines += [f"Interleaved A/B, {facts.ab_note}: **{facts.ab.headline}**. {facts.ab.answer}", ""]
    elif facts.ab_note:
        lines += [facts.ab_note[:1].upper() + facts.ab_note[1:], ""]
    be = tune_break_even(result, w, facts.ab)
    if be is not None:
        src = "the A/B" if facts.ab is not None else "the tune's medians"
        lines += [f"Break-even output length (from {src}): {be.text()}", ""]
    lines += position_lines(result.best_mtp_on, result.best_mtp_off)
    if result.pareto:
        lines += ["PP-vs-TG front (no other trial is faster at both): "
                  + ", ".join(f"#{r.number}" for r in result.pareto) + ".", ""]
    plot = pp_tg_plot(result.records, result.pareto, result.best)
    if plot:
        lines += ["```text", *plot, "```", ""]
    marks: dict[int, str] = {r.number: "~" for r in result.same_as_best}
    for name, r in (("off", result.best_mtp_off), ("on", result.best_mtp_on)):
        if r is not None:
            marks[r.number] = f"best {name}"
    if result.best is not None:
        marks[result.best.number] = "**best**"
    lines += ["## Trials", ""] + trial_table(result.records, marks, facts.quality) + [""]
    dirty = [r for r in result.records if r.warnings]
    lines += ["## Machine hygiene", ""]
    if dirty:
        lines += ["Checked before every launch; these trials' numbers may be low or noisy:", ""]
        lines += [f"- #{r.number}: {w}" for r in dirty for w in r.warnings] + [""]
    else:
        lines += ["Checked before every launch where NVML sees the GPUs (other processes on them, throttled "
                  "clocks): nothing found." if facts.hygiene_checked else
                  "Not checked: no GPU NVML can see runs the candidates (simulated GPUs, RPC devices or the CPU).", ""]
    if facts.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in facts.notes] + [""]
    return "\n".join(lines)


def facts_from(outcome: Any, base: Any) -> ReportFacts:
    """The report's facts from a `run.TuneOutcome` and the fixed `Settings`."""
    from pathlib import Path

    from tui.core.options.argv import command_line, settings_to_argv

    sp = outcome.space
    axes: list[tuple[str, Sequence[Any]]] = [("mtp", sp.branches)] if len(sp.branches) > 1 else []
    axes += [(a.name, tuple(shown(a.name, v) for v in a.values)) for a in sp.axes]
    files = any(a.name == "model" for a in sp.axes)  # the model file is searched, not fixed
    fixed = command_line(settings_to_argv(replace(base, model=None) if files else base, redact=True))
    notes = list(outcome.notes)
    if not outcome.fit_searched:
        notes.append("No --fit-target was searched: " + ("it is a fixed flag." if sp.fit_fixed else
                                                         "the candidates do not run on a real GPU or RPC device."))
    model = f"-hf {base.hf_repo}" if base.hf_repo else Path(str(base.model or "")).name
    return ReportFacts(model, outcome.workload, outcome.hardware, fixed, axes, sp.ctx,
                       outcome.tune_id, outcome.ab, outcome.ab_note, outcome.launches, outcome.launches_total, notes,
                       outcome.hygiene_checked, outcome.quality)
