"""Compare two stored runs (or an MTP-on/MTP-off pair) metric by metric, and answer "is MTP worth it for me".

Every metric is judged on per-pass samples (see `records`) with the rule in `stats`: a difference is
called only when it exceeds the measured noise. The workload view turns PP and TG into the time a
request of the user's shape takes, end to end: prompt_tokens / PP + output_tokens / TG, per pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tui.core.options.diff import SettingChange, settings_changes
from tui.core.probes.breakeven import break_even, crossing
from tui.core.probes.concurrency import stored_phase_deltas
from tui.core.probes.hygiene import ProbeWarning, check_comparison, dedupe
from tui.core.probes.records import PassStats, pass_stats, prompt_stats, records_from_json
from tui.core.probes.stats import INCONCLUSIVE, SAME, Summary, Verdict, fmt_rel, fmt_summary, summarize, verdict

#: (key, label, unit, higher is better)
METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("tg_tps", "TG (generation)", "t/s", True),
    ("pp_tps", "PP (prompt)", "t/s", True),
    ("acceptance", "acceptance", "", True),
    ("mean_accept_len", "mean acceptance length", "tok/step", True),
    ("ttft_ms", "time to first token", "ms", False),
)
#: Settings fields that only concern speculative decoding (ignored when pairing MTP on/off runs).
SPEC_FIELDS = frozenset({
    "spec_type", "spec_draft_n_max", "spec_draft_n_min", "spec_draft_p_min", "cache_type_k_draft", "cache_type_v_draft",
})
#: Settings fields that never change what is measured.
IRRELEVANT_FIELDS = frozenset({"port", "host", "api_key", "metrics"})


@dataclass
class RunView:
    """The parts of a stored run a comparison needs."""

    id: int | None
    label: str
    mtp: bool | None
    status: str
    settings: dict[str, Any] | None
    config: dict[str, Any] | None
    model: str | None
    suite: str | None
    passes: list[PassStats]
    requests: list[Any]

    @classmethod
    def from_row(cls, row: Any) -> RunView:
        """From a `tui.core.results.store.RunRow` loaded with its requests (and, for a run at
        concurrency N > 1, each pass's /metrics delta its summary keeps)."""
        recs = records_from_json(row.requests)
        names = [p["name"] for p in ((row.config or {}).get("suite") or {}).get("prompts", [])] or list(
            dict.fromkeys(r.prompt for r in recs)
        )
        return cls(
            id=row.id, label=run_label(row), mtp=row.mtp, status=row.status, settings=row.settings,
            config=row.config, model=row.model, suite=row.suite,
            passes=pass_stats(recs, names, stored_phase_deltas(row.summary)), requests=recs,
        )

    def samples(self, metric: str) -> list[float]:
        """Per-pass values of `metric` (complete passes; all passes if none is complete)."""
        use = [p for p in self.passes if p.complete] or self.passes
        vals = [getattr(p, metric) for p in use]
        return [float(v) for v in vals if v is not None and math.isfinite(float(v))]


def run_label(row: Any) -> str:
    """`#12 MTP on (n-max 3)` / `#13 MTP off` / `#14 <label>`."""
    base = f"#{row.id}"
    if getattr(row, "label", None):
        return f"{base} {row.label}"
    mtp = getattr(row, "mtp", None)
    if mtp is None:
        return base
    if not mtp:
        return f"{base} MTP off"
    n = (row.settings or {}).get("spec_draft_n_max")
    return f"{base} MTP on" + (f" (n-max {n})" if n is not None else "")


@dataclass
class MetricRow:
    key: str
    label: str
    unit: str
    a: Summary | None
    b: Summary | None
    verdict: Verdict

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.key, "label": self.label, "unit": self.unit,
            "a": self.a.to_json() if self.a else None, "b": self.b.to_json() if self.b else None,
            "verdict": self.verdict.to_json(),
        }


