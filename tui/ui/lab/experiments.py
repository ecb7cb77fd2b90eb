"""The lab's actions through the core: sweeps (`core.sweep`), the MTP on/off A/B and the knob searches
(`core.lab`), turned into the view models the lab's screens draw.

No Textual here. Everything that blocks (planning a grid, running a sweep, an A/B, a search) is
called from a worker thread; the trackers turn the core's events into new views on that thread
and hand them to a callable that only posts a message.

The core is imported inside the functions on purpose (lazy, not a cycle): the lab's engine loads the
server supervisor, httpx and the probe runner (about 150 ms), which the TUI's first frame must not pay
for actions most sessions never start.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tui.core.options.settings import Settings
from tui.ui.options import AppOptions
from tui.ui.shared_views import ProbePoint
from tui.ui.lab.verdict_levels import level_rows
from tui.ui.lab.views import (SWEEP_KNOBS, SearchView, SweepRowView, SweepSetup, SweepView, VerdictRow, VerdictView, Versus,
                             num)

#: Planned memory and risk per launch key: (MiB, risk, one sentence).
PlanInfo = tuple[float | None, str, str]

# --------------------------------------------------------------------------- sweeps


def definition(settings: Settings, setup: SweepSetup) -> Any:
    """The core's SweepDefinition for the settings on screen and the sweep screen's fields.

    Raises ValueError (the core's SweepDefinitionError) naming the axis or field that is wrong."""
    from tui.core.sweep.definition import build_definition

    axes = [f"{k}={v}" for k, v in setup.axes if v.strip()]
    if not axes:
        raise ValueError("give at least one axis some values, e.g. MTP on,off or ubatch 256,512")
    base = replace(settings, port=None, metrics=False)
    return build_definition(base, axes, suite=setup.suite, repeat=setup.repeat,
                            n_predict=setup.n_predict, objective=setup.objective, try_anyway=setup.try_anyway)


def simulated(options: Any) -> Any:
    """What the tuning actions plan against: the simulated profile (a HwProfile) when the App
    simulates one, else None (the GPUs NVML sees; none on a CPU-only host)."""
    return options.hardware if options.simulate else None


def planner(simulate: Any) -> Callable[[Settings], Any]:
    """The sweep's own pre-launch check (the same one `Sweep` runs), against the devices on screen."""
    from tui.core.lab.planning import plan_check

    return plan_check(simulate)


def plan_info(verdict: Any) -> PlanInfo:
    """A PlanVerdict as (planned MiB on the GPUs, or the host when there are none; risk; message)."""
    if verdict is None:
        return None, "unknown", "not planned (no local model file, or --rpc devices)"
    devices = ((verdict.details or {}).get("prediction") or {}).get("devices") or []
    gpus = [d for d in devices if str(d.get("name", "")).lower() != "host"]
    chosen = gpus or devices
    mib = sum(float(d.get("needed_mib") or 0) for d in chosen) if chosen else None
    return mib, verdict.risk, verdict.message


def plan_rows(defn: Any, check: Callable[[Settings], Any]) -> dict[str, PlanInfo]:
    """Planned memory and risk for every runnable configuration, one plan per launch."""
    out: dict[str, PlanInfo] = {}
    for c in defn.grid():
        if not c.runnable or c.launch_key in out:
            continue
        try:
            out[c.launch_key] = plan_info(check(c.settings))
        except Exception as exc:  # noqa: BLE001 - a plan that cannot be made is shown, not raised
            out[c.launch_key] = (None, "unknown", f"the planner could not plan this configuration: {exc}")
    return out


def preview(settings: Settings, setup: SweepSetup, check: Callable[[Settings], Any]) -> tuple[SweepView, Any, Any]:
    """The sweep screen's grid before it runs: (its view, the definition, its plans); ValueError names a wrong field."""
    defn = definition(settings, setup)
    plans = plan_rows(defn, check)
    return sweep_view(defn, saved_state(defn), plans), defn, plans


def saved_state(defn: Any) -> Any:
    """The saved state of this sweep (what a resume continues from), or None."""
    from tui.core.lab.journal import JournalError, load_journal

    try:
        return load_journal("sweep", defn.sweep_id)
    except JournalError:
        return None


def newest_saved(current: Settings) -> tuple[Settings, SweepSetup] | str:
    """The newest saved sweep as (its base settings, the sweep screen's fields), so `g` resumes it;
    or why none can be shown (none saved, or axes the screen has no field for: resume those with
    `mtp-tune sweep` and the same axes)."""
    from tui.core.lab.journal import list_journals
    from tui.core.sweep.axes import parse_axis
    from tui.core.options.settings import settings_from_json
    states = list_journals("sweep")
    if not states:
        return "no saved sweep yet"
    knob_of = {parse_axis(f"{knob}={hint}").field: knob for knob, _label, hint in SWEEP_KNOBS}
    for st in states:
        d = st.definition or {}
        axes = d.get("axes") or []
        if not axes or any(a.get("field") not in knob_of for a in axes):
            continue
        base = settings_from_json(d.get("base") or {})
        base = replace(base, api_key=current.api_key, host=current.host, port=current.port)
        obj = d.get("objective") or {}
        objective = (f"workload:{obj.get('in_tokens')},{obj.get('out_tokens')}" if obj.get("kind") == "workload"
                     else str(obj.get("kind") or "tg"))
        setup = SweepSetup(axes=tuple((knob_of[a["field"]], ",".join(a.get("texts") or [])) for a in axes),
                           suite=str(d.get("suite") or "tasks"), repeat=int(d.get("repeat") or 3), objective=objective,
                           try_anyway=bool(d.get("try_anyway")), n_predict=d.get("n_predict"))
        return base, setup
    return "the saved sweeps sweep options this screen has no field for; resume them with `mtp-tune sweep`"


def spread(s: Any) -> float | None:
    """A core Summary's relative spread, None where there is none to show (fewer than 2 samples)."""
    return None if s is None or s.n < 2 or math.isinf(s.spread) else float(s.spread)


MARKS = {"best": "BEST", "same": "~best", "same as best": "~best"}


def sweep_view(defn: Any, state: Any, plans: dict[str, PlanInfo], *, running: bool = False, current: int | None = None,
               points: tuple[ProbePoint, ...] = (), done: int | None = None, total: int | None = None,
               elapsed_s: float = 0.0, eta_s: float | None = None, message: str = "",
               error: str | None = None) -> SweepView:
    """The sweep screen's content from the definition, its state (None: nothing run) and the plans."""
    from tui.core.lab.journal import Journal
    from tui.core.sweep.results import build_table
    from tui.core.sweep.results import summary_lines

    st = state if state is not None else Journal("sweep", defn.sweep_id, defn.to_json())
    table = build_table(defn, st)
    grid = {c.key: c for c in defn.grid()}
    rows = []
    for r in table.rows:
        c = grid[r.key]
        mib, risk, plan_msg = plans.get(c.launch_key, (None, None, ""))
        if r.status == "invalid" or c.invalid:
            risk = "invalid"
        status = "running" if (running and r.number == current and r.status == "pending") else r.status
        mark = MARKS.get(r.vs_best or "", "") if r.status in ("ok", "duplicate") else ""
        if r.same_as is not None:
            mark = f"{mark} = #{r.same_as}".strip()
        note = r.reason or (r.warnings[0] if r.warnings else "") or (plan_msg if risk in ("oom", "tight") else "")
        rows.append(SweepRowView(
            r.number, tuple(r.values.get(a, "") for a in table.axes), status, mib, risk, r.tg_tps, spread(r.tg),
            r.pp_tps, spread(r.pp), r.acceptance, r.score.median if r.score else None, mark, note or "",
        ))
    finished = sum(1 for r in rows if r.status not in ("pending", "running"))
    summary = tuple(summary_lines(table)) if finished else ()
    return SweepView(
        axes=tuple(table.axes), objective=defn.objective.label, workload=defn.objective.kind == "workload",
        rows=tuple(rows), running=running, done=finished if done is None else done,
        total=len(rows) if total is None else total, elapsed_s=elapsed_s, eta_s=eta_s, message=message,
        current=current, points=points, best=table.best.number if table.best else None, summary=summary,
        error=error,
    )


class SweepTracker:
    """Runner events -> SweepView (on the sweep's thread), handed to `emit`."""

    def __init__(self, defn: Any, plans: dict[str, PlanInfo], emit: Callable[[SweepView], None]) -> None:
        self.defn, self.plans, self.emit = defn, plans, emit
        self.sweep: Any = None
        self.current: int | None = None
        self.points: list[ProbePoint] = []
        self.view = sweep_view(defn, saved_state(defn), plans, running=True, message="starting…")

    def __call__(self, ev: Any) -> None:
        if ev.candidate is not None and ev.kind in ("launching", "ready", "search_trial", "probe"):
            number = ev.candidate.index + 1
            if number != self.current:
                self.current, self.points = number, []
        if ev.kind == "probe" and ev.probe is not None and getattr(ev.probe, "event", "") == "request_done":
            rec = ev.probe.record
            if rec is not None:
                label = f"#{self.current}"
                self.points.append(ProbePoint(label, len(self.points), rec.tg_tps, rec.pp_tps, rec.acceptance))
        label = f"#{ev.candidate.index + 1} {ev.candidate.label}: " if ev.candidate is not None else ""
        message = f"{label}{ev.message}" if ev.message else self.view.message
        if ev.kind == "finished":
            message = {"done": "sweep done", "cancelled": "sweep cancelled: g resumes it",
                       "budget": "time budget reached: g continues"}.get(ev.message, ev.message)
        state = self.sweep.state if self.sweep is not None else None
        self.view = sweep_view(self.defn, state, self.plans, running=ev.kind != "finished", current=self.current,
                               points=tuple(self.points), done=ev.done, total=ev.total, elapsed_s=ev.elapsed_s,
                               eta_s=ev.eta_s, message=message)
        self.emit(self.view)


def run_sweep(defn: Any, *, server_bin: Path, simulate: Any, tracker: SweepTracker,
              started: Callable[[Any, Callable[[], None]], None]) -> tuple[SweepView, str | None]:
    """Run (or resume) `defn` to the end or a cancel. `started(sweep, cancel)` hands the Sweep to the
    caller before it runs. Returns the final view and an error paragraph, if any."""
    from tui.core.lab.events import LabError
    from tui.core.sweep.runner import Sweep

    def failed(text: str, **kw: Any) -> tuple[SweepView, str | None]:
        return replace(tracker.view, running=False, error=text, **kw), text

    try:
        tracker.sweep = sweep = Sweep(defn, server_bin=server_bin, on_event=tracker, planner=planner(simulate))
        started(sweep, sweep.cancel)
        outcome = sweep.run()
    except LabError as exc:
        return failed(str(exc), message=str(exc))
    except Exception as exc:  # noqa: BLE001 - anything else is shown, never a traceback
        return failed(f"the sweep stopped: {exc}")
    final = sweep_view(defn, outcome.state, tracker.plans, done=None, total=None, elapsed_s=outcome.seconds,
                       message=tracker.view.message)
    return final, None


def save_best(defn: Any, name: str) -> tuple[str | None, str | None]:
    """The best row as TOML profile `name` and INI section `[name]`: (what was written, error)."""
    from tui.core.sweep.results import build_table
    from tui.core.sweep.results import save_best as core_save_best

    state = saved_state(defn)
    if state is None:
        return None, "the sweep has not run yet, so there is no best to save"
    return saved_as(lambda: core_save_best(build_table(defn, state), name))


def saved_as(save: Callable[[], Any]) -> tuple[str | None, str | None]:
    """`save()` writes a profile and an INI section (a core SavedBest): (what was written, error)."""
    try:
        saved = save()
    except Exception as exc:  # noqa: BLE001 - ProfileError, IniWriteError, ValueError: one paragraph each
        return None, str(exc)
    return f"profile {saved.profile_path} and section [{saved.section}] of {saved.ini_path}", None


# --------------------------------------------------------------------------- MTP on/off


def verdict_view(v: Any, *, running: bool = False, done: float = 0.0, total: int = 0, eta_s: float | None = None,
                 message: str = "", title: str = "MTP on vs off") -> VerdictView:
    """A core AbVerdict as the verdict screen shows it (`title`: what was A/B'd); a LoadVerdict (MTP on
    vs off at 1 and N requests at once, `verdict_levels`) as N's verdict in full with every level's row
    side by side."""
    from tui.core.probes.stats import fmt_rel, fmt_summary

    if hasattr(v, "levels"):
        n, last = v.levels[-1]
        view = verdict_view(last, running=running, done=done, total=total, eta_s=eta_s, message=message)
        at = f" AT {n} REQUESTS AT ONCE" if view.headline and n > 1 else ""  # the call above is N's
        return replace(view, answer=v.answer(), levels=level_rows(v), headline=view.headline + at)

    def pct_summary(s: Any) -> str:
        if s is None:
            return "-"
        return f"{s.median:.0%}" if s.n < 2 else f"{s.median:.0%} [{s.min:.0%}-{s.max:.0%}]"

    a, b = v.a, v.b
    rows = (
        VerdictRow("PP t/s", fmt_summary(a.pp_tps), fmt_summary(b.pp_tps), fmt_rel(v.pp.rel_change), v.pp.label),
        VerdictRow("TG t/s", fmt_summary(a.tg_tps), fmt_summary(b.tg_tps), fmt_rel(v.tg.rel_change), v.tg.label),
        VerdictRow("acceptance", pct_summary(a.acceptance), pct_summary(b.acceptance), "", ""),
        VerdictRow(f"{v.workload[0]} in / {v.workload[1]} out (s)", fmt_summary(a.e2e_s, 2),
                   fmt_summary(b.e2e_s, 2), fmt_rel(v.e2e.rel_change), v.e2e.label),
    )
    passes = tuple(
        f"{s.side} {s.index + 1}: TG {num(s.tg_tps, '-')} PP {num(s.pp_tps, '-')}"
        + (f" acc {s.acceptance:.0%}" if s.acceptance is not None else "")
        for s in sorted(v.samples, key=lambda s: s.order)
    )
    return VerdictView(running=running, done=done, total=total, eta_s=eta_s, message=message, workload=v.workload,
                       label="" if not v.samples else v.label, headline="" if not v.samples else v.headline.upper(),
                       names=(a.name, b.name), title=title, rows=rows, break_even=v.break_even.text(v.pair.subject),
                       answer=v.answer, passes=passes, error=v.error)


def rejudge(v: Any, old: VerdictView, workload: tuple[int, int]) -> tuple[Any, VerdictView]:
    """A core AbVerdict judged for another workload (the same passes, nothing run) and its view, the
    progress of `old` kept."""
    v = v.for_workload(*workload)
    return v, verdict_view(v, running=old.running, done=old.done, total=old.total, message=old.message, title=old.title)


def progress_view(ev: Any, previous: VerdictView) -> VerdictView:
    """An A/B LabEvent as progress on the verdict screen (the numbers come with the result)."""
    return replace(previous, running=ev.kind not in ("finished", "cancelled"), done=float(ev.done), total=ev.total,
                   eta_s=ev.eta_s, message=ev.message or previous.message)


def run_ab(settings: Settings, *, versus: Versus | None = None, suite: str, workload: tuple[int, int], passes: int,
           n_predict: int | None, server_bin: Path | None, on_event: Callable[[Any], None],
           cancel: threading.Event) -> tuple[Any, str | None]:
    """MTP on vs off with `settings`, or `settings` (A) against `versus` (B), interleaved, on the lab's one
    A/B (blocking). Against a profile or another binary both sides are first checked by the one validator
    against their own build's --help. Returns (AbVerdict or None, error)."""
    from tui.core.lab.ab import AbSide, mtp_sides
    from tui.core.lab.ab import run_ab as core_run_ab
    from tui.core.lab.events import LabError
    from tui.core.lab.ranking import AB, MTP
    from tui.core.lab.sides import SideError

    settings = replace(settings, port=None)
    try:
        if versus is None:
            v = core_run_ab(*mtp_sides(settings), suite, workload, passes, pair=MTP, server_bin=server_bin,
                            n_predict=n_predict, on_event=on_event, cancel=cancel)
        else:
            a, b, differs = versus_sides(settings, versus, server_bin)
            v = core_run_ab(AbSide(a, server_bin), b, suite, workload, passes, pair=AB, differs=differs,
                            n_predict=n_predict, on_event=on_event, cancel=cancel)
    except (LabError, SideError, ValueError) as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - shown, never a traceback
        return None, f"the A/B stopped: {exc}"
    return v, v.error


def versus_sides(settings: Settings, versus: Versus, server_bin: Path | None) -> tuple[Settings, Any, tuple[str, ...]]:
    """A's settings as launched, B (a core AbSide: the profile's settings, or the same settings on another
    binary) and what differs; SideError when either side's build refuses an option, or the profile is missing."""
    from tui.core.lab.ab import AbSide
    from tui.core.lab.sides import ReadSide, SideError, read_side, vetted

    if server_bin is None:
        raise SideError("no llama-server binary is known yet for the settings on screen (mtp-tune doctor finds or builds one).")
    a = ReadSide("A", replace(settings, metrics=True), "the settings on screen")
    b = read_side("B", versus.profile) if versus.profile else replace(a, label="B")
    b_bin = Path(versus.server_bin) if versus.server_bin else server_bin
    _, differs, _ = vetted([a, b], [server_bin, b_bin])
    return a.settings, AbSide(b.settings, b_bin), differs


# --------------------------------------------------------------------------- searches

SEARCH_TITLES = {"ctx_size": "Largest context that fits", "fit_target": "Smallest fit-target that survives"}


def search_start(knob: str, options: AppOptions) -> SearchView:
    """A search about to start: its title, how its answer is written (the core's flag and unit), and
    what its launches run on (a simulated GPU's answer is this machine's, which cannot run out)."""
    from tui.core.lab.knob import KNOB_FLAGS, KNOB_UNITS

    hw = options.hardware if options.simulate else None
    if hw is not None and hw.devices:
        where = (f"measured on this machine: the simulated {hw.key} cannot run out of memory here, so the launches "
                 "only confirm the plan; T (tune) with capped stand-ins measures the card's answer")
    else:
        where = "measured on this machine's " + ("GPUs (NVML)" if not options.simulate else "CPU (no GPU)")
    return SearchView(knob, SEARCH_TITLES[knob], KNOB_FLAGS[knob], KNOB_UNITS[knob], running=True, message="starting…",
                      measured_on=where)


def search_view(v: SearchView, *, ev: Any = None, result: Any = None, error: str | None = None) -> SearchView:
    """A search's view after one event (its `trial` a core KnobTry), its SearchResult, or an error."""
    if ev is not None:
        trials = (*v.trials, ev.trial) if ev.trial is not None else v.trials
        return replace(v, running=True, message=ev.message or v.message, elapsed_s=ev.elapsed_s, trials=trials)
    if result is not None:
        return replace(v, running=False, done=True, message=result.message, trials=tuple(result.trials) or v.trials,
                       value=result.value, found=result.found, cancelled=result.cancelled, planned=result.planned,
                       settings=result.settings)
    return replace(v, running=False, done=True, message=error or "the search failed", found=False)


def run_search(knob: str, settings: Settings, *, server_bin: Path, simulate: Any,
               on_event: Callable[[Any], None], cancel: threading.Event) -> tuple[Any, str | None]:
    """The largest context or the smallest fit-target (blocking). Returns (SearchResult or None, error)."""
    from tui.core.lab import knobs as searches

    s = replace(settings, port=None)
    try:
        if knob == "ctx_size":
            devices, total, free = searches.this_machine(s, simulate)
            return searches.largest_ctx(s, devices, host_total_mib=total, host_free_mib=free, server_bin=server_bin,
                                        on_event=on_event, cancel=cancel), None
        return searches.smallest_fit_target(s, server_bin=server_bin, on_event=on_event, cancel=cancel), None
    except Exception as exc:  # noqa: BLE001 - PlanError, a model that cannot be read: one sentence
        return None, f"the search stopped: {exc}"
