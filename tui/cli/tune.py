"""Find the best llama-server configuration for a workload, unattended: an MTP-aware search, not a grid.

`mtp-tune tune -m FILE [llama-server flags] --workload tasks|long-prompt|full|FILE|IN:OUT [--gpus SPEC]
[--budget 30m] [--min-ctx N] [--kv-floor q8_0] [--draft-kv-floor q4_0] [--fixed FLAG=V ...]
[--axis NAME=V1,V2 ...] [--save-best NAME] [--report FILE.md] [--json]`

Every llama-server flag given (and every --fixed FLAG=V) is fixed; the rest of the space is searched:
MTP on/off (when the model has MTP layers), draft n-max, micro-batch, batch, main and draft KV types
(never below the floors), flash attention, MoE experts on the CPU (MoE models). --axis replaces the
values searched on one axis (draft-n-max, ubatch, batch, kv, draft-kv, flash-attn, n-cpu-moe,
threads). The context is the smallest that holds the workload's longest request (or --min-ctx).

Every candidate that reaches a launch is planned first with llama.cpp's own dry run (exact mode);
nothing predicted not to fit is launched. On a real GPU or RPC device the smallest --fit-target that
survives a first decode is searched once per memory footprint. Each launch gets a short probe; only
contenders get more passes. The answer is the best configuration and the best with MTP off, checked
against each other by an interleaved A/B (the final step), with the break-even output length.
Progress goes to stderr. Interrupt it at any time: the same command continues where it stopped.
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
from pathlib import Path
from typing import Any

from tui.cli._common import (
    ServerArgsError, check_server_args, fail, names_a_model, pass_unknown_to_server, print_json, server_or_fail,
    store_or_fail,
)

COMMAND = "tune"
HELP = "search the best configuration for a workload, MTP on and off (-m FILE --workload tasks|IN:OUT [flags])"

#: --fixed / --axis names of the tune's own axes -> the llama-server flags each sets.
AXIS_FLAGS: dict[str, tuple[str, ...]] = {
    "draft-n-max": ("--spec-draft-n-max",), "ubatch": ("-ub",), "batch": ("-b",), "kv": ("-ctk", "-ctv"),
    "draft-kv": ("-ctkd", "-ctvd"), "flash-attn": ("-fa",), "n-cpu-moe": ("-ncmoe",), "threads": ("-t",),
}
_INT_AXES = frozenset({"draft-n-max", "ubatch", "batch", "n-cpu-moe", "threads"})


class UsageError(ValueError):
    """A tune option that cannot be used; the message names it."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", metavar="tasks|long-prompt|full|FILE|IN:OUT",
                   help="what to optimise for: a probe suite, or one request shape (e.g. 2000:500, 12k:800)")
    p.add_argument("--gpus", metavar="SPEC", help="plan against simulated GPUs (a profile, 2x16GiB, or cpu) instead of the real ones")
    p.add_argument("--budget", metavar="DURATION", help="wall-clock budget: 30m, 1h30m, 90s (a bare number is minutes)")
    p.add_argument("--min-ctx", type=int, default=0, metavar="N", help="give every candidate at least this context")
    p.add_argument("--kv-floor", default="q8_0", metavar="TYPE", help="lowest main KV cache type to consider (default q8_0)")
    p.add_argument("--draft-kv-floor", default="q4_0", metavar="TYPE", help="lowest draft KV cache type (default q4_0)")
    p.add_argument("--fixed", action="append", default=[], metavar="FLAG=V",
                   help="pin a setting (an axis such as ubatch=512 or mtp=on, or any llama-server option); repeatable")
    p.add_argument("--axis", action="append", default=[], metavar="NAME=V1,V2",
                   help="the values to search on one axis (e.g. ubatch=256,512, draft-kv=q8_0,q4_0); repeatable")
    p.add_argument("--ab-passes", type=int, default=3, metavar="N", help="passes per side of the final MTP on/off A/B (0: none)")
    p.add_argument("--save-best", metavar="NAME", help="save the best as profile NAME and as section [NAME] of the preset INI")
    p.add_argument("--ini", metavar="PATH", help="preset INI for --save-best (default: presets.ini in the config dir)")
    p.add_argument("--report", metavar="FILE.md", help="write the Markdown report (every trial) to this file")
    p.add_argument("--fresh", action="store_true", help="forget the saved progress of this tune and start over")
    p.add_argument("--json", action="store_true", help="print one JSON object: the answer, the A/B and every trial")
    p.add_argument("--server-bin", metavar="PATH", help="llama-server binary (default: found or built by mtp-tune)")
    p.add_argument("--ready-timeout", type=float, default=180.0, metavar="S", help="seconds to wait for each load (default 180)")
    p.add_argument("--db", metavar="PATH", help="results database (default: the user data dir)")
    pass_unknown_to_server(p)


