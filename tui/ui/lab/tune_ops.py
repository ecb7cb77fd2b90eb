"""The tune screen (`T`) through the core: `core.tune.run.TuneRun`, the same run `mtp-tune tune`
drives, with the settings on screen as the fixed flags, turned into the views the screen draws.

The core is imported inside the functions on purpose (lazy, not a cycle): the tune loads the lab's
engine, the server supervisor and httpx, which the TUI's first frame must not pay for.

No Textual here. `prepare` (a suite file, the GGUF header) and `run_tune` block: a worker calls them;
the tracker turns the run's events into new views on the tune's thread and hands them to a callable
that only posts a message.

The setup's axes say what is searched: an axis with values releases the form's value of that setting
(it is searched over those values, as `mtp-tune tune --axis NAME=V1,V2`); an empty axis keeps the
form's value fixed (the server's default, pinned, when the form leaves it unset). The context is the
smallest that holds the workload (at least `min ctx`), as the CLI sizes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tui.core.options.settings import Settings
from tui.ui.lab.experiments import saved_as, spread
from tui.ui.lab.tune_views import TUNE_AXES, TuneRowView, TuneSetup, TuneView

MARKS = {"best": "BEST", "off": "best off", "on": "best on", "same": "~best"}


@dataclass(frozen=True)
class Prepared:
    """A checked tune: the core's TuneRequest, what the screen says about it before it runs."""

    request: Any  # tune_run.TuneRequest
    grid: int  # valid configurations of the space (what a grid would launch)
    summary: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    setup: TuneSetup | None = None


def gpus_of(options: Any) -> str | None:
    """The devices the main screen plans on, as `--gpus` spells them: the simulated profile (its key
    or spec), `cpu` for a simulated CPU-only host, None for the GPUs NVML sees."""
    if not options.simulate:
        return None
    return options.hardware.key if options.hardware is not None else "cpu"


