"""Measure two llama-server configurations, or two llama.cpp builds, against each other: passes
interleaved A B A B, judged by the one noise rule.

`mtp-tune ab A B [llama-server flags] [--a-bin PATH] [--b-bin PATH] [--passes N] [--suite NAME|FILE]
[--workload IN:OUT] [--json]`

Each side is one of:
  NAME               a saved profile (`mtp-tune profile list`)
  FILE:SECTION       a section of a --models-preset INI file, e.g. presets.ini:fast
  "llama-server ..." a pasted command, quoted (a binary written as a path is that side's build)
  base               the llama-server flags given after the sides
  "+FLAGS"           those flags with changes, e.g. "+-ctk q8_0 -ctv q8_0" (the later value wins)

Each side runs its own llama-server: --a-bin / --b-bin (two builds), else --server-bin, else the one
mtp-tune finds or builds. Before anything launches, each side is checked by the one validator
against its own build's --help: an option a build does not accept is named with its side and build,
exit 2. Then each pass launches its side's server, probes the suite once and stops it, A B A B, so
drift hits both sides alike. The answer names what differs (options in llama-server's spelling, and
the binaries and their builds when they are two) and judges B against A for the workload: faster,
slower, the same within the noise, or inconclusive, with PP and TG of each side (median [range]).
Progress goes to stderr. Exit status: 0 an answer, 1 the run failed (a side did not start),
2 bad input (refused before any launch), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.cli._common import fail, pass_unknown_to_server, print_json, run_experiment, server_or_fail

COMMAND = "ab"
HELP = "A/B two configurations or builds, interleaved, judged within the noise (ab A B: profile, INI:SECTION, command, base, +FLAGS)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="side A: a profile NAME, FILE:SECTION, a quoted command, base, or \"+FLAGS\"")
    p.add_argument("b", metavar="B", help="side B, written the same ways")
    p.add_argument("--a-bin", metavar="PATH", help="side A's llama-server binary (default: --server-bin)")
    p.add_argument("--b-bin", metavar="PATH", help="side B's llama-server binary (default: --server-bin)")
    p.add_argument("--server-bin", metavar="PATH", help="llama-server for a side without its own (default: found or built by mtp-tune)")
    p.add_argument("--passes", type=int, default=3, metavar="N", help="passes per side, interleaved (default 3; 2 or more measure the noise)")
    p.add_argument("--suite", default="tasks", help="probe suite: tasks (default), long-prompt, full, or a .toml/.jsonl file")
    p.add_argument("--n-predict", type=int, default=None, metavar="N", help="tokens generated per prompt that sets none (default 512)")
    p.add_argument("--workload", default="1000:500", metavar="IN:OUT",
                   help="the request the verdict is for: prompt and output tokens (default 1000:500; 12k:800 allowed)")
    p.add_argument("--ready-timeout", type=float, default=180.0, metavar="S", help="seconds to wait for each load (default 180)")
    p.add_argument("--db", metavar="PATH", help="results database (default: the user data dir)")
    p.add_argument("--json", action="store_true", help="print one JSON object: both sides, what differs, the verdict")
    pass_unknown_to_server(p)


@dataclass
class Plan:
    """Everything checked before a launch: both sides (their settings, binaries and builds), what differs."""

    sides: list[Any]  # ReadSide, A then B
    bins: list[Path]
    infos: list[Any]  # ServerInfo per side
    differs: tuple[str, ...]
    warnings: list[str] = field(default_factory=list)


def _plan(args: argparse.Namespace) -> Plan | int:
    """Both sides read, their binaries found and asked for `--help`, every problem of both said; or an exit code."""
    from tui.core.lab.sides import SideError, read_side, vetted
    from tui.core.options.redact import redact_argv

    base = [a for a in args.server_args if a != "--"]
    if base and not any(text.strip() == "base" or text.strip().startswith("+") for text in (args.a, args.b)):
        return fail(f"llama-server flags were given ({' '.join(redact_argv(base))}), but neither side is `base` or "
                    "\"+FLAGS\", so nothing would use them; write a side as base or \"+FLAGS\", or leave the flags out.")
    try:
        sides = [read_side("A", args.a, base), read_side("B", args.b, base)]
    except SideError as e:
        return fail(str(e))
    if args.passes < 1:
        return fail(f"--passes {args.passes}: give 1 or more (2 or more to measure the noise).")
    bins: list[Path] = []
    for side, given, flag in zip(sides, (args.a_bin, args.b_bin), ("--a-bin", "--b-bin")):
        path = Path(given).expanduser() if given else side.server_bin
        if path is None:
            found = server_or_fail(args.server_bin)
            if isinstance(found, int):
                return found
            path = Path(found.path)
        elif not path.is_file():
            where = flag if given else f"{side.label}'s pasted command"
            return fail(f"{side.label}: {where} names {path}, which is no file; give the path of a llama-server binary.")
        bins.append(path)
    try:
        infos, differs, problems = vetted(sides, bins)
    except SideError as e:
        return fail(str(e))
    return Plan(sides, bins, infos, differs, [p.message for p in problems])


def _workload(text: str) -> tuple[int, int] | str:
    from tui.core.tune.workload import parse_shape

    try:
        w = parse_shape(text)
    except ValueError as e:
        return str(e)
    return round(w.in_tokens), round(w.out_tokens)


class _Run:
    """The A/B as `run_experiment` runs it: `run()` on its thread, `stop()` from Ctrl-C."""

    def __init__(self, plan: Plan, args: argparse.Namespace, workload: tuple[int, int], store: Any) -> None:
        self.plan, self.args, self.workload, self.store = plan, args, workload, store
        self.cancel = threading.Event()

    def run(self) -> Any:
        from tui.core.lab.ab import AbSide, run_ab
        from tui.core.lab.ranking import AB

        a, b = (AbSide(s.settings, path) for s, path in zip(self.plan.sides, self.plan.bins))
        return run_ab(a, b, self.args.suite, self.workload, self.args.passes, pair=AB, differs=self.plan.differs,
                      store=self.store, n_predict=self.args.n_predict, ready_timeout=self.args.ready_timeout,
                      on_event=_progress, cancel=self.cancel)

    def stop(self) -> None:
        self.cancel.set()


def _progress(ev: Any) -> None:
    if ev.kind == "probe" or ev.kind == "row_started":
        return  # a line per pass, not per request
    eta = f" ETA ~{ev.eta_s:.0f}s" if ev.eta_s is not None and ev.kind not in ("finished", "cancelled") else ""
    text = ev.message if ev.kind not in ("finished", "cancelled") else f"{ev.kind}"
    print(f"[ab {ev.done:.0f}/{ev.total} {ev.elapsed_s:.0f}s{eta}] {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    workload = _workload(args.workload)
    if isinstance(workload, str):
        return fail(workload)
    plan = _plan(args)
    if isinstance(plan, int):
        return plan
    from tui.core.lab.ab import ab_size
    from tui.core.probes.suites import SuiteError, get_suite
    from tui.core.server.process import install_cleanup

    try:
        size = ab_size(get_suite(args.suite), args.passes, args.n_predict)
    except SuiteError as e:
        return fail(str(e))
    install_cleanup()  # on the main thread: SIGTERM/SIGHUP stop the servers the worker starts
    for w in plan.warnings:
        print(f"mtp-tune: warning: {w}", file=sys.stderr)
    print(f"mtp-tune ab: {args.passes} passes per side, interleaved A B A B: {size.launches} launches, {size.requests} "
          f"requests of the {args.suite} suite, up to {size.tokens} generated tokens; the time left follows the "
          "first pass.", file=sys.stderr, flush=True)
    ran = run_experiment(str(plan.bins[0]), args.db, lambda _bin, store: _Run(plan, args, workload, store), _Run.stop,
                         "the passes done are kept in the results store", 30.0, 1)
    if isinstance(ran, int):
        return ran
    v = ran.result
    if v is None:
        return 130
    if args.json:
        print_json({"sides": [_side_json(s, path, info) for s, path, info in zip(plan.sides, plan.bins, plan.infos)],
                    "verdict": v.to_json()})
    else:
        print(render(plan, v))
    if ran.interrupted or v.status == "cancelled":
        return 130
    return 1 if v.status == "failed" else 0


def _side_json(side: Any, path: Path, info: Any) -> dict[str, Any]:
    from tui.core.lab.sides import build_name
    from tui.core.options.argv import settings_to_argv

    return {"label": side.label, "source": side.source, "server_bin": str(path), "build": info.version,
            "build_name": build_name(info), "argv": settings_to_argv(side.settings, redact=True)}


def render(plan: Plan, v: Any) -> str:
    """The answer as text: each side, what differs, the verdict table, the answer in words."""
    from tui.core.lab.sides import build_name
    from tui.core.options.argv import command_line, settings_to_argv
    from tui.core.probes.stats import fmt_rel, fmt_summary

    lines = [f"{s.label}: {s.source}, {build_name(info)} ({path})\n   {command_line(settings_to_argv(s.settings, redact=True))}"
             for s, path, info in zip(plan.sides, plan.bins, plan.infos)]
    lines.append("differs: " + ("; ".join(plan.differs) if plan.differs else
                                "nothing: the same settings and binary on both sides (this measures the noise)"))
    lines += ["", f"{v.headline.upper()} ({v.workload[0]} in / {v.workload[1]} out)", "",
              f"{'metric':<22} {'A':>24} {'B':>24} {'change':>8}  verdict"]
    for metric, a, b, rel, label in (
            ("PP t/s", fmt_summary(v.a.pp_tps), fmt_summary(v.b.pp_tps), v.pp.rel_change, v.pp.label),
            ("TG t/s", fmt_summary(v.a.tg_tps), fmt_summary(v.b.tg_tps), v.tg.rel_change, v.tg.label),
            ("s per request", fmt_summary(v.a.e2e_s, 2), fmt_summary(v.b.e2e_s, 2), v.e2e.rel_change, v.e2e.label)):
        lines.append(f"{metric:<22} {a:>24} {b:>24} {fmt_rel(rel):>8}  {label}")
    lines += ["", v.answer]
    return "\n".join(lines)