def parse_budget(text: str | None) -> float | None:
    """`30m`, `1h30m`, `90s`, `1.5h` or a bare number of minutes -> seconds (None: no budget)."""
    if text is None:
        return None
    t = text.strip().lower()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)", t)
    if m:
        secs = float(m.group(1)) * 60.0
    else:
        m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?:in)?)?(?:(\d+(?:\.\d+)?)s)?", t)
        if not t or m is None:
            raise UsageError(f"--budget {text!r}: write a duration such as 30m, 1h30m, 90s or 45 (minutes).")
        h, mi, s = (float(g) if g else 0.0 for g in m.groups())
        secs = h * 3600 + mi * 60 + s
    if secs <= 0:
        raise UsageError(f"--budget {text!r}: the budget must be more than zero.")
    return secs


def _split(text: str, opt: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    if not eq or not name.strip() or not value.strip():
        raise UsageError(f"{opt} {text!r}: write NAME=VALUE{'S' if opt == '--axis' else ''}, e.g. "
                         f"{'ubatch=256,512' if opt == '--axis' else 'ubatch=512'}.")
    return name.strip().lstrip("-"), value.strip()


def fixed_tokens(items: list[str]) -> list[str]:
    """--fixed NAME=V as llama-server flags (checked later with every other flag, by the one validator)."""
    from tui.core.options import FALSEY, TRUTHY, find_option

    out: list[str] = []
    for text in items:
        name, value = _split(text, "--fixed")
        if name == "mtp":
            if value.lower() not in TRUTHY | FALSEY | {"none"}:
                raise UsageError(f"--fixed mtp={value}: write mtp=on or mtp=off.")
            out += ["--spec-type", "draft-mtp" if value.lower() in TRUTHY else "none"]
        elif name in AXIS_FLAGS:
            for flag in AXIS_FLAGS[name]:
                out += [flag, value]
        else:
            opt = find_option(f"--{name}") or find_option(f"-{name}")
            if opt is None:
                raise UsageError(f"--fixed {text}: {name!r} is neither an axis ({', '.join(['mtp', *AXIS_FLAGS])}) "
                                 "nor a llama-server option; or pass the flag itself after the model.")
            if not opt.takes_value:
                raise UsageError(f"--fixed {text}: {opt.canonical} is a switch; pass {opt.canonical} itself instead.")
            out += [opt.canonical, value]
    return out


def axis_values(items: list[str], floors: Any) -> dict[str, tuple[Any, ...]]:
    """--axis NAME=V1,V2 -> the values the space searches on that axis (floors still apply)."""
    from tui.core.options import CACHE_TYPES, FLASH_ATTN
    from tui.core.tuning.space import KV_QUALITY

    out: dict[str, tuple[Any, ...]] = {}
    for text in items:
        name, rest = _split(text, "--axis")
        if name not in AXIS_FLAGS:
            raise UsageError(f"--axis {text}: unknown axis {name!r}; use one of {', '.join(AXIS_FLAGS)} "
                             "(MTP on/off is searched whenever the model has MTP layers; --fixed mtp=on pins it).")
        vals: list[Any] = []
        for v in (x.strip() for x in rest.split(",") if x.strip()):
            if name in _INT_AXES:
                if not re.fullmatch(r"\d+", v):
                    raise UsageError(f"--axis {name}: {v!r} is not a whole number.")
                vals.append(int(v))
            elif name in ("kv", "draft-kv"):
                if v not in CACHE_TYPES:
                    raise UsageError(f"--axis {name}: {v!r} is not a KV cache type; use one of {', '.join(CACHE_TYPES)}.")
                floor = floors.kv if name == "kv" else floors.draft_kv
                if KV_QUALITY.get(v, 0) < KV_QUALITY[floor]:
                    raise UsageError(f"--axis {name}: {v} is below the floor {floor} "
                                     f"(--{'kv' if name == 'kv' else 'draft-kv'}-floor lowers it).")
                vals.append(v)
            else:
                if v not in FLASH_ATTN:
                    raise UsageError(f"--axis flash-attn: {v!r}; use one of {', '.join(FLASH_ATTN)}.")
                vals.append(v)
        if not vals or len(set(vals)) != len(vals):
            raise UsageError(f"--axis {text}: give each value once, at least one.")
        out[name] = tuple(vals)
    return out


def _progress(ev: Any) -> None:
    eta = f" ETA ~{ev.eta_s:.0f}s" if ev.eta_s is not None and ev.kind != "trial" else ""
    print(f"[tune {ev.elapsed_s:.0f}s{eta}] {ev.message}", file=sys.stderr, flush=True)


def _prepare(args: argparse.Namespace) -> Any:
    """Every check that needs no server: a TuneRequest and the device set, or an int exit code."""
    from tui.core.planning.devices import devices_now
    from tui.core.probes.session import with_defaults
    from tui.core.options.settings import Settings
    from tui.core.tuning.space import Floors, SpaceError, space_for_model
    from tui.core.tuning.tune_workload import WorkloadError, parse_workload, placeholder

    server_args = [a for a in args.server_args if a != "--"]
    if not names_a_model(server_args):
        return fail("tune needs a model file: `mtp-tune tune -m FILE.gguf [llama-server flags] --workload tasks|IN:OUT`.")
    if not args.workload:
        return fail("tune needs --workload: tasks, long-prompt, full, a suite file, or a request shape IN:OUT (e.g. 2000:500).")
    try:
        spec = parse_workload(args.workload)
        floors = Floors(args.kv_floor, args.draft_kv_floor, max(0, int(args.min_ctx)))
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
    if not base.model:
        return fail("tune needs a local model file (-m FILE.gguf); download a -hf model first with `mtp-tune serve -hf ...`.")
    if not Path(base.model).expanduser().is_file():
        return fail(f"the model file {base.model} does not exist (or is not a file); check the path given to -m.")
    from tui.core.planning.gguf_meta import GGUFError
    from tui.core.planning.gguf_reader import read_gguf

    try:
        space_for_model(base, read_gguf(str(Path(base.model).expanduser())), placeholder(spec), floors=floors,
                        values=values or None)
    except (GGUFError, SpaceError, OSError) as e:
        return fail(str(e))
    return base, spec, floors, values, budget, ds


def run(args: argparse.Namespace) -> int:
    prepared = _prepare(args)
    if isinstance(prepared, int):
        return prepared
    base, spec, floors, values, budget, ds = prepared
    from tui.core.server.process import install_cleanup

    install_cleanup()  # on the main thread: SIGTERM/SIGHUP stop the servers the worker starts
    found = server_or_fail(args.server_bin)
    if isinstance(found, int):
        return found
    from tui.core.tuning.tune_run import TuneError, TuneRequest, TuneRun

    store = store_or_fail(args.db)
    if isinstance(store, int):
        return store
    req = TuneRequest(base, spec, Path(found.path), floors, values, args.gpus, budget, args.ab_passes, args.fresh,
                      args.ready_timeout)
    tr = TuneRun(req, devices=ds, store=store, on_event=_progress)
    box: dict[str, Any] = {}
    done = threading.Event()  # waited on, not Thread.join: a join interrupted by Ctrl-C can return early after

    def work() -> None:
        try:
            box["outcome"] = tr.run()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=work, name="tune", daemon=True).start()
    interrupted = False
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        interrupted = True
        tr.stop()
        print("\nmtp-tune: stopping; finished trials are kept (run the same command to continue) ...", file=sys.stderr, flush=True)
        done.wait(60.0)
    finally:
        store.close()
    if "error" in box:
        if isinstance(box["error"], TuneError):
            return fail(str(box["error"]), 130 if interrupted else 1)
        raise box["error"]
    outcome = box.get("outcome")
    if outcome is None:
        return 130
    return _answer(args, outcome, base, interrupted)