@dataclass
class WorkloadView:
    """End-to-end seconds per request for a given prompt and output length, per side."""

    prompt_tokens: int
    output_tokens: int
    a: Summary | None
    b: Summary | None
    verdict: Verdict
    break_even_output: float | None  # output length where both sides take equally long, if any
    answer: str

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
            "a_seconds": self.a.to_json() if self.a else None, "b_seconds": self.b.to_json() if self.b else None,
            "verdict": self.verdict.to_json(), "break_even_output_tokens": self.break_even_output,
            "answer": self.answer,
        }


@dataclass
class Comparison:
    a: RunView
    b: RunView
    metrics: list[MetricRow]
    prompts: list[dict[str, Any]]
    changed: tuple[SettingChange, ...]
    warnings: list[ProbeWarning] = field(default_factory=list)
    workload: WorkloadView | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "a": {"run_id": self.a.id, "label": self.a.label, "mtp": self.a.mtp},
            "b": {"run_id": self.b.id, "label": self.b.label, "mtp": self.b.mtp},
            "changed": {c.key: {"flag": c.flag, "a": c.a, "b": c.b} for c in self.changed},
            "metrics": [m.to_json() for m in self.metrics],
            "prompts": self.prompts,
            "workload": self.workload.to_json() if self.workload else None,
            "warnings": [w.to_json() for w in self.warnings],
        }


def _pairing_warnings(a: RunView, b: RunView, changed: tuple[SettingChange, ...]) -> list[ProbeWarning]:
    out = []
    # Turning MTP on or off changes the speculative fields together: that is one change.
    mtp_pair = a.mtp is not None and b.mtp is not None and a.mtp != b.mtp
    changes = [c.flag for c in changed if not (mtp_pair and c.key in SPEC_FIELDS)] + (["MTP on/off"] if mtp_pair else [])
    if a.settings is not None and b.settings is not None and len(changes) > 1:
        out.append(ProbeWarning(
            "not_paired",
            f"{len(changes)} things differ ({', '.join(changes)}): with more than one change, the comparison "
            "cannot say which one made the difference. Change one thing at a time.", "info",
        ))
    for what, va, vb in (
        ("suite", a.suite, b.suite),
        ("n_predict", (a.config or {}).get("n_predict"), (b.config or {}).get("n_predict")),
        ("model", a.model, b.model),
    ):
        if va != vb and va is not None and vb is not None:
            out.append(ProbeWarning("not_paired", f"the runs differ in {what} ({va} vs {vb}); the numbers are not a paired A/B."))
    for side in (a, b):
        if side.status != "ok":
            out.append(ProbeWarning("run_not_ok", f"run {side.label} ended {side.status}; only its completed requests count."))
    return out


def compare_runs(
    a: RunView,
    b: RunView,
    *,
    workload: tuple[int, int] | None = None,
    pp_a: RunView | None = None,
    pp_b: RunView | None = None,
) -> Comparison:
    """B judged against A for every metric, per prompt for TG, and optionally for a workload.

    `pp_a`/`pp_b` supply PP from other runs (e.g. long-prompt runs next to task runs) for the workload.
    """
    rows: list[MetricRow] = []
    warnings: list[ProbeWarning] = []
    for key, label, unit, hib in METRICS:
        sa, sb = summarize(a.samples(key)), summarize(b.samples(key))
        if sa is None and sb is None:
            continue
        v = verdict(sa, sb, higher_is_better=hib)
        rows.append(MetricRow(key, label, unit, sa, sb, v))
        if key in ("tg_tps", "pp_tps"):
            warnings += check_comparison(label, v)
    prompts = _prompt_rows(a, b)
    changed = settings_changes(a.settings, b.settings, ignore=IRRELEVANT_FIELDS)
    warnings += _pairing_warnings(a, b, changed)
    wl = None
    if workload is not None:
        wl = workload_view(a, b, workload[0], workload[1], pp_a=pp_a, pp_b=pp_b)
        warnings += check_comparison("end-to-end time", wl.verdict)
    return Comparison(a, b, rows, prompts, changed, dedupe(warnings), wl)


