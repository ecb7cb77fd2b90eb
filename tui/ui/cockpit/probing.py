"""Probe runs through the core runner; its progress events become ProbeState for the panel.

Series are kept per configuration across runs (newest run of a configuration replaces its
points), so a run with MTP on next to one with MTP off shows both side by side. A run at N requests
at once is a configuration of its own (`×N` in its label): its figures are not one user's, and MTP
on is judged against MTP off at the same concurrency.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from tui.core.config.paths import config_dir
from tui.core.options.settings import Settings
from tui.core.probes.draft_advice import advise, measured_cost
from tui.core.probes.positions import DraftPositions
from tui.core.probes.suites import BUILTIN, SuiteError, get_suite
from tui.core.server.handle import DEFAULT_N_MAX, RunningSettings
from tui.ui.cockpit.views import PlanView, ProbeState, ProbeSummary
from tui.ui.shared_views import ProbePoint

MAX_SERIES = 4


def suite_names() -> tuple[str, ...]:
    """Built-in suites, then user suites from `config_dir()/suites/` (TOML or JSONL)."""
    user_dir = config_dir() / "suites"
    user = sorted(str(p) for p in user_dir.glob("*") if p.suffix in (".toml", ".jsonl", ".json")) if user_dir.is_dir() else []
    return (*BUILTIN, *user)


def config_label(settings: Settings, running: RunningSettings | None = None, concurrency: int = 1) -> str:
    """A short name for the configuration a series measures (what users change between runs), `×N`
    for N requests at once.

    With the running settings of a server mtp-tune only watches, MTP and its n-max come from what
    the server says (unknowns shown as `?`), never from the form."""
    if running is not None and running.source == "server":
        settings = running.apply(settings)
        parts = [running.label()]
    else:
        parts = [f"MTP n{settings.spec_draft_n_max or DEFAULT_N_MAX}" if settings.mtp_enabled else "no MTP"]
    if settings.ubatch_size:
        parts.append(f"ub{settings.ubatch_size}")
    if settings.mtp_enabled and settings.cache_type_k_draft:
        parts.append(f"dkv {settings.cache_type_k_draft}")
    if settings.ctx_size:
        parts.append(f"c{settings.ctx_size}")
    if concurrency > 1:
        parts.append(f"×{concurrency}")
    return " ".join(parts)


def at_once(summary: dict[str, Any] | None) -> int:
    """The requests at once a run summary was measured at (1 for a run stored before concurrency)."""
    return int(((summary or {}).get("concurrency") or {}).get("n") or 1)


def _span(stored: Any) -> tuple[float, float, float] | None:
    """(median, min, max) of a stored `Summary`, None without one."""
    if not isinstance(stored, dict) or stored.get("median") is None:
        return None
    med = float(stored["median"])
    return med, float(stored.get("min", med)), float(stored.get("max", med))


def _load(summary: dict[str, Any]) -> dict[str, Any]:
    """A row's figures at N > 1 (the aggregate TG over each pass's concurrent phase, each request's
    own TG); nothing at one request at a time."""
    n = at_once(summary)
    if n <= 1:
        return {}
    c = summary.get("concurrency") or {}
    return {"concurrency": n, "aggregate_tg": _span(c.get("aggregate_tg_tps")), "request_tg": _span(c.get("request_tg_tps"))}


def _draft(config: str, summary: dict[str, Any], raw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A row's acceptance by draft position and the n-max advice; the cost of a drafted token is
    measured against the newest MTP-off configuration when one ran beside it (same server, the
    verdict's pairing, at the same concurrency), else the core's assumed cost."""
    pos = DraftPositions.from_json(summary.get("positions"))
    if pos is None:
        return {}
    off = next((v for k, v in reversed(raw.items())
                if k != config and k.startswith("no MTP") and at_once(v) == at_once(summary)), None)
    adv = advise(pos, measured_cost(pos, (off or {}).get("tg_tps_median"), summary.get("tg_tps_median")))
    return {} if adv is None else {"positions": pos.shares, "advised_n_max": adv.best,
                                   "advice_headline": adv.headline, "advice": adv.text}


