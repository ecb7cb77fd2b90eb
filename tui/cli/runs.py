"""Stored probe runs: list them, show one, compare two (or an MTP on/off pair), export a tuning table.

`compare A B` judges B against A per metric with the relative change and a verdict that only calls a
difference when it exceeds the measured noise; `--workload IN,OUT` adds the end-to-end time of a
request of that shape (prompt/PP + output/TG). `compare A --mtp-pair` finds the run that differs
from A only in MTP. `export ID... --format md` prints one row per configuration (ubatch, draft KV
type, fit-target, TG, acceptance, PP).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys

from tui.cli._common import fail, print_json
from tui.core.probes.stats import Summary, fmt_summary

COMMAND = "runs"
HELP = "list, show, compare and export stored probe runs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="PATH", help="results database (default: the user data dir)")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    ls = sub.add_parser("list", help="runs, newest first")
    ls.add_argument("--limit", type=int, default=30)
    ls.add_argument("--status", choices=("running", "ok", "failed", "cancelled"))
    ls.add_argument("--json", action="store_true")
    sh = sub.add_parser("show", help="one run with its requests")
    sh.add_argument("id", type=int)
    sh.add_argument("--json", action="store_true")
    cp = sub.add_parser("compare", help="B against A, per metric, with verdicts")
    cp.add_argument("a", type=int, help="baseline run")
    cp.add_argument("b", type=int, nargs="?", help="candidate run (or use --mtp-pair)")
    cp.add_argument("--mtp-pair", action="store_true", help="compare A with its MTP on/off counterpart")
    cp.add_argument("--workload", metavar="IN,OUT", help="prompt and output tokens per request, e.g. 12000,800")
    cp.add_argument("--pp-from", nargs=2, type=int, metavar=("PP_A", "PP_B"),
                    help="take PP for the workload from these runs (e.g. long-prompt runs)")
    cp.add_argument("--json", action="store_true")
    ex = sub.add_parser("export", help="a table of several runs (md, csv) or their full JSON")
    ex.add_argument("ids", type=int, nargs="+")
    ex.add_argument("--format", choices=("md", "csv", "json"), default="md")


def _when(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def run(args: argparse.Namespace) -> int:
    from tui.core.results.store import StoreError, open_store

    if not getattr(args, "action", None):
        return fail("say what to do: `mtp-tune runs list`, `runs show ID`, `runs compare A B` or `runs export ID...`.")
    try:
        store = open_store(args.db)
    except StoreError as exc:
        return fail(str(exc))
    try:
        return {"list": _list, "show": _show, "compare": _compare, "export": _export}[args.action](store, args)
    except StoreError as exc:
        return fail(str(exc))
    finally:
        store.close()


def _list(store, args: argparse.Namespace) -> int:
    rows = store.list_runs(limit=args.limit, status=args.status)
    if args.json:
        print_json([r.to_json(with_requests=False) for r in rows])
        return 0
    if not rows:
        print("no runs yet; `mtp-tune probe --url URL` or `mtp-tune probe -m FILE` makes one.")
        return 0
    from tui.core.probes.compare import run_label

    print(f"{'id':>4}  {'when':<16}  {'status':<9}  {'suite':<11}  {'TG t/s':>22}  {'PP t/s':>22}  {'acc':>6}  label")
    for r in rows:
        s = r.summary or {}
        acc = s.get("acceptance")
        print(
            f"{r.id:>4}  {_when(r.created_at):<16}  {r.status:<9}  {(r.suite or '-'):<11}  "
            f"{fmt_summary(Summary.from_json(s.get('tg_tps'))):>22}  {fmt_summary(Summary.from_json(s.get('pp_tps'))):>22}  "
            f"{'-' if acc is None else f'{acc:.3f}':>6}  {run_label(r).partition(' ')[2]}"
        )
    return 0


def _show(store, args: argparse.Namespace) -> int:
    row = store.require(args.id)
    if args.json:
        print_json(row.to_json())
        return 0
    from tui.cli.probe import render_run
    from tui.core.probes.hygiene import ProbeWarning
    from tui.core.probes.records import records_from_json
    from tui.core.probes.run_types import ProbeRun, RunConfig

    cfg = {k: v for k, v in (row.config or {}).items() if k in RunConfig.__dataclass_fields__}
    result = ProbeRun(row.id, row.status, row.suite or "?", RunConfig(**cfg) if cfg else RunConfig(),
                      records_from_json(row.requests), row.summary or {}, [ProbeWarning.from_json(w) for w in row.warnings],
                      error=row.error)
    print(f"{_when(row.created_at)}  suite {row.suite}  model {row.model or '?'}  url {row.url or '-'}")
    srv = row.server or {}
    if srv.get("version_string") or srv.get("build_info"):
        print(f"server {srv.get('version_string') or srv.get('build_info')}  slots {srv.get('total_slots', '?')}  "
              f"speculative {srv.get('speculative', '?')}")
    if srv.get("argv"):
        print("argv " + " ".join(srv["argv"]))
    print(render_run(result))
    return 0


def _compare(store, args: argparse.Namespace) -> int:
    from tui.core.probes.compare import RunView, compare_runs, find_mtp_pair, render_comparison

    a_id, b_id = args.a, args.b
    if args.mtp_pair:
        if b_id is not None:
            return fail("give either B or --mtp-pair, not both.")
        b_id = find_mtp_pair(store, a_id)
        if b_id is None:
            return fail(f"no finished run pairs with run {a_id}: it needs the same model, suite and probe options, "
                        "the same settings apart from the speculative ones, and MTP the other way round.")
        # Baseline = MTP off.
        if store.require(a_id).mtp:
            a_id, b_id = b_id, a_id
    elif b_id is None:
        return fail("compare needs two run ids (`runs compare A B`) or `runs compare A --mtp-pair`.")
    workload = None
    if args.workload:
        try:
            n_in, n_out = (int(x) for x in args.workload.split(","))
            if n_in < 0 or n_out < 0:
                raise ValueError
        except ValueError:
            return fail(f"--workload {args.workload!r}: expected IN,OUT token counts, e.g. --workload 12000,800.")
        workload = (n_in, n_out)
    a, b = RunView.from_row(store.require(a_id)), RunView.from_row(store.require(b_id))
    pp_a = pp_b = None
    if args.pp_from:
        pp_a = RunView.from_row(store.require(args.pp_from[0]))
        pp_b = RunView.from_row(store.require(args.pp_from[1]))
    cmp = compare_runs(a, b, workload=workload, pp_a=pp_a, pp_b=pp_b)
    if args.json:
        print_json(cmp.to_json())
    else:
        print(render_comparison(cmp))
    return 0


def _export(store, args: argparse.Namespace) -> int:
    from tui.core.probes.report import to_csv, to_json, to_markdown

    rows = [store.require(i) for i in args.ids]
    out = {"md": to_markdown, "csv": to_csv, "json": to_json}[args.format](rows)
    sys.stdout.write(out)
    return 0