def _answer(args: argparse.Namespace, outcome: Any, base: Any, interrupted: bool) -> int:
    from tui.core.sweep.best import save_settings
    from tui.core.tuning.tune_report import facts_from, render_report, tune_break_even

    res = outcome.result
    report = render_report(res, facts_from(outcome, base))
    rc, saved = 0, None
    if args.report:
        try:
            Path(args.report).expanduser().write_text(report, encoding="utf-8")
        except OSError as e:
            print(f"mtp-tune: the report was not written to {args.report}: {e.strerror or e}", file=sys.stderr)
            rc = 1
    if args.save_best and res.best is not None and not interrupted:
        try:
            saved = save_settings(outcome.settings_of(res.best), args.save_best, ini_path=args.ini)
        except Exception as e:  # noqa: BLE001 - ProfileError, IniWriteError: both one paragraph
            print(f"mtp-tune: the best configuration was not saved: {e}", file=sys.stderr)
            rc = 1
    elif args.save_best and res.best is None:
        print("mtp-tune: nothing measured, so no best configuration to save.", file=sys.stderr)
        rc = 1
    if args.json:
        be = tune_break_even(res, outcome.workload, outcome.ab)
        print_json({"tune_id": outcome.tune_id, "stopped": res.stopped, "launches_this_run": outcome.launches,
                    "launches_total": outcome.launches_total, "grid_size": res.grid_size, "hardware": outcome.hardware,
                    "workload": outcome.workload.to_json(), "ctx": outcome.space.ctx, "result": res.to_json(),
                    "ab": outcome.ab.to_json() if outcome.ab else None, "ab_note": outcome.ab_note,
                    "break_even": be.to_json() if be else None, "notes": outcome.notes,
                    "state": str(outcome.state_path) if outcome.state_path else None, "report": args.report,
                    "saved": None if saved is None else {"profile": str(saved.profile_path), "ini": str(saved.ini_path),
                                                         "section": saved.section}})
    else:
        print(report)
        if saved is not None:
            print(f"Saved the best as profile {saved.profile_path} and section [{saved.section}] of {saved.ini_path}.")
    if interrupted or res.stopped == "cancelled":
        return 130
    if res.best is None:
        return 1 if rc == 0 else rc
    if res.stopped == "budget":
        return 3 if rc == 0 else rc
    return rc