def _summary(config: str, summary: dict[str, Any], run_id: Any, points: tuple[ProbePoint, ...],
             raw: dict[str, dict[str, Any]]) -> ProbeSummary:
    """The table's row for one configuration, from the same samples its plots draw (one point per
    request): a per-pass spread beside a per-request plot read as two different runs ("57.3 (57.3–57.3)"
    next to a plot spanning 13–202 t/s). The verdict line keeps the pass-level statistics."""
    mine = [p for p in points if p.config == config]

    def stats(values: list[float | None]) -> tuple[float | None, float | None, float | None]:
        vs = sorted(v for v in values if v is not None)
        if not vs:
            return None, None, None
        mid = len(vs) // 2
        return (vs[mid] if len(vs) % 2 else (vs[mid - 1] + vs[mid]) / 2), vs[0], vs[-1]

    tg, pp = stats([p.tg_tps for p in mine]), stats([p.pp_tps for p in mine])
    return ProbeSummary(config=config, n=len(mine), tg_median=tg[0], tg_min=tg[1], tg_max=tg[2],
                        pp_median=pp[0], pp_min=pp[1], pp_max=pp[2], acceptance=summary.get("acceptance"),
                        run_id=run_id, **_draft(config, summary, raw), **_load(summary))


def verdict_text(summaries: tuple[ProbeSummary, ...], raw: dict[str, dict[str, Any]]) -> str:
    """MTP on vs off at the same concurrency (or the last two configurations) judged with the core's
    noise-aware rule."""
    # lazy: the probe statistics (statistics) load with the first probe run, not before the first frame
    from tui.core.probes.stats import Summary, fmt_rel, verdict

    if len(summaries) < 2:
        return ""
    on = next((s for s in reversed(summaries) if s.config.startswith("MTP")), None)
    off = next((s for s in reversed(summaries)
                if s.config.startswith("no MTP") and on is not None and s.concurrency == on.concurrency), None)
    a, b = (off, on) if on and off else (summaries[-2], summaries[-1])
    if a.concurrency != b.concurrency:  # one user against N: not the same workload
        return ""
    def stored(config: str, key: str) -> Any:
        summary = raw.get(config) or {}
        return (summary.get("concurrency") or {}).get("aggregate_tg_tps") if key == "aggregate" else summary.get(key)

    parts, reasons = [], []
    keys = (("tg_tps", "TG"), ("pp_tps", "PP"))
    if b.concurrency > 1:  # what N users get together first; TG is then each request's own
        keys = (("aggregate", "aggregate TG"), *keys)
    for key, label in keys:
        sa, sb = Summary.from_json(stored(a.config, key)), Summary.from_json(stored(b.config, key))
        if sa is None or sb is None:
            continue
        v = verdict(sa, sb)
        parts.append(f"{label} {fmt_rel(v.rel_change)} {v.label}")
        if v.label in ("same", "inconclusive") and v.reason not in reasons:
            reasons.append(v.reason)
    if not parts:
        return ""
    why = f" ({'; '.join(reasons)})" if reasons else ""
    return f"{b.config} vs {a.config}: " + " · ".join(parts) + why


class _Progress:
    """Turns runner events into ProbeState snapshots (on the worker thread) and hands them on."""

    def __init__(self, previous: ProbeState, config: str, suite: str, emit: Callable[[ProbeState], None],
                 concurrency: int = 1) -> None:
        self.config = config
        self.concurrency = concurrency
        self.phase_deltas: dict[int, dict[str, float]] = {}  # at N > 1, each pass's /metrics delta
        self.suite = get_suite(suite)
        self.names = [p.name for p in self.suite.prompts]
        self.emit = emit
        keep = [p for p in previous.points if p.config != config]
        kept_configs = list(dict.fromkeys(p.config for p in keep))[-(MAX_SERIES - 1):]
        self.base_points = tuple(p for p in keep if p.config in kept_configs)
        self.base_summaries = tuple(s for s in previous.summaries if s.config in kept_configs)
        self.raw: dict[str, dict[str, Any]] = {k: v for k, v in previous.raw_summaries.items() if k in kept_configs}
        self.records: list[Any] = []
        self.state = dataclasses.replace(
            previous, running=True, done=0, total=0, points=self.base_points, summaries=self.base_summaries,
            message=f"{suite}: starting", warnings=(), verdict="",
        )

    def __call__(self, ev: Any) -> None:
        s = self.state
        if ev.event == "pass_done" and ev.metrics_delta is not None:  # N > 1: the pass's positions arrive
            self.phase_deltas[int(ev.repeat or 0)] = ev.metrics_delta
            s = self._with_summary(s, ev.run_id)
        elif ev.event == "request_started":
            msg = f"{self.suite.name}: {ev.prompt}, pass {int(ev.repeat or 0) + 1} ({self.config})"
            s = dataclasses.replace(s, done=ev.done, total=ev.total, message=msg)
        elif ev.event == "request_done" and ev.record is not None:
            rec = ev.record
            self.records.append(rec)
            point = ProbePoint(self.config, len(self.records) - 1, rec.tg_tps, rec.pp_tps, rec.acceptance)
            s = self._with_summary(dataclasses.replace(s, done=ev.done, total=ev.total, points=(*s.points, point)),
                                   ev.run_id)
        elif ev.event == "started":
            s = dataclasses.replace(s, total=ev.total, message=ev.message)
        else:
            return
        self.state = s
        self.emit(s)

    def _with_summary(self, s: ProbeState, run_id: Any) -> ProbeState:
        """`s` with this configuration's row and the verdict from the requests (and passes) so far."""
        # lazy: the probe statistics (statistics) load with the first probe run, not before the first frame
        from tui.core.probes.concurrency import run_summary

        summary = run_summary(self.records, self.names, self.concurrency, self.phase_deltas)
        self.raw[self.config] = summary
        summaries = (*self.base_summaries, _summary(self.config, summary, run_id, s.points, self.raw))
        return dataclasses.replace(s, summaries=summaries, verdict=verdict_text(summaries, self.raw),
                                   raw_summaries=dict(self.raw))


