"""The sweep's answer: a table with one row per configuration, the best one for the objective, the
ones within the noise of it, and where MTP starts to pay along a generation-length axis; `save_best`
saves the best as a TOML profile and a `--models-preset` INI section in one step (`save_settings`
for settings chosen elsewhere: the tune's best).

"Best" and "within the noise" are `lab.ranking`'s, the rule every ranking in mtp-tune uses: the
leader is the row with the best median objective (preferring rows measured with every repeat), the
rows within the noise are those whose range over passes overlaps the leader's, and the best is the
cheapest of them (MTP off, smaller micro-batch, less memory, shorter draft). With one pass per row
the noise is unknown and no row is called equal.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tui.core.lab import ranking
from tui.core.lab.candidate import Candidate, value_text
from tui.core.lab.journal import Journal
from tui.core.lab.trial import Trial
from tui.core.probes.stats import BETTER, SAME, Summary, summarize, verdict
from tui.core.options.settings import Settings, settings_from_json, settings_json
from tui.core.sweep.axes import Objective
from tui.core.sweep.definition import SweepDefinition, normalize, settings_key


@dataclass
class TableRow:
    """One configuration as shown: its axis values, what happened, and the numbers."""

    number: int  # 1-based grid position (what "#3" refers to)
    key: str
    values: dict[str, str]  # axis name -> value text
    n_predict: int | None
    status: str  # ok | failed | invalid | duplicate | predicted_oom | pending
    reason: str | None = None
    failure_kind: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    tg_tps: float | None = None
    pp_tps: float | None = None
    acceptance: float | None = None
    tg: Summary | None = None
    pp: Summary | None = None
    score: Summary | None = None  # the objective over passes
    memory_mib: float | None = None
    memory: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    same_as: int | None = None  # for duplicates: the row whose launch and numbers this row shares
    finding: dict[str, Any] | None = None
    run_id: int | None = None
    vs_best: str | None = None  # best | same | worse | better | inconclusive

    @property
    def measured(self) -> bool:
        return self.status == "ok" or (self.status == "duplicate" and self.tg_tps is not None)

    def to_json(self) -> dict[str, Any]:
        summaries = ("tg", "pp", "score")
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in summaries}
        return {**d, "tg_spread": _spread(self.tg), "pp_spread": _spread(self.pp),
                **{k: s.to_json() if (s := getattr(self, k)) else None for k in summaries}}


@dataclass
class MtpPoint:
    n_predict: int
    tg_on: float
    tg_off: float
    gain: float  # relative TG change with MTP on
    verdict: str  # better | worse | same | inconclusive (MTP on vs off)
    noise: float | None = None  # the verdict's noise; None when unknown (one pass a side)


@dataclass
class MtpPays:
    """Along the generation-length axis, for one MTP-on configuration against the same without MTP."""

    label: str  # the on configuration's other axis values
    points: list[MtpPoint]
    pays_from: int | None  # smallest n_predict from which MTP is faster at every longer length

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "pays_from": self.pays_from,
                "points": [p.__dict__ for p in self.points]}


@dataclass
class SweepTable:
    sweep_id: str
    axes: list[str]
    objective: Objective
    rows: list[TableRow]
    best: TableRow | None
    within_noise: list[TableRow]
    noise_known: bool
    mtp_pays: list[MtpPays]
    findings: list[dict[str, Any]]
    launches: int

    @property
    def complete(self) -> bool:
        return all(r.status != "pending" for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"sweep_id": self.sweep_id, "objective": self.objective.text(), "complete": self.complete,
                "launches": self.launches, "axes": self.axes, "rows": [r.to_json() for r in self.rows],
                "best": self.best.to_json() if self.best else None,
                "within_noise": [r.number for r in self.within_noise], "noise_known": self.noise_known,
                "mtp_pays": [m.to_json() for m in self.mtp_pays], "findings": self.findings}

    def best_settings(self) -> Settings | None:
        return settings_from_json(self.best.settings) if self.best else None

    def render(self, width: int = 160) -> str:
        """A plain-text table (no colour codes) with numbered notes for reasons and warnings."""
        t, obj = self, self.objective
        head = ["#", *t.axes, "status", "TG t/s", "PP t/s", "accept", "mem MiB"]
        if obj.kind == "workload":
            head.append("e2e s")
        head.append("notes")
        notes: dict[str, int] = {}  # each note once, numbered in order

        def note(text: str) -> str:
            return f"[{notes.setdefault(text, len(notes) + 1)}]"

        body: list[list[str]] = []
        for r in t.rows:
            tg = f"{_fmt(r.tg_tps)} {_fmt_spread(r.tg)}".strip() if r.tg_tps is not None else "-"
            pp = f"{_fmt(r.pp_tps)} {_fmt_spread(r.pp)}".strip() if r.pp_tps is not None else "-"
            acc = "-" if r.acceptance is None else f"{r.acceptance:.0%}"
            mem = _fmt(r.memory_mib, 0)
            marks: list[str] = []
            if r.vs_best == "best":
                marks.append("BEST")
            elif r.vs_best in (SAME, "same as best") and r.status == "ok":
                marks.append("~best")
            if r.same_as is not None:
                marks.append(f"= #{r.same_as}")
            if r.reason and r.status != "duplicate":
                marks.append(note(f"{STATUS_TEXT.get(r.status, r.status)}: {r.reason}"))
            elif r.reason and r.status == "duplicate":
                marks.append(note(r.reason))
            for w in r.warnings:
                marks.append(note(w))
            if r.finding and r.finding.get("converged"):
                marks.append(f"{r.finding['flag']} {r.finding['value']}")
            status = STATUS_TEXT.get(r.status, r.status)
            line = [str(r.number), *[r.values.get(a, "") for a in t.axes], status, tg, pp, acc, mem]
            if obj.kind == "workload":
                line.append(_fmt(r.score.median if r.score else None, 2))
            line.append(" ".join(marks))
            body.append(line)
        widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
        out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(),
               "  ".join("-" * w for w in widths)]
        out += ["  ".join(c.ljust(w) for c, w in zip(b, widths)).rstrip() for b in body]
        out.append("")
        out.extend(summary_lines(t))
        if notes:
            out.append("")
            out.append("Notes:")
            for i, n in enumerate(notes, 1):
                out.append(_wrap(f"[{i}] {n}", width, "    "))
        return "\n".join(out)


def _spread(s: Summary | None) -> float | None:
    if s is None or s.n < 2 or math.isinf(s.spread):
        return None
    return s.spread


def _score_summary(obj: Objective, t: Trial) -> Summary | None:
    if obj.kind in ("tg", "pp"):
        return t.summary(f"{obj.kind}_tps")
    return summarize([obj.score(p["tg_tps"], p["pp_tps"]) for p in t.samples.passes()] if t.samples else [])


def build_table(definition: SweepDefinition, state: Journal) -> SweepTable:
    """The table of a sweep from its saved state (grid order; unfinished rows are `pending`)."""
    obj = definition.objective
    configs = definition.grid()
    rows: list[TableRow] = []
    for c in configs:
        r = state.trials.get(c.key)
        values = {name: value_text(v, name) for name, v in c.values}
        if r is None:
            rows.append(TableRow(c.index + 1, c.key, values, c.n_predict, "pending", settings=settings_json(c.settings.redacted())))
            continue
        rows.append(_row(c, r, values, obj))
    # Duplicates take their original's numbers.
    by_number = {r.key: r for r in rows}
    for tr, c in zip(rows, configs):
        if c.duplicate_of is not None:
            orig = by_number.get(c.duplicate_of)
            if orig is not None:
                tr.same_as = orig.number
                if tr.status == "duplicate":
                    tr.reason = c.duplicate_reason
                    for attr in ("tg_tps", "pp_tps", "acceptance", "tg", "pp", "score", "memory_mib", "memory", "run_id"):
                        setattr(tr, attr, getattr(orig, attr))
    best, within, noise_known = _best(rows, obj, definition.repeat)
    pays = mtp_pays(definition, configs, rows) if any(a.is_n_predict for a in definition.axes) else []
    return SweepTable(definition.sweep_id, [a.name for a in definition.axes], obj, rows, best, within, noise_known, pays,
                      list(state.findings), state.launches)


def _row(c: Candidate, t: Trial, values: dict[str, str], obj: Objective) -> TableRow:
    tg, pp = t.summary("tg_tps"), t.summary("pp_tps")
    mem = t.memory or None
    return TableRow(
        c.index + 1, c.key, values, c.n_predict, t.status, reason=t.reason, failure_kind=t.failure_kind,
        settings=t.settings or settings_json(c.settings.redacted()), tg_tps=tg.median if tg else None,
        pp_tps=pp.median if pp else None, acceptance=t.accept_rate(), tg=tg, pp=pp,
        score=_score_summary(obj, t) if t.status == "ok" else None, memory_mib=(mem or {}).get("total_mib"), memory=mem,
        warnings=list(t.warnings), finding=t.finding, run_id=t.run_id,
    )


def _cost(obj: Objective) -> Any:
    def cost(r: TableRow) -> tuple[Any, ...]:
        med = r.score.median if r.score is not None else None
        then = None if med is None else -med if obj.higher_is_better else med
        return (*ranking.cost_order(mtp=bool(r.settings.get("spec_type")), ubatch=r.settings.get("ubatch_size"),
                                    vram_mib=r.memory_mib, draft_n_max=r.settings.get("spec_draft_n_max"), then=then),
                r.number)
    return cost


def _best(rows: list[TableRow], obj: Objective, repeat: int) -> tuple[TableRow | None, list[TableRow], bool]:
    """(best, the other rows within the noise of the leader, whether the noise is known): `lab.ranking`."""
    cands = [r for r in rows if r.status == "ok" and r.score is not None]
    best, lead, within = ranking.best_of(cands, lambda r: r.score, _cost(obj), higher_is_better=obj.higher_is_better,
                                         full=repeat)
    if best is None or lead is None:
        return None, [], False
    noise_known = best.score is not None and best.score.n >= 2
    for r in cands:  # each row against the leader: the rows `same` as it are the ones the best was chosen from
        r.vs_best = verdict(lead.score, r.score, higher_is_better=obj.higher_is_better).label
    best.vs_best = "best"
    for r in rows:
        if r.status == "duplicate" and r.same_as is not None:
            orig = next((x for x in rows if x.number == r.same_as), None)
            if orig is not None:
                r.vs_best = "same as best" if orig is best else orig.vs_best
    return best, within, noise_known


def mtp_pays(definition: SweepDefinition, configs: list[Candidate], rows: list[TableRow]) -> list[MtpPays]:
    """For each MTP-on configuration measured at several generation lengths: TG with and without MTP
    at each length, and the length from which MTP is faster at every longer one."""
    row_of = {r.key: r for r in rows}
    off_index: dict[tuple[str, int | None], TableRow] = {}
    for c in configs:
        r = row_of[c.key]
        if not c.settings.mtp_enabled and r.measured and r.tg_tps:
            off_index.setdefault((c.launch_key, c.n_predict), r)
    series: dict[str, list[tuple[Candidate, TableRow]]] = {}
    for c in configs:
        r = row_of[c.key]
        if c.settings.mtp_enabled and r.status == "ok" and r.tg_tps and c.n_predict:
            series.setdefault(c.launch_key, []).append((c, r))
    out: list[MtpPays] = []
    for items in series.values():
        pts: list[MtpPoint] = []
        for c, r in sorted(items, key=lambda x: x[0].n_predict or 0):
            off_settings = normalize(Settings(**{**c.settings.__dict__, "spec_type": []}))
            off = off_index.get((settings_key(off_settings), c.n_predict))
            if off is None or not off.tg_tps or r.tg_tps is None:
                continue
            v = verdict(off.tg, r.tg, higher_is_better=True)
            pts.append(MtpPoint(int(c.n_predict or 0), r.tg_tps, off.tg_tps, (r.tg_tps - off.tg_tps) / off.tg_tps, v.label,
                               v.noise))
        if not pts:
            continue
        pays_from = next((p.n_predict for i, p in enumerate(pts) if all(_pays(q) for q in pts[i:])), None)
        label = " ".join(f"{k}={v}" for k, v in row_of[items[0][0].key].values.items()
                         if k not in ("n-predict",) and not _is_spec_axis(definition, k))
        out.append(MtpPays(label or "MTP on", pts, pays_from))
    return out


def _pays(p: MtpPoint) -> bool:
    if p.verdict == BETTER:
        return True
    if p.verdict == "inconclusive" and p.noise is None:  # noise unknown: the median is all there is
        return p.gain > 0
    return False


def _is_spec_axis(definition: SweepDefinition, name: str) -> bool:
    return any(a.name == name and a.field == "spec_type" for a in definition.axes)


# --------------------------------------------------------------------------- rendering


def _fmt(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _fmt_spread(s: Summary | None) -> str:
    sp = _spread(s)
    return "" if sp is None else f"±{sp * 50:.0f}%" if sp * 50 >= 1 else "±<1%"


STATUS_TEXT = {"ok": "ok", "failed": "FAILED", "invalid": "invalid", "duplicate": "dup", "predicted_oom": "skip:oom",
               "pending": "pending"}


def summary_lines(t: SweepTable) -> list[str]:
    """Best, within noise, MTP break-even and findings, one fact per line."""
    out: list[str] = []
    obj = t.objective
    if t.best is None:
        out.append(f"No configuration was measured, so there is no best for {obj.label}.")
    else:
        b = t.best
        val = b.score.median if b.score else None
        unit = "s" if obj.kind == "workload" else "t/s"
        digits = 2 if obj.kind == "workload" else 1
        where = " ".join(f"{k}={v}" for k, v in b.values.items()) or "the base settings"
        out.append(f"Best for {obj.label}: #{b.number} ({where}) at {_fmt(val, digits)} {unit}.")
        if t.within_noise:
            out.append("Within the noise of the best: " + ", ".join(f"#{r.number}" for r in t.within_noise) + ".")
        elif not t.noise_known:
            out.append("Noise unknown (one pass per row): run with --repeat 3 or more to tell close rows apart.")
        else:
            out.append("No other configuration is within the noise of the best.")
    for m in t.mtp_pays:
        pts = ", ".join(f"{p.n_predict}: {p.gain:+.0%}" for p in m.points)
        if m.pays_from is not None:
            out.append(f"MTP ({m.label}) pays from {m.pays_from} generated tokens on (TG gain by length: {pts}).")
        else:
            out.append(f"MTP ({m.label}) does not pay at any measured length (TG gain by length: {pts}).")
    for f in t.findings:
        if f.get("converged"):
            out.append(f"Finding: {f.get('label', '')}: {f.get('message')}")
        else:
            out.append(f"Finding: {f.get('label', '')}: no working {f.get('flag')}: {f.get('message')}")
    if not t.complete:
        left = sum(1 for r in t.rows if r.status == "pending")
        out.append(f"{left} configuration(s) not run yet: re-run the same sweep to continue.")
    return out


def _wrap(text: str, width: int, indent: str) -> str:
    return textwrap.fill(text, width=width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


@dataclass
class SavedBest:
    profile_path: Path
    ini_path: Path
    section: str
    settings: Settings


def save_best(table: SweepTable, name: str, *, ini_path: str | Path | None = None) -> SavedBest:
    """Save the best configuration as profile `name` (TOML) and as section `[name]` of a
    `--models-preset` INI file (default: `config_dir()/presets.ini`), in one step.

    Both are checked before either is written: a name or value the INI cannot hold leaves neither
    file changed. Raises ValueError with a one-paragraph message when there is no best.
    """
    if table.best is None:
        raise ValueError("the sweep has no measured configuration yet, so there is no best to save; run it first.")
    settings = table.best_settings()
    assert settings is not None
    return save_settings(settings, name, ini_path=ini_path)


def save_settings(settings: Settings, name: str, *, ini_path: str | Path | None = None) -> SavedBest:
    """`save_best` for settings chosen elsewhere (the tune's best): profile `name` and INI section `[name]`."""
    from tui.core import presets as preset_ini
    from tui.core.presets import profiles
    from tui.core.config.paths import config_dir

    settings = replace(settings, port=None, api_key=None)
    profiles.check_name(name)
    target = Path(ini_path) if ini_path is not None else config_dir() / "presets.ini"
    # Check the INI side first, so a refusal leaves the profile unwritten too.
    preset_ini.settings_to_ini(name, settings)
    if target.exists():
        existing = preset_ini.read_preset(target)
        if not existing.server_accepts:
            first = next((p for p in existing.problems if p.rejects), None)
            raise preset_ini.IniWriteError(f"{target} is already refused by llama-server ({first}); fix it first, "
                                           "nothing was saved.")
    profile_path = profiles.save_profile(name, settings)
    res = preset_ini.write_section(target, name, settings)
    return SavedBest(profile_path, res.path, name, settings)
