"""The runs screen's one door to the core: stored runs listed, one opened, two compared with the
core's noise-aware verdict and settings diff, some exported, all through the results store the App
opened once; and, for snapshots and screenshots, a fixed preview with the same methods.

No Textual here. Every `RunsController` method can block (the store is SQLite, opened on first use):
the screen calls them from its workers when `blocking` says so, and at once for the preview.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tui.core.config.paths import data_dir
from tui.core.options.argv import command_line, settings_to_argv
from tui.core.options.lookup import default
from tui.core.options.settings import settings_from_json
from tui.core.probes.draft_advice import advise
from tui.core.probes.positions import DraftPositions
from tui.core.quality.index import kv_quality, measured_on
from tui.core.quality.request import REFERENCE_TYPE, KvPair
from tui.ui.format import pct
from tui.ui.runs.preview import RunsPreview
from tui.ui.runs.views import CompareRow, CompareView, RunDetail, RunRow


def _num(summary: dict[str, Any] | None, *keys: str) -> float | None:
    cur: Any = summary or {}
    for k in keys:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(k)
    return float(cur) if isinstance(cur, (int, float)) else None


def _when(created_at: float) -> str:
    return _dt.datetime.fromtimestamp(created_at).strftime("%Y-%m-%d %H:%M")


def run_row(r: Any) -> RunRow:
    """One core `store.RunRow` as the runs table shows it."""
    summary = r.summary or {}
    when = _when(r.created_at)
    config = r.label or _config_label(r.settings, r.mtp)
    return RunRow(
        run_id=r.id, when=when, config=config,
        tg_median=_num(summary, "tg_tps_median"), pp_median=_num(summary, "pp_tps_median"),
        acceptance=_num(summary, "acceptance"), n=int(summary.get("n_requests") or 0),
        warnings=len(r.warnings or []), failed=r.status == "failed",
    )


def _config_label(settings: dict[str, Any] | None, mtp: bool | None) -> str:
    s = settings or {}
    parts = [f"MTP n-max {s.get('spec_draft_n_max') or default('--spec-draft-n-max')}" if mtp else "no MTP"]
    if s.get("ubatch_size"):
        parts.append(f"ub {s['ubatch_size']}")
    if s.get("cache_type_k_draft"):
        parts.append(f"ctkd {s['cache_type_k_draft']}")
    if s.get("ctx_size"):
        parts.append(f"c {s['ctx_size']}")
    return " · ".join(parts)


class RunsController:
    """List, open, compare and export stored runs; each call answers (result, one-sentence error) and never raises."""

    #: The calls read SQLite: the screen runs them in workers.
    blocking = True
    #: The runs marked when the screen opens (a preview's pair; none live).
    compared: tuple[int | str, ...] = ()

    def __init__(self, store: Callable[[], Any]) -> None:
        """`store()`: the App's one results store (tui.core.results.store), opened on first use; it
        raises StoreError with the user's sentence when the database cannot be opened."""
        self._store = store

    def preview(self, rows: tuple[RunRow, ...], comparison: tuple[CompareRow, ...] = (),
                compared: tuple[int | str, ...] = ()) -> RunsPreview:
        """The same calls over fixed rows (snapshots, screenshots): no store, nothing blocks."""
        return RunsPreview(rows, comparison, compared)

    def list_runs(self, limit: int = 200) -> tuple[tuple[RunRow, ...], str | None]:
        """The newest `limit` runs, newest first."""
        try:
            return tuple(run_row(r) for r in self._store().list_runs(limit=limit)), None
        except Exception as exc:  # noqa: BLE001 - a broken database is shown, not raised
            return (), f"the runs could not be read: {exc}"

    def detail(self, run_id: int | str) -> tuple[RunDetail | None, str | None]:
        """Run `run_id` opened: its command line, measurements and notes in full."""
        try:
            return run_detail(self._store().require(int(run_id))), None
        except Exception as exc:  # noqa: BLE001 - StoreError names the run or the database
            return None, str(exc)

    def compare(self, a: int | str, b: int | str) -> tuple[CompareView | None, str | None]:
        """Run `b` judged against run `a`, or the error."""
        try:
            return compare(self._store(), int(a), int(b))
        except Exception as exc:  # noqa: BLE001 - StoreError names the run or the database
            return None, str(exc)

    def export(self, ids: tuple[int | str, ...], fmt: str) -> tuple[str | None, str | None]:
        """The runs `ids` written as `fmt` (md, csv, json) under the data dir: the path, or the error."""
        try:
            return export(self._store(), tuple(int(i) for i in ids), fmt)
        except Exception as exc:  # noqa: BLE001
            return None, str(exc)


