"""Find the best llama-server configuration for a workload, unattended: an MTP-aware search, not a grid.

`mtp-tune tune -m FILE | -m A.gguf -m B.gguf | -m FOLDER | -hf REPO[:QUANT] | -mu URL [llama-server flags]
--workload tasks|long-prompt|full|FILE|IN:OUT [--concurrency N] [--gpus SPEC] [--budget 30m] [--min-ctx N]
[--max-kld X [--ref FILE] | --kv-floor q8_0] [--draft-kv-floor q4_0] [--fixed FLAG=V ...]
[--axis NAME=V1,V2 ...] [--save-best NAME] [--report FILE.md] [--json]`

Every llama-server flag given (and every --fixed FLAG=V) is fixed; the rest of the space is searched:
MTP on/off (when the model has MTP layers), draft n-max, micro-batch, batch, main and draft KV types
(a main one may be a pair K/V such as q8_0/q4_0), flash attention, MoE experts on the CPU (MoE
models), and the model file when -m names several quants of one model (or a folder of them).
--axis replaces the values searched on one axis (draft-n-max, ubatch, batch, kv, draft-kv,
flash-attn, n-cpu-moe, threads). The context is the smallest that holds the workload's longest
request (or --min-ctx).

Output quality: the main KV types are never below --kv-floor (default q8_0), or with --max-kld X
they are measured instead: llama-perplexity's mean KL divergence of each main K/V setting of each
model file against the reference (--ref, else the largest file, with f16 K/V), before the trials;
what costs more than X is not searched, and said with its figure. Draft KV types are free of it (they
change acceptance, never the output). Several files are measured (each against the reference) with
or without a budget, and the report gives every trial's cost. Measurements are cached: a rerun
measures nothing.

Every candidate that reaches a launch is planned first with llama.cpp's own dry run (exact mode);
nothing predicted not to fit is launched. On a real GPU or RPC device the smallest --fit-target that
survives a first decode is searched once per memory footprint; with simulated GPUs (--gpus SPEC
--stand-ins) on loopback stand-ins capped at their memory. Each launch gets a short probe; only
contenders get more passes. The answer is the best configuration and the best with MTP off, checked
against each other by an interleaved A/B (the final step), with the break-even output length.
Progress goes to stderr. Interrupt it at any time: the same command continues where it stopped.
Exit status: 0 converged, 3 stopped by --budget (the answer is the best so far), 130 interrupted,
1 nothing measured, 2 a bad flag (refused before any launch).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from tui.cli._common import (
    ServerArgsError, check_server_args, experiment_arguments, fail, names_a_model, print_json, run_experiment, save_best,
    saved_json, say_saved,
)
from tui.core.tune import DEFAULT_DRAFT_KV_FLOOR, DEFAULT_KV_FLOOR
from tui.core.tune.args import (UsageError, axis_values, build_request, fixed_tokens, make_floors, parse_budget,
                                parse_max_kld)

COMMAND = "tune"
HELP = "search the best configuration for a workload, MTP on and off (-m FILE | -hf REPO --workload tasks|IN:OUT [flags])"

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", metavar="tasks|long-prompt|full|FILE|IN:OUT",
                   help="what to optimise for: a probe suite, or one request shape (e.g. 2000:500, 12k:800)")
    p.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="requests at once (default 1): every candidate launches with -np N, each slot holding the "
                        "longest request, and is probed with N in flight; the final A/B reports N and 1 side by side")
    p.add_argument("--gpus", metavar="SPEC", help="plan against simulated GPUs (a profile, 2x16GiB, or cpu) instead of the real ones")
    p.add_argument("--stand-ins", action="store_true",
                   help="with --gpus SPEC: launch every candidate on loopback ggml-rpc-servers capped at the simulated "
                        "GPUs' free memory, so OOMs and the smallest --fit-target are found for real (CPU speed)")
    p.add_argument("--budget", metavar="DURATION", help="wall-clock budget: 30m, 1h30m, 90s (a bare number is minutes)")
    p.add_argument("--min-ctx", type=int, default=0, metavar="N", help="give every candidate at least this context")
    p.add_argument("--kv-floor", metavar="TYPE",
                   help=f"lowest main KV cache type to consider (default {DEFAULT_KV_FLOOR}; not with --max-kld)")
    p.add_argument("--max-kld", metavar="X",
                   help="search only the main K/V types (and model files) whose mean KL divergence, measured by "
                        "llama-perplexity before the trials, is at most X (e.g. 0.05); replaces --kv-floor")
    p.add_argument("--ref", metavar="FILE",
                   help="what the quality is measured against, with f16 K/V: a higher quant of the same model "
                        "(default: the largest -m file)")
    p.add_argument("--perplexity-bin", metavar="PATH",
                   help="llama-perplexity for --max-kld (default: beside the server, else mtp-tune's build)")
    p.add_argument("--draft-kv-floor", default=DEFAULT_DRAFT_KV_FLOOR, metavar="TYPE",
                   help=f"lowest draft KV cache type (default {DEFAULT_DRAFT_KV_FLOOR})")
    p.add_argument("--fixed", action="append", default=[], metavar="FLAG=V",
                   help="pin a setting (an axis such as ubatch=512 or mtp=on, or any llama-server option); repeatable")
    p.add_argument("--axis", action="append", default=[], metavar="NAME=V1,V2",
                   help="the values to search on one axis (e.g. ubatch=256,512, draft-kv=q8_0,q4_0); repeatable")
    p.add_argument("--ab-passes", type=int, default=3, metavar="N", help="passes per side of the final MTP on/off A/B (0: none)")
    p.add_argument("--report", metavar="FILE.md", help="write the Markdown report (every trial) to this file")
    experiment_arguments(p, "tune", "print one JSON object: the answer, the A/B and every trial")


def _progress(ev: Any) -> None:
    if ev.kind == "measuring" and not sys.stderr.isatty():
        return  # a line per request is for a person watching, not for a log
    eta = f" ETA ~{ev.eta_s:.0f}s" if ev.eta_s is not None and ev.kind != "trial" else ""
    print(f"[tune {ev.elapsed_s:.0f}s{eta}] {ev.message}", file=sys.stderr, flush=True)


def _prepare(args: argparse.Namespace) -> Any:
    """Every check that needs no server: a TuneRequest (its binary set once found) and the device set, or
    an int exit code."""
    from tui.core.planning.devices import devices_now
    from tui.core.probes.session import with_defaults
    from tui.core.options.settings import Settings
    from tui.core.quality.models import ModelError
    from tui.core.tune.files import is_file_axis, model_files, split_models
    from tui.core.tune.space import SpaceError
    from tui.core.tune.workload import WorkloadError, parse_workload

    server_args = [a for a in args.server_args if a != "--"]
    models, others = split_models(server_args)
    files: list[Path] = []
    if is_file_axis(models):  # several quants: an axis of the tune, so llama-server's flags see one -m
        if names_a_model(others):
            return fail("several -m (or a folder) choose among model files on disk; leave out -hf and -mu.")
        try:
            files = model_files(models)
        except ModelError as e:
            return fail(str(e))
        server_args = ["-m", str(files[0]), *others]
    if not names_a_model(server_args):
        return fail("tune needs a model: `mtp-tune tune -m FILE.gguf | -hf REPO[:QUANT] | -mu URL [llama-server flags] "
                    "--workload tasks|IN:OUT`.")
    if not args.workload:
        return fail("tune needs --workload: tasks, long-prompt, full, a suite file, or a request shape IN:OUT (e.g. 2000:500).")
    try:
        spec = parse_workload(args.workload, args.concurrency)
        floors = make_floors(args.kv_floor, args.draft_kv_floor, max(0, int(args.min_ctx)), parse_max_kld(args.max_kld))
        if args.min_ctx < 0:
            raise UsageError(f"--min-ctx {args.min_ctx}: give 0 or more tokens.")
        if args.ab_passes < 0:
            raise UsageError(f"--ab-passes {args.ab_passes}: give 0 (no A/B) or more.")
        budget = parse_budget(args.budget)
        values = axis_values(args.axis, floors)
        server_args += fixed_tokens(args.fixed)
        first = check_server_args(with_defaults(server_args), base=Settings(metrics=False), warn=False)
        ds = devices_now(args.gpus, list(first.rpc))  # ValueError naming a bad --gpus
        base = check_server_args(with_defaults(server_args), base=Settings(metrics=False), device_count=ds.count or None)
    except (WorkloadError, SpaceError, UsageError, ServerArgsError, ValueError) as e:
        return fail(str(e))
    try:
        req, _space = build_request(base, spec, floors, values, server_bin=None, gpus=args.gpus, budget_s=budget,
                                    ab_passes=args.ab_passes, ready_timeout=args.ready_timeout, where="the path given to -m",
                                    stand_ins=args.stand_ins, devices=ds, fresh=args.fresh,
                                    progress=lambda msg: print(f"mtp-tune: {msg}", file=sys.stderr, flush=True),
                                    files=files, ref=Path(args.ref).expanduser() if args.ref else None,
                                    perplexity_bin=Path(args.perplexity_bin).expanduser() if args.perplexity_bin else None)
    except UsageError as e:
        return fail(str(e))
    return req, ds


def run(args: argparse.Namespace) -> int:
    prepared = _prepare(args)
    if isinstance(prepared, int):
        return prepared
    req, ds = prepared
    from tui.core.server.process import install_cleanup
    from tui.core.tune.result import facts_from, render_report, tune_break_even
    from tui.core.tune.run import TuneRun

    install_cleanup()  # on the main thread: SIGTERM/SIGHUP stop the servers the worker starts

    def make(server_bin: Path, store: Any) -> TuneRun:
        return TuneRun(replace(req, server_bin=server_bin), devices=ds, store=store, on_event=_progress)

    ran = run_experiment(args.server_bin, args.db, make, TuneRun.stop, "finished trials are kept", 60.0, 1)
    if isinstance(ran, int):
        return ran
    outcome = ran.result
    if outcome is None:
        return 130
    res = outcome.result
    report = render_report(res, facts_from(outcome, req.base))
    rc = 0
    if args.report:
        try:
            Path(args.report).expanduser().write_text(report, encoding="utf-8")
        except OSError as e:
            print(f"mtp-tune: the report was not written to {args.report}: {e.strerror or e}", file=sys.stderr)
            rc = 1
    saved, not_saved = save_best(args, outcome.settings_of(res.best), ran.interrupted)
    rc = max(rc, not_saved)
    if args.json:
        be = tune_break_even(res, outcome.workload, outcome.ab)
        print_json({"tune_id": outcome.tune_id, "stopped": res.stopped, "launches_this_run": outcome.launches,
                    "launches_total": outcome.launches_total, "grid_size": res.grid_size, "hardware": outcome.hardware,
                    "workload": outcome.workload.to_json(), "ctx": outcome.space.ctx,
                    "result": res.to_json(outcome.quality),
                    "quality": outcome.quality.to_json() if outcome.quality else None,
                    "best_quality": outcome.quality.trial_json(res.best) if outcome.quality and res.best else None,
                    "ab": outcome.ab.to_json() if outcome.ab else None, "ab_note": outcome.ab_note,
                    "ab_by_concurrency": outcome.ab_levels.to_json() if outcome.ab_levels else None,
                    "break_even": be.to_json() if be else None, "notes": outcome.notes,
                    "state": str(outcome.state_path) if outcome.state_path else None, "report": args.report,
                    "saved": saved_json(saved)})
    else:
        print(report)
        if outcome.ab_levels is not None:
            print("\nMTP on against off by concurrency (interleaved A/B at each; the lab's noise rule):")
            print("\n".join("  " + line for line in outcome.ab_levels.table()))
        say_saved(saved)
    if ran.interrupted or res.stopped == "cancelled":
        return 130
    if res.best is None:
        return 1 if rc == 0 else rc
    if res.stopped == "budget":
        return 3 if rc == 0 else rc
    return rc