def _prompt_rows(a: RunView, b: RunView) -> list[dict[str, Any]]:
    pa = {p.name: p for p in prompt_stats(a.requests)}
    pb = {p.name: p for p in prompt_stats(b.requests)}
    out = []
    for name in [n for n in pa if n in pb]:
        x, y = pa[name], pb[name]
        v = verdict(x.tg_tps, y.tg_tps)
        out.append({
            "prompt": name, "kind": x.kind,
            "a_tg": x.tg_tps.to_json() if x.tg_tps else None, "b_tg": y.tg_tps.to_json() if y.tg_tps else None,
            "a_acceptance": x.acceptance, "b_acceptance": y.acceptance, "verdict": v.to_json(),
        })
    return out


def e2e_seconds(prompt_tokens: int, output_tokens: int, pp_tps: float | None, tg_tps: float | None) -> float | None:
    """prompt / PP + output / TG, or None when a needed speed is missing."""
    if output_tokens and not tg_tps:
        return None
    if prompt_tokens and not pp_tps:
        return None
    return (prompt_tokens / pp_tps if prompt_tokens else 0.0) + (output_tokens / tg_tps if output_tokens else 0.0)


def _e2e_samples(tg_run: RunView, pp_run: RunView, n_in: int, n_out: int) -> list[float]:
    tg = tg_run.samples("tg_tps")
    pp = pp_run.samples("pp_tps")
    n = min(len(tg), len(pp)) if n_in else len(tg)
    out = []
    for i in range(n):
        t = e2e_seconds(n_in, n_out, pp[i] if n_in else None, tg[i])
        if t is not None:
            out.append(t)
    return out


def _median(run: RunView, key: str) -> float | None:
    s = summarize(run.samples(key))
    return s.median if s else None


def workload_view(
    a: RunView, b: RunView, prompt_tokens: int, output_tokens: int, *, pp_a: RunView | None = None,
    pp_b: RunView | None = None,
) -> WorkloadView:
    """Seconds per request of `prompt_tokens` in and `output_tokens` out, for each side, and a plain answer."""
    pa, pb = pp_a or a, pp_b or b
    sa = summarize(_e2e_samples(a, pa, prompt_tokens, output_tokens))
    sb = summarize(_e2e_samples(b, pb, prompt_tokens, output_tokens))
    v = verdict(sa, sb, higher_is_better=False)
    be = _break_even(prompt_tokens, _median(pa, "pp_tps"), _median(a, "tg_tps"), _median(pb, "pp_tps"), _median(b, "tg_tps"))
    return WorkloadView(prompt_tokens, output_tokens, sa, sb, v, be, _answer(a, b, sa, sb, v, prompt_tokens, output_tokens, be))


def _break_even(n_in: int, pp_a: float | None, tg_a: float | None, pp_b: float | None, tg_b: float | None) -> float | None:
    """Output length L where n_in/pp_a + L/tg_a == n_in/pp_b + L/tg_b (None if no positive solution)."""
    return crossing(break_even(n_in, pp_a, tg_a, pp_b, tg_b))


def _answer(
    a: RunView, b: RunView, sa: Summary | None, sb: Summary | None, v: Verdict, n_in: int, n_out: int, be: float | None
) -> str:
    shape = f"{n_in} tokens in, {n_out} out"
    if sa is None or sb is None:
        return f"{shape}: not enough data (each side needs PP and TG numbers; run the `full` suite, or pass PP runs)."
    head = f"{shape}: {a.label} {fmt_summary(sa, 2)} s, {b.label} {fmt_summary(sb, 2)} s per request."
    mtp_side = b if (b.mtp and a.mtp is False) else a if (a.mtp and b.mtp is False) else None
    if v.label == INCONCLUSIVE:
        return f"{head} Inconclusive: {v.reason}."
    if v.label == SAME:
        tail = " MTP makes no measurable difference for this workload." if mtp_side else ""
        return f"{head} Within the noise ({v.reason}).{tail}"
    faster = b if v.label == "better" else a
    saved = abs(sb.median - sa.median)
    slower = max(sa.median, sb.median)
    text = (
        f"{head} {faster.label} is faster: {saved:.2f} s less per request ({saved / slower:.0%} less time), "
        f"beyond the noise of {(v.noise or 0):.1%}."
    )
    if mtp_side is not None:
        text += " MTP is worth it for this workload." if faster is mtp_side else " MTP costs time for this workload."
    if be is not None:
        text += f" The two break even at about {be:.0f} output tokens for this prompt length."
    return text