def compare(store: Any, a: int, b: int, workload: tuple[int, int] = (12_000, 800)
            ) -> tuple[CompareView | None, str | None]:
    """B judged against A per metric with the core's noise-aware verdict, the settings that differ as
    llama-server reads them (the core resolves defaults), plus the workload answer."""
    # lazy: the comparison and its statistics load when the screen compares, not before the first frame
    from tui.core.probes.compare import RunView, compare_runs
    from tui.core.probes.stats import fmt_rel, fmt_summary

    try:
        ra, rb = store.require(a), store.require(b)
    except Exception as exc:  # noqa: BLE001 - StoreError names the run
        return None, str(exc)
    c = compare_runs(RunView.from_row(ra), RunView.from_row(rb), workload=workload)
    rows = []
    for m in c.metrics:
        digits = 2 if m.key in ("acceptance", "mean_accept_len") else 1
        unit = f" ({m.unit})" if m.unit else ""
        rows.append(CompareRow(f"{m.label}{unit}", fmt_summary(m.a, digits), fmt_summary(m.b, digits),
                               fmt_rel(m.verdict.rel_change), m.verdict.label))
    if c.workload is not None:
        w = c.workload
        rows.append(CompareRow(f"{w.prompt_tokens} in / {w.output_tokens} out (s)", fmt_summary(w.a, 2),
                               fmt_summary(w.b, 2), fmt_rel(w.verdict.rel_change), w.verdict.label))
    notes = [c.workload.answer] if c.workload is not None else []
    notes += [f"⚠ {w.message}" for w in c.warnings]
    changes = None if ra.settings is None or rb.settings is None else tuple(f"{x.flag} {x.a} → {x.b}" for x in c.changed)
    return CompareView(tuple(rows), changes, "\n".join(notes)), None


def run_detail(r: Any) -> RunDetail:
    """One core `store.RunRow` opened: facts, its settings as a llama-server command line, its
    measurements (median [min-max] over passes) and every note and warning in full."""
    # lazy: the statistics load with the first opened run, as for the comparison
    from tui.core.probes.compare import run_label
    from tui.core.probes.stats import Summary, fmt_summary

    s = r.summary or {}
    cfg = r.config or {}
    facts = [f"{_when(r.created_at)} · {r.status} · suite {r.suite or '?'} · {cfg.get('repeat', '?')} passes, "
             f"n_predict {cfg.get('n_predict', '?')}", f"model {r.model or '?'}"]
    if r.url:
        facts.append(f"server {r.url}")

    def spread(key: str, digits: int = 1) -> str:
        return fmt_summary(Summary.from_json(s.get(key)), digits)

    acc = _num(s, "acceptance")
    ran = r.settings or {}
    kv = KvPair(ran.get("cache_type_k") or REFERENCE_TYPE, ran.get("cache_type_v") or REFERENCE_TYPE)
    measurements = (
        ("TG (generation) t/s", spread("tg_tps")), ("PP (prompt) t/s", spread("pp_tps")),
        ("acceptance", pct(acc) if acc is not None else "-"),
        ("mean acceptance length (tok/step)", spread("mean_accept_len_by_pass", 2)),
        ("time to first token (ms)", spread("ttft_ms")),
        ("requests", f"{s.get('n_ok', '?')} ok of {s.get('n_requests', '?')}, {s.get('n_passes', '?')} complete passes"),
        # what the run's main K/V cost in output quality, when measured on its model file (never guessed)
        ("quality of the K/V (KLD vs f16)", kv_quality(measured_on(r.model), kv) if r.settings is not None else "—"),
    )
    notes = [f"label: {r.label}"] if r.label else []
    if r.error:
        notes.append(f"{r.status}: {r.error}")
    notes += [f"⚠ {w.get('message', w)}" if isinstance(w, dict) else f"⚠ {w}" for w in r.warnings]
    pos = DraftPositions.from_json(s.get("positions"))
    adv = advise(pos)
    return RunDetail(r.id, run_label(r), tuple(facts), _command(r.settings), measurements,
                     tuple(notes) or ("no notes: the run finished without a warning",),
                     positions=pos.shares if pos else (), advised_n_max=adv.best if adv else None,
                     advice=f"{adv.text} ({pos.steps} drafts)" if adv and pos else "")


def _command(settings: dict[str, Any] | None) -> str:
    """The stored settings as the llama-server command line they launch (secrets redacted)."""
    if settings is None:
        return "(not recorded: the run measured a server mtp-tune did not start)"
    try:
        return command_line(settings_to_argv(settings_from_json(settings), binary="llama-server", redact=True))
    except (TypeError, ValueError) as exc:
        return f"(the stored settings cannot be written as a command line: {exc})"


def export(store: Any, ids: tuple[int, ...], fmt: str, directory: Path | None = None
           ) -> tuple[str | None, str | None]:
    """Write the runs as a Markdown table, CSV or JSON under the data dir; returns the path."""
    # lazy: the report writers (csv, statistics) load with the first export, not before the first frame
    from tui.core.probes import report

    try:
        rows = [store.require(i) for i in ids]
    except Exception as exc:  # noqa: BLE001
        return None, str(exc)
    render = {"md": report.to_markdown, "csv": report.to_csv, "json": report.to_json}[fmt]
    out_dir = directory or (data_dir() / "exports")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"runs-{'-'.join(map(str, ids))}.{fmt}"
        path.write_text(render(rows), encoding="utf-8")
    except OSError as exc:
        return None, f"the export could not be written to {out_dir} ({exc})"
    return str(path), None
