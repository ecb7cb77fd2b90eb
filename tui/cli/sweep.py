"""Run a grid of llama-server configurations unattended and print the table and the best one.

`mtp-tune sweep -m FILE [llama-server flags] --axis NAME=V1,V2,... [--axis ...]` launches the server
once per configuration (configurations that differ only in `n-predict` share a launch), checks a
first decode, probes it and records every run in the results store. Axis names are llama-server's
option names without dashes (`ubatch-size` or `ub`, `cache-type-k-draft` or `ctkd`, `spec-type`,
`spec-draft-n-max`, `ctx-size`), plus `n-predict` (generation length) and `mtp=on,off`. Values of
list options use `/` (`fit-target=1024/2048`); several spec types in one value use `+`.

Invalid combinations are skipped with the reason; combinations that change nothing (draft options
without MTP) are run once; a predicted OOM is skipped unless --try-anyway; a memory allocation
failure starts a search for the smallest --fit-target (GPU/RPC) or largest --ctx-size (CPU) that
works. Interrupt it at any time: running the same command again continues where it stopped.
Every flag mtp-tune does not know goes to llama-server (`-np 1 -t 1 --metrics` are added unless
given).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from tui.cli._common import (
    ServerArgsError, check_server_args, experiment_arguments, fail, names_a_model, print_json, run_experiment, save_best,
    saved_json, say_saved, workload_problem,
)

COMMAND = "sweep"
HELP = "run a grid of configurations (--axis NAME=V1,V2) and report the best (-m FILE [llama-server flags])"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--axis", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="a swept option, e.g. mtp=on,off, ub=256,512, ctkd=f16,q8_0, n-predict=128,512 (repeatable)")
    p.add_argument("--suite", default="tasks", help="probe suite: tasks (default), long-prompt, full, or a .toml/.jsonl file")
    p.add_argument("--repeat", type=int, default=3, metavar="N", help="passes over the suite per configuration (default 3)")
    p.add_argument("--n-predict", type=int, default=None, metavar="N",
                   help="tokens generated per prompt when n-predict is not an axis (default: the probe's 512)")
    p.add_argument("--objective", default="tg", metavar="tg|pp|workload:IN,OUT",
                   help="what 'best' means: TG, PP, or the end-to-end time of IN prompt tokens and OUT generated ones")
    p.add_argument("--budget", type=float, default=None, metavar="MIN",
                   help="stop starting new launches after this many minutes (re-run to continue)")
    p.add_argument("--try-anyway", action="store_true", help="launch configurations the planner predicts will not fit")
    p.add_argument("--simulate", metavar="PROFILE", help="plan against simulated GPUs (a profile or e.g. 2x16GiB) instead of the real ones")
    p.add_argument("--exact-plan", action="store_true",
                   help="plan each configuration with llama.cpp's own dry run (exact mode) before launching it")
    p.add_argument("--fit-step", type=int, default=64, metavar="MIB", help="fit-target search resolution (default 64 MiB)")
    experiment_arguments(p, "sweep", "print one JSON object: rows (settings, status, tg_tps, pp_tps, acceptance...) and best")


class ProgressLine:
    """One live line on stderr (rewritten in place on a terminal, one line per event otherwise)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = shutil.get_terminal_size((120, 20)).columns
        self._last = ""

    def __call__(self, ev: Any) -> None:
        eta = "" if ev.eta_s is None else f" ETA {_dur(ev.eta_s)}"
        head = f"[{ev.done}/{ev.total} {_dur(ev.elapsed_s)}{eta}]"
        if ev.kind == "probe":
            p = ev.probe
            if p is None or getattr(p, "event", "") != "request_done":
                return
            if not self.tty and p.done not in (1, p.total // 2):  # a log file gets a few lines per row
                return
            text = f"{head} #{ev.candidate.index + 1} {ev.candidate.label}: probe {p.done}/{p.total}"
            self._line(text, final=False)
            return
        if ev.kind == "row_started":
            return
        if ev.kind == "row_done" and ev.trial is not None:
            r = ev.trial
            tg_tps, acceptance = r.median("tg_tps"), r.accept_rate()
            tg = f" TG {tg_tps:.1f}" if tg_tps else ""
            acc = f" acc {acceptance:.0%}" if acceptance is not None else ""
            text = f"{head} #{ev.candidate.index + 1} {ev.candidate.label}: {r.status}{tg}{acc}"
            self._line(text, final=r.status not in ("duplicate", "invalid") or not self.tty)
            return
        if ev.kind == "search_trial" and ev.trial is not None:
            self._line(f"{head} #{ev.candidate.index + 1} search: {ev.message}", final=not self.tty)
            return
        row = f" #{ev.candidate.index + 1}" if ev.candidate is not None else ""
        self._line(f"{head}{row} {ev.message}".rstrip(), final=ev.kind in ("started", "search_done", "stopped", "finished"))

    def _line(self, text: str, final: bool) -> None:
        if self.tty:
            text = text[: self.width - 1]
            pad = " " * max(0, len(self._last) - len(text))
            self.stream.write("\r" + text + pad + ("\n" if final else ""))
            self._last = "" if final else text
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def _dur(s: float) -> str:
    s = int(round(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def sweep_json(table: Any, outcome: Any = None) -> dict[str, Any]:
    """The `--json` object: rows (settings, status, tg_tps, pp_tps, acceptance, ...) and best."""
    d = table.to_json()
    d["status"] = outcome.stopped if outcome is not None else ("done" if table.complete else "incomplete")
    if outcome is not None:
        d["seconds"] = round(outcome.seconds, 2)
        d["launches_this_run"] = outcome.launches
    return d


def _requests(definition: Any, args: argparse.Namespace) -> list[tuple[str, int]]:
    """The request lengths a sweep is sure to send, named by the flag that set them: the objective's
    workload and every generation length (a suite's prompts are counted only by the server)."""
    from tui.core.probes.run_types import RunConfig

    out: list[tuple[str, int]] = []
    o = definition.objective
    if o.kind == "workload":
        out.append((f"--objective {args.objective}", o.in_tokens + o.out_tokens))
    n_axis = next((a for a in definition.axes if a.is_n_predict), None)
    if n_axis is not None:
        out += [(f"--axis n-predict={t}", int(v)) for v, t in zip(n_axis.values, n_axis.texts)]
    else:
        n = definition.n_predict if definition.n_predict is not None else RunConfig().n_predict
        out.append((f"--n-predict {n}", n))
    return out


def run(args: argparse.Namespace) -> int:
    from tui.core.probes.session import with_defaults
    from tui.core.options.settings import Settings
    from tui.core.sweep.axes import SweepDefinitionError
    from tui.core.sweep.definition import build_definition
    from tui.core.sweep.results import build_table
    from tui.core.lab.planning import plan_check
    from tui.core.sweep.runner import Sweep

    server_args: list[str] = list(args.server_args)
    if not names_a_model(server_args):
        return fail("sweep needs a model file: `mtp-tune sweep -m FILE.gguf [llama-server flags] --axis NAME=V1,V2`.")
    if not args.axis:
        return fail("sweep needs at least one --axis, e.g. --axis mtp=on,off --axis ub=256,512.")
    try:
        base_settings = check_server_args(with_defaults(server_args), base=Settings(metrics=False))
    except ServerArgsError as exc:
        return fail(str(exc))
    try:
        definition = build_definition(base_settings, args.axis, suite=args.suite, repeat=args.repeat,
                                      n_predict=args.n_predict, objective=args.objective, budget_min=args.budget,
                                      try_anyway=args.try_anyway, fit_step_mib=args.fit_step)
    except SweepDefinitionError as e:
        return fail(str(e))
    model = base_settings.model
    if model and not Path(model).expanduser().is_file():
        return fail(f"the model file {model} does not exist (or is not a file); check the path given to -m.")
    if why := workload_problem(model, _requests(definition, args)):
        return fail(why)
    t0 = time.monotonic()

    def make(server_bin: Path, store: Any) -> Any:
        planner = plan_check(args.simulate, exact=args.exact_plan, server_bin=server_bin)
        return Sweep(definition, server_bin=server_bin, store=store, on_event=ProgressLine(), fresh=args.fresh,
                     ready_timeout=args.ready_timeout, planner=planner)

    ran = run_experiment(args.server_bin, args.db, make, Sweep.cancel, "finished rows are kept", 30.0, 2)
    if isinstance(ran, int):
        return ran
    sweep, outcome = ran.experiment, ran.result
    table = build_table(definition, sweep.state)
    saved, rc = save_best(args, table.best_settings(), ran.interrupted)
    if args.json:
        d = sweep_json(table, outcome)
        if saved is not None:
            d["saved"] = saved_json(saved)
        print_json(d)
    else:
        took = time.monotonic() - t0
        status = outcome.stopped if outcome is not None else "interrupted"
        print(f"Sweep {definition.sweep_id} ({status}) in {_dur(took)}; {outcome.launches if outcome else 0} launches this run, "
              f"{sweep.state.launches} in all. Objective: {definition.objective.label}.")
        print(table.render(shutil.get_terminal_size((160, 20)).columns))
        say_saved(saved)
    if ran.interrupted:
        return 130
    if outcome is not None and outcome.stopped != "done":
        return 3 if rc == 0 else rc
    if table.best is None and rc == 0:
        return 1  # nothing could be measured: every row failed or was skipped
    return rc