def find_mtp_pair(store: Any, run_id: int) -> int | None:
    """The newest ok run that differs from `run_id` only in MTP (same model, suite, probe options, and
    settings apart from the speculative fields), with the opposite MTP state."""
    base = store.require(run_id)
    if base.mtp is None:
        return None

    def opts(c: dict[str, Any] | None) -> dict[str, Any]:
        return {k: (c or {}).get(k) for k in ("n_predict", "repeat", "seed", "temperature", "ignore_eos")}

    for row in store.list_runs(status="ok"):
        if row.id == run_id or row.mtp is None or row.mtp == base.mtp:
            continue
        if row.model != base.model or row.suite != base.suite or opts(row.config) != opts(base.config):
            continue
        if settings_changes(row.settings, base.settings, ignore=SPEC_FIELDS | IRRELEVANT_FIELDS):
            continue
        return row.id
    return None


# ---- text rendering (plain; the TUI draws its own) --------------------------------------------


def render_comparison(c: Comparison) -> str:
    """A plain-text report: metrics with median [min-max], relative change, verdict; prompts; workload."""
    lines = [f"A = {c.a.label}   B = {c.b.label}"]
    if c.changed:
        lines.append("changed: " + ", ".join(map(str, c.changed)))
    lines.append("")
    w = max([len(m.label) for m in c.metrics] + [6])
    lines.append(f"{'metric':<{w}}  {'A median [min-max]':>26}  {'B median [min-max]':>26}  {'change':>8}  {'noise':>6}  verdict")
    for m in c.metrics:
        digits = 3 if m.key == "acceptance" else 2 if m.key == "mean_accept_len" else 1
        noise = "-" if m.verdict.noise is None else f"{m.verdict.noise:.1%}"
        lines.append(
            f"{m.label:<{w}}  {fmt_summary(m.a, digits):>26}  {fmt_summary(m.b, digits):>26}  "
            f"{fmt_rel(m.verdict.rel_change):>8}  {noise:>6}  {_word(m.verdict)}"
        )
    if c.prompts:
        lines += ["", "TG per prompt (t/s, median [min-max] over repeats):"]
        pw = max(len(p["prompt"]) for p in c.prompts)
        for p in c.prompts:
            va = Summary.from_json(p["a_tg"])
            vb = Summary.from_json(p["b_tg"])
            vd = p["verdict"]
            acc = "  acc " + " -> ".join("-" if x is None else f"{x:.2f}" for x in (p["a_acceptance"], p["b_acceptance"]))
            lines.append(
                f"  {p['prompt']:<{pw}}  {fmt_summary(va):>22}  {fmt_summary(vb):>22}  {fmt_rel(vd['rel_change']):>8}  "
                f"{vd['label']:<12}{acc}"
            )
    if c.workload is not None:
        lines += ["", "workload: " + c.workload.answer]
    if c.warnings:
        lines += [""] + [f"! {x.message}" for x in c.warnings]
    return "\n".join(lines)


def _word(v: Verdict) -> str:
    if v.label == INCONCLUSIVE and v.rel_change is None and v.noise is None:
        return "n/a (no data on one side)"
    return {"better": "B better", "worse": "B worse", "same": "same (within noise)"}.get(v.label, v.label)