def _tokens(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def fixed_and_values(settings: Settings, setup: TuneSetup, floors: Any) -> tuple[Settings, dict[str, tuple[Any, ...]], list[str]]:
    """(the fixed flags, axis -> values searched, notes) from the form and the setup's axes.

    Raises ValueError naming the axis (the CLI's own `--axis` parser checks the values)."""
    from tui.core.tune.args import axis_values  # the one --axis parser: the screen searches what the CLI would
    from tui.core.tune.space import DEFAULT_VALUES, KV_QUALITY, kv_quality

    blank = Settings()
    base = replace(settings, port=None, metrics=False, spec_type=list(settings.spec_type),
                   fit_target=list(settings.fit_target), extra_args=list(settings.extra_args), ctx_size=None)
    values: dict[str, tuple[Any, ...]] = {}
    notes: list[str] = []
    for axis, label, fs, _default in TUNE_AXES:
        toks = _tokens(setup.axis(axis))
        if axis == "mtp":
            wanted = {t.lower() for t in toks}
            if not wanted <= {"on", "off"}:
                raise ValueError(f"MTP: write on,off (both searched), on or off (fixed); not {setup.axis(axis)!r}.")
            if wanted == {"on", "off"}:
                base.spec_type = []
            elif wanted:
                base.spec_type = ["draft-mtp"] if "on" in wanted else ["none"]
            elif not base.spec_type:
                base.spec_type = ["none"]  # the form runs without MTP: kept off
            continue
        if not toks:
            if any(getattr(base, f) == getattr(blank, f) for f in fs):  # (a field of it) unset in the form:
                values[axis] = (DEFAULT_VALUES[axis][0],)  # the server's default, fixed (set fields stay the form's)
            continue
        if axis in ("kv", "draft-kv"):
            floor = floors.kv if axis == "kv" else floors.draft_kv  # None: a KLD budget, measured instead
            below = [t for t in toks if floor is not None and kv_quality(t) and kv_quality(t) < KV_QUALITY[floor]]
            toks = [t for t in toks if t not in below]
            if below:
                notes.append(f"{label}: {', '.join(below)} below the floor {floor}, not searched.")
            if not toks:
                raise ValueError(f"{label}: every value is below the floor {floor}; lower the floor or give other types.")
        values.update(axis_values([f"{axis}={','.join(toks)}"], floors))
        for f in fs:
            setattr(base, f, getattr(blank, f))
    if setup.fit:
        base.fit_target = []  # searched where --fit has real device memory to act on
    return base, values, notes


def default_setup(settings: Settings) -> TuneSetup:
    """The setup a first `T` shows: the form's settings fixed (its flags, as `mtp-tune tune` fixes the
    flags it is given), MTP on and off searched (the tune's first question), every axis the form
    leaves unset searched over the CLI's values, the fit-target searched unless the form sets one, and
    the form's context kept as the least the tune gives."""
    blank = Settings()
    axes = tuple((axis, default if axis == "mtp" or all(getattr(settings, f) == getattr(blank, f) for f in fs) else "")
                 for axis, _label, fs, default in TUNE_AXES)
    return TuneSetup(axes=axes, fit=not settings.fit_target, min_ctx=str(settings.ctx_size or ""))


def prepare(settings: Settings, setup: TuneSetup, options: Any) -> Prepared | str:
    """A TuneRequest for the settings on screen and the setup, built by the CLI's own builder
    (`tune_args.build_request`: the GGUF header read once, the space checked before any launch); or
    why it cannot run."""
    # Lazy: the tune's core loads the supervisor and httpx; the check worker pays for them, not the first frame.
    from tui.core.tune.space import SpaceError
    from tui.core.tune.args import UsageError, build_request, make_floors, parse_budget, parse_max_kld
    from tui.core.tune.workload import WorkloadError, parse_workload
    from tui.core.probes.concurrency import parse_concurrency

    if options.server_bin is None:
        return "no llama-server binary: give --server-bin PATH or run `mtp-tune doctor --build`."
    try:
        spec = parse_workload(setup.workload, parse_concurrency(setup.concurrency))
        budget = parse_budget(setup.budget.strip() or None)
        min_ctx = int(setup.min_ctx.strip() or 0)
        if min_ctx < 0:
            raise ValueError("min ctx: give 0 or more tokens, or leave it empty (the workload decides).")
        if setup.ab_passes < 0:
            raise ValueError("A/B passes: give 0 (no A/B) or more.")
        # an empty field means the core's floor, the CLI's default too; a max KLD measures the main KV types instead
        floors = make_floors(setup.kv_floor.strip(), setup.draft_kv_floor.strip(), min_ctx, parse_max_kld(setup.max_kld))
        base, values, notes = fixed_and_values(settings, setup, floors)
        req, space = build_request(base, spec, floors, values, server_bin=Path(options.server_bin), gpus=gpus_of(options),
                                   budget_s=budget, ab_passes=setup.ab_passes, ready_timeout=options.ready_timeout_s,
                                   where="the form's model field",  # a remote header: cached by the form's plan
                                   stand_ins=setup.stand_ins)
    except (WorkloadError, SpaceError, UsageError, ValueError) as e:
        text = str(e)
        return text if not text.startswith("invalid literal") else "min ctx: a whole number of tokens, or empty."
    grid = len(space.grid())
    searched = [f"{a.name} {','.join(_txt(v) for v in a.values)}" for a in space.axes if len(a.values) > 1]
    if len(space.branches) > 1:
        searched.insert(0, "MTP off,on")
    side = "MTP on" if space.branches == (True,) else "MTP off" if space.branches == (False,) else ""
    what = "; ".join(searched) or "nothing (every axis is fixed)"
    summary = (f"{grid} configurations{' (' + side + ' fixed)' if side else ''}: {what} · workload {spec.text} · "
               f"budget {setup.budget.strip() or 'none'}"
               + (f" · main KV measured first, max KLD {floors.max_kld:g}" if floors.max_kld is not None else ""))
    model_notes = req.model.notes if req.model is not None else ()
    return Prepared(req, grid, summary, tuple(notes + list(space.notes) + list(model_notes)), setup)


def _txt(v: Any) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else "default" if v is None else str(v)


# --------------------------------------------------------------------------- views


def _med(s: Any) -> float | None:
    return None if s is None else float(s.median)


def best_text(rec: Any) -> str:
    """`#3 0.512 [0.50-0.53] s/request (spread 2.1%)`."""
    from tui.core.tune.result import fmt_seconds

    if rec is None:
        return ""
    s = rec.e2e()
    text = f"#{rec.number} {fmt_seconds(s)} s/request"
    return text + (f" (spread {s.spread:.1%})" if s is not None and s.n > 1 else "")


def row_view(r: Any, mark: str = "", quality: Any = None) -> TuneRowView:
    """A Trial as one row of the trial table (`quality`, a `tune.kld.QualityBook`: its measured cost)."""
    from tui.core.tune.result import settings_text

    s = r.samples
    pp, tg = (s.summary("pp_tps"), s.summary("tg_tps")) if s else (None, None)
    acc, e2e = (s.summary("acceptance"), r.e2e()) if s else (None, None)
    plan = source = ""
    if r.plan:
        source = "exact" if str(r.plan.get("message") or "").startswith("exact") else "estimate"
        plan = str(r.plan.get("risk") or "")
    return TuneRowView(r.number, bool(r.mtp), settings_text(r), r.stage, plan, source, r.vram_mib, r.status, r.failure or "",
                       _med(pp), spread(pp), _med(tg), spread(tg), _med(acc), _med(e2e), spread(e2e),
                       s.n if s else 0, r.launches, r.resumed, mark, r.reason or "",
                       quality=quality.trial_text(r) if quality is not None else "")


def tune_view(records: Sequence[Any], *, rungs: Sequence[int] = (), result: Any = None, quality: Any = None,
              **fields: Any) -> TuneView:
    """The tune screen's content from the records so far (or the finished run's `result`); `quality`:
    what was measured (`tune.kld.QualityBook`); `fields` are the TuneView's own (progress, message, the
    answer's lines)."""
    from tui.core.lab import ranking
    from tui.core.lab.trial import MEASURED, PRUNED

    recs = list(result.records if result is not None else records)
    if result is not None:
        best, same, off, on, front = result.best, result.same_as_best, result.best_mtp_off, result.best_mtp_on, result.pareto
    else:
        rungs = tuple(rungs) or ranking.RUNGS
        best, same = ranking.choose(recs, rungs)
        off, _ = ranking.choose([r for r in recs if not r.mtp], rungs)
        on, _ = ranking.choose([r for r in recs if r.mtp], rungs)
        front = ranking.pareto(recs)
    marks: dict[int, str] = {r.number: MARKS["same"] for r in same}
    for key, r in (("on", on), ("off", off), ("best", best)):
        if r is not None:
            marks[r.number] = MARKS[key]
    on_front = {r.number for r in front}
    rows = tuple(replace(row_view(r, marks.get(r.number, ""), quality), front=r.number in on_front) for r in recs)
    points = tuple(r for r in rows if r.pp is not None and r.tg is not None and r.status in MEASURED and r.passes)
    return TuneView(rows=rows, points=points, measured=sum(1 for r in recs if r.status in MEASURED),
                    pruned=sum(1 for r in recs if r.status in PRUNED), failed=sum(1 for r in recs if r.status == "failed"),
                    best=best.number if best else None, best_off=off.number if off else None, best_text=best_text(best),
                    answer=_answer(result, quality), **fields)


def _answer(result: Any, quality: Any) -> str:
    """The result's paragraph, ending with the best's quality cost when it was measured."""
    if result is None:
        return ""
    cost = f" {quality.answer(result.best)}" if quality is not None and result.best is not None else ""
    return result.message + cost


def ab_text(ab: Any, note: str) -> str:
    """The final A/B's line: which two, how many passes, the verdict for the workload (or why none)."""
    from tui.core.probes.stats import fmt_rel, fmt_summary

    if ab is None:
        return note[:1].upper() + note[1:] if note else ""
    head = ab.headline.upper()
    w_in, w_out = ab.workload
    return (f"A/B{' ' + note if note else ''}: {head} for {w_in} in / {w_out} out: MTP off "
            f"{fmt_summary(ab.a.e2e_s, 2)} s, MTP on {fmt_summary(ab.b.e2e_s, 2)} s per request "
            f"({fmt_rel(ab.e2e.rel_change)}, {ab.e2e.label}).")


def levels_text(levels: Any) -> str:
    """At a concurrency above 1, the A/B's verdict at each concurrency in a few words (`lab.ab_load`)."""
    from tui.core.probes.stats import fmt_rel

    if levels is None:
        return ""
    return " By concurrency: " + "; ".join(f"{n}: {v.headline.upper()} ({fmt_rel(v.e2e.rel_change)} time)"
                                           for n, v in levels.levels) + "."


def final_view(outcome: Any, *, budget_s: float | None = None, message: str = "") -> TuneView:
    """A finished (or cancelled, or out of budget) tune: the answer, the A/B and the break-even."""
    from tui.core.tune.result import tune_break_even

    res = outcome.result
    be = tune_break_even(res, outcome.workload, outcome.ab)
    src = "the A/B" if outcome.ab is not None else "the tune's medians"
    ends = {"converged": "tune done", "complete": "tune done (every configuration)",
            "budget": "the budget ran out: g continues where it stopped",
            "cancelled": "tune cancelled: g continues where it stopped"}
    w = outcome.workload
    return tune_view((), running=False, stopped=res.stopped, launches=outcome.launches, grid_size=res.grid_size,
                     elapsed_s=outcome.elapsed_s, budget_s=budget_s, message=message or ends.get(res.stopped, res.stopped),
                     workload=f"{w.label}: {w.in_tokens:.0f} prompt tokens and {w.out_tokens:.0f} generated per request "
                              f"on average, the longest {w.longest}",
                     result=res, quality=outcome.quality, ab=ab_text(outcome.ab, outcome.ab_note) + levels_text(outcome.ab_levels),
                     notes=tuple(outcome.notes),
                     break_even=f"Break-even output length (from {src}): {be.text()}" if be is not None else "")


class TuneTracker:
    """TuneRun events -> TuneView (on the tune's thread), handed to `emit`."""

    def __init__(self, prepared: Prepared, emit: Callable[[TuneView], None]) -> None:
        self.prepared, self.emit = prepared, emit
        self.records: list[Any] = []
        self.run: Any = None  # the TuneRun, for its launch count
        self.workload = ""
        req = prepared.request
        self.view = TuneView(running=True, grid_size=prepared.grid, budget_s=req.budget_s, message="starting…",
                             notes=prepared.notes)

    def __call__(self, ev: Any) -> None:
        if ev.kind == "trial" and ev.trial is not None:
            self.records.append(ev.trial)
        if ev.kind == "sized":
            self.workload = ev.message.removeprefix("workload ")
        message = ev.message.split("  |  ")[0]  # a trial's message ends with the run's own status line
        eta = ev.eta_s if ev.eta_s is not None else self.view.eta_s
        self.view = tune_view(self.records, rungs=self.prepared.request.options.rungs, running=True,
                              quality=getattr(self.run, "quality", None),  # measured before the first trial
                              launches=self.run.launches if self.run is not None else 0, grid_size=self.prepared.grid,
                              elapsed_s=ev.elapsed_s, eta_s=eta, budget_s=self.prepared.request.budget_s,
                              message=message, workload=self.workload, notes=self.prepared.notes)
        self.emit(self.view)


def run_tune(prepared: Prepared, *, store: Any, tracker: TuneTracker,
             started: Callable[[Any, Callable[[], None]], None]) -> tuple[Any, TuneView, str | None]:
    """Run (or continue) the tune to its end, its budget or a cancel. `started(run, stop)` hands the
    TuneRun to the caller before it runs. Returns (TuneOutcome or None, the final view, error)."""
    from tui.core.lab.events import LabError
    from tui.core.tune.run import TuneRun

    def failed(text: str) -> tuple[Any, TuneView, str | None]:
        return None, replace(tracker.view, running=False, stopped="failed", message=text, error=text), text

    try:
        tracker.run = run = TuneRun(prepared.request, store=store, on_event=tracker)
    except (ValueError, OSError) as e:
        return failed(str(e))
    started(run, run.stop)
    try:
        outcome = run.run()
    except LabError as e:
        if run.cancel.is_set():
            return None, replace(tracker.view, running=False, stopped="cancelled", message=str(e)), None
        return failed(str(e))
    except Exception as e:  # noqa: BLE001 - shown, never a traceback
        return failed(f"the tune stopped: {e}")
    return outcome, final_view(outcome, budget_s=prepared.request.budget_s), None


def save_best(outcome: Any, name: str) -> tuple[str | None, str | None]:
    """The best configuration as TOML profile `name` and INI section `[name]`: (what was written, error)."""
    from tui.core.sweep.results import save_settings

    if outcome is None or outcome.result.best is None:
        return None, "nothing measured yet, so there is no best to save"
    return saved_as(lambda: save_settings(outcome.settings_of(outcome.result.best), name))


def report_path(outcome: Any) -> Path:
    from tui.core.lab.journal import journals_dir

    return journals_dir("tune") / f"{outcome.tune_id}.md"


def write_report(outcome: Any, base: Settings) -> tuple[str | None, str | None]:
    """The Markdown report (every trial) next to the tune's saved state: (its path, error)."""
    from tui.core.tune.result import facts_from, render_report

    if outcome is None:
        return None, "no tune has finished yet, so there is no report to write"
    path = report_path(outcome)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_report(outcome.result, facts_from(outcome, base)), encoding="utf-8")
    except OSError as e:
        return None, f"the report was not written to {path}: {e.strerror or e}"
    return str(path), None