def run(*, url: str, api_key: str | None, suite: str, settings: Settings, previous: ProbeState,
        progress: Callable[[ProbeState], None], cancel: threading.Event, store: Any, hardware: Any,
        plan: PlanView | None, memory: dict[str, Any] | None, repeat: int = 3,
        n_predict: int = 512, concurrency: int = 1,
        running: Callable[[], RunningSettings | None] | None = None) -> tuple[ProbeState, Any, str | None]:
    """Run `suite` against `url` (blocking; a worker thread), `concurrency` requests at once.
    Returns (final state, run id, error).

    `running` asks the server's handle what it runs with; the run is labelled and stored from that
    (a launched server: the argv it ran; an attached one: what it says), the form only fills gaps."""
    # lazy: the probe runner (httpx) and the profile store load with the first probe run
    from tui.core.probes.run_types import RunConfig, RunContext
    from tui.core.probes.runner import run_probe_sync
    from tui.core.presets.profiles import settings_to_dict

    rs = running() if running is not None else None
    if rs is not None:
        settings = rs.apply(settings)
    config = config_label(settings, rs, concurrency)
    form = settings
    try:
        tracker = _Progress(previous, config, suite, progress, concurrency)
    except SuiteError as exc:
        return previous, None, str(exc)
    hw = None
    if hardware is not None:
        hw = {"simulated": True, "profile": hardware.key, "description": hardware.description,
              "devices": [{"name": d.name, "total_mib": d.total_mib} for d in hardware.devices]}
    attached = rs is not None and rs.source == "server"
    context = RunContext(
        url=url, label=config, model=settings.model, settings=settings_to_dict(settings),
        configured_parallel=settings.parallel, hardware=hw, memory=memory,
        # An attached server tells its n-max only after a speculative request: relabel after the warm-up.
        running=running if attached else None,
        label_of=(lambda r: config_label(form, r, concurrency)) if attached else None,
        settings_of=(lambda r: settings_to_dict(r.apply(form))) if attached else None,
    )
    try:
        result = run_probe_sync(
            url, tracker.suite, RunConfig(repeat=repeat, n_predict=n_predict, concurrency=concurrency),
            api_key=api_key, context=context,
            sink=store, progress=tracker, cancel=cancel,
        )
    except Exception as exc:  # noqa: BLE001 - the runner's own errors are in result; this is the unexpected
        return dataclasses.replace(tracker.state, running=False), None, f"the probe run stopped: {exc}"
    if context.label and context.label != config:  # the server told more than at the start
        tracker.raw.pop(config, None)
        points = tuple(dataclasses.replace(p, config=context.label) if p.config == config else p
                       for p in tracker.state.points)
        tracker.state = dataclasses.replace(tracker.state, points=points)
        config = context.label
    tracker.raw[config] = result.summary
    final_summary = _summary(config, result.summary, result.run_id, tracker.state.points, tracker.raw)
    # an MTP row measured before this MTP-off run gets its advice again, priced against it
    earlier = tuple(dataclasses.replace(b, **_draft(b.config, tracker.raw.get(b.config) or {}, tracker.raw))
                    if b.positions else b for b in tracker.base_summaries)
    summaries = (*earlier, final_summary)
    state = dataclasses.replace(
        tracker.state, running=False, summaries=summaries,
        warnings=tuple(dict.fromkeys(w.message for w in result.warnings)),  # one line per distinct warning
        message=f"{result.status}: {len(result.requests)} request(s), run {result.run_id}",
        verdict=verdict_text(summaries, tracker.raw), raw_summaries=dict(tracker.raw),
    )
    error = result.error if result.status == "failed" else None
    return state, result.run_id, error
