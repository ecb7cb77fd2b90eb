"""Measure PP, TG and acceptance of a llama-server, with medians over repeats and hygiene warnings.

`mtp-tune probe --url URL` probes a running server; `mtp-tune probe -m FILE [llama-server flags]`
launches one under the supervisor (with `-np 1 -t 1 --metrics` unless your flags say otherwise; pass
`-t N` when layers or experts run on the CPU), probes it and stops it. Every flag mtp-tune does not
know goes to llama-server. Suites: `tasks` (nine chat prompts: TG and acceptance), `long-prompt`
(a ~10k-token document: PP, cache checked), `full` (both), or a .toml/.jsonl file. Every run is kept
in the results store (`mtp-tune runs list`).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import threading
from typing import Any

from tui.cli._common import (
    ServerArgsError, check_server_args, counted, fail, names_a_model, pass_unknown_to_server, print_json, server_or_fail,
    store_or_fail, workload_problem,
)
from tui.core.options import reader
from tui.core.probes.concurrency import slots_memory_text, slots_problem, with_slots
from tui.core.probes.positions import DraftPositions, shares_text
from tui.core.probes.run_types import ProbeProgress, ProbeRun, RunConfig
from tui.core.probes.stats import Summary, fmt_summary
from tui.core.probes.suites import SuiteError, get_suite
from tui.core.config.text import safe_text

COMMAND = "probe"
HELP = "measure PP, TG and acceptance (--url URL, or -m FILE [llama-server flags])"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", help="probe the llama-server already running at this URL")
    p.add_argument("--suite", default="tasks", help="tasks (default), long-prompt, full, or a .toml/.jsonl file")
    p.add_argument("--repeat", type=int, default=3, metavar="N", help="passes over the suite (default 3)")
    p.add_argument("--n-predict", type=int, default=512, metavar="N",
                   help="tokens to generate per prompt (default 512; the long prompt keeps its own 32)")
    p.add_argument("--seed", type=int, default=42, help="sampling seed (default 42; temperature is 0)")
    p.add_argument("--ignore-eos", action="store_true", help="always generate exactly --n-predict tokens")
    p.add_argument("--no-warmup", action="store_true", help="skip the unrecorded warm-up request")
    p.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="requests in flight at once (default 1); with -m the server is launched with -np N, each slot "
                        "keeping the context -c gives one request; reports the aggregate TG and per-request medians")
    p.add_argument("--label", help="a name for this run in `runs list` and exports")
    p.add_argument("--json", action="store_true", help="print one JSON object (run_id, summary, requests, warnings)")
    p.add_argument("--api-key", help="API key of the server (attach mode)")
    p.add_argument("--server-bin", metavar="PATH", help="llama-server binary for -m (default: found or built)")
    p.add_argument("--server-pid", type=int, metavar="PID",
                   help="attach mode: the server's pid, so it is not counted as another process on the GPU")
    p.add_argument("--simulate", metavar="PROFILE", help="record simulated hardware (a profile or e.g. 2x16GiB)")
    p.add_argument("--ready-timeout", type=float, default=180.0, metavar="S", help="seconds to wait for the model to load")
    p.add_argument("--db", metavar="PATH", help="results database (default: the user data dir)")
    pass_unknown_to_server(p)


def _progress_printer(enabled: bool) -> Any:
    def show(ev: ProbeProgress) -> None:
        if not enabled:
            return
        if ev.event == "request_done" and ev.record is not None:
            r = ev.record
            if r.ok:
                tg = f"{r.tg_tps:.1f}" if r.tg_tps else "-"
                pp = f"{r.pp_tps:.1f}" if r.pp_tps else "-"
                acc = f"{r.acceptance:.2f}" if r.acceptance is not None else "-"
                msg = f"TG {tg} t/s  PP {pp} t/s  acc {acc}  {r.predicted_n} tok"
            else:
                msg = f"FAILED: {safe_text(r.error)}"  # the server's error body
            print(f"[{ev.done:>3}/{ev.total}] pass {r.repeat + 1} {r.prompt:<24} {msg}", file=sys.stderr, flush=True)
        elif ev.event == "started":
            print(f"probe: {safe_text(ev.message)} (run {ev.run_id})", file=sys.stderr, flush=True)

    return show


def run(args: argparse.Namespace) -> int:
    from tui.core.probes.session import probe_attached, probe_launched

    server_args: list[str] = list(args.server_args)
    if args.url and server_args:
        return fail(f"--url attaches to a running server, so llama-server flags ({' '.join(server_args[:3])} ...) "
                    "cannot apply. Drop them, or drop --url to launch a server with -m FILE.")
    if not args.url and not names_a_model(server_args):
        return fail("probe needs a server: `mtp-tune probe --url http://127.0.0.1:8080` for a running one, or "
                    "`mtp-tune probe -m FILE.gguf [llama-server flags]` to launch one.")
    if not args.url:
        try:
            settings = check_server_args(server_args)  # refuse bad values before a server is launched
        except ServerArgsError as exc:
            return fail(str(exc))
        if why := workload_problem(settings.model, [(f"--n-predict {args.n_predict}", args.n_predict)]):
            return fail(why)
        if args.concurrency > 1:
            if why := slots_problem(settings.parallel, args.concurrency):
                return fail(why)
            server_args = launch_slots(server_args, settings, args.concurrency, args.simulate)
    try:
        suite = get_suite(args.suite)
        config = RunConfig(repeat=args.repeat, n_predict=args.n_predict, seed=args.seed,
                           ignore_eos=args.ignore_eos, warmup=not args.no_warmup, concurrency=args.concurrency)
    except SuiteError as exc:
        return fail(str(exc))
    except ValueError as exc:
        return fail(f"{exc}.")
    store = store_or_fail(args.db)
    if isinstance(store, int):
        return store
    cancel = threading.Event()
    progress = _progress_printer(True)
    try:
        if args.url:
            result = probe_attached(args.url, suite, config, store=store, label=args.label, api_key=args.api_key,
                                    simulate=args.simulate, server_pid=args.server_pid, progress=progress, cancel=cancel)
        else:
            found = server_or_fail(args.server_bin)
            if isinstance(found, int):
                return found
            result = probe_launched(found.path, server_args, suite, config, store=store, label=args.label,
                                    simulate=args.simulate, ready_timeout=args.ready_timeout, progress=progress,
                                    cancel=cancel)
    except KeyboardInterrupt:
        cancel.set()
        return fail("interrupted; the requests done so far are stored as a cancelled run.", 130)
    finally:
        store.close()
    if args.json:
        print_json(probe_json(result))
    elif not result.requests and result.status != "ok":
        where = f" (stored as run {result.run_id})" if result.run_id is not None else ""
        return fail(f"the probe {result.status}{where}: {result.error}", 1)
    else:
        print(render_run(result))
    return 0 if result.status == "ok" else 1


def probe_json(result: ProbeRun) -> dict[str, Any]:
    """The `probe --json` object: run_id, status, summary (tg_tps_median, pp_tps_median, acceptance,
    n_requests, positions, draft_advice, ...), requests (each with the server's timings verbatim), warnings."""
    d = result.to_json()
    return {
        "run_id": d["run_id"], "status": d["status"], "error": d["error"], "suite": d["suite"],
        "config": d["config"], "server": d["server"], "summary": d["summary"], "requests": d["requests"],
        "warnings": d["warnings"],
    }


def position_lines(s: dict[str, Any]) -> list[str]:
    """Acceptance by draft position and the n-max advice, when the run drafted."""
    pos = DraftPositions.from_json(s.get("positions"))
    if pos is None:
        if s.get("acceptance") is None:
            return []
        why = "needs /metrics: llama-server runs without --metrics" if s.get("verify_steps") is None else \
            "this llama-server does not count acceptance per draft position"
        return [f"  by draft position  - ({why})"]
    out = [f"  by draft position  {shares_text(pos)}  (share of {pos.steps} drafts whose first i tokens were accepted)"]
    advice = (s.get("draft_advice") or {}).get("text")
    if advice:
        out.append(textwrap.fill(advice, 100, initial_indent="  advice: ", subsequent_indent=" " * 10))
    return out


def render_run(result: ProbeRun) -> str:
    """Plain-text summary of one run."""
    s = result.summary
    lines = [f"run {result.run_id}: {result.status}" + (f" ({safe_text(result.error)})" if result.error else "")]
    tg, pp = Summary.from_json(s.get("tg_tps")), Summary.from_json(s.get("pp_tps"))
    lines.append(f"  TG  {fmt_summary(tg):>24} t/s   (median [min-max] over {counted(s.get('n_passes', 0), 'pass', 'passes')})")
    pp_note = "long prompt" if s.get("pp_source") == "pp" else "the suite's prompts"
    lines.append(f"  PP  {fmt_summary(pp):>24} t/s   ({pp_note})")
    acc = s.get("acceptance")
    mal = s.get("mean_accept_len")
    lines.append(
        "  acceptance " + ("-" if acc is None else f"{acc:.3f} ({s.get('draft_n_accepted')}/{s.get('draft_n')} drafted)")
        + ("" if mal is None else f", mean acceptance length {mal:.2f}")
    )
    lines += concurrency_lines(s)
    lines += position_lines(s)
    ttft = Summary.from_json(s.get("ttft_ms"))
    lines.append(f"  TTFT {fmt_summary(ttft, 0)} ms;  {s.get('n_ok', 0)}/{s.get('n_requests', 0)} requests ok")
    prompts = s.get("prompts") or []
    if prompts:
        w = max(len(p["name"]) for p in prompts)
        lines.append("")
        for p in prompts:
            acc_p = "-" if p.get("acceptance") is None else f"{p['acceptance']:.2f}"
            lines.append(
                f"  {p['name']:<{w}}  TG {fmt_summary(Summary.from_json(p.get('tg_tps'))):>22}  "
                f"PP {fmt_summary(Summary.from_json(p.get('pp_tps'))):>22}  acc {acc_p:>5}  "
                f"in {p.get('prompt_n')}  out {p.get('predicted_n')}"
            )
    if result.warnings:
        lines.append("")
        lines += [f"! {safe_text(w.message, keep_lines=True)}" for w in result.warnings]
    return "\n".join(lines)


def launch_slots(server_args: list[str], settings: Any, concurrency: int, simulate: str | None) -> list[str]:
    """`server_args` launched for `concurrency` requests at once (`concurrency.with_slots`: -np N, each
    slot keeping -c), said in one line on stderr with the planned KV and recurrent-state memory it
    costs over -np 1 (the planner's prediction; nothing when the model cannot be read here)."""
    from tui.core.probes.session import predict_memory  # the planner and the supervisor: only for a launch

    wide = with_slots(settings, concurrency)
    out = reader.without(server_args, "--parallel", "--ctx-size") + ["-np", str(concurrency)]
    if wide.ctx_size is not None:
        out += ["-c", str(wide.ctx_size)]
    per_slot = f" ({settings.ctx_size} tokens per slot)" if wide.ctx_size and wide.ctx_size != settings.ctx_size else ""
    mem = slots_memory_text(wide, lambda s: predict_memory(s, simulate)[0])
    ctx = f" -c {wide.ctx_size}" if wide.ctx_size is not None else ""
    print(f"concurrency {concurrency}: launching with -np {concurrency}{ctx}{per_slot}" + (f"; {mem}" if mem else ""),
          file=sys.stderr, flush=True)
    return out


def concurrency_lines(s: dict[str, Any]) -> list[str]:
    """The summary's concurrency block in words (nothing at concurrency 1)."""
    c = s.get("concurrency") or {}
    n = int(c.get("n") or 1)
    if n <= 1:
        return []
    agg, tg = Summary.from_json(c.get("aggregate_tg_tps")), Summary.from_json(c.get("request_tg_tps"))
    acc = Summary.from_json(c.get("request_acceptance"))
    spread = "" if tg is None or tg.n < 2 else f", spread {tg.spread:.0%}"
    return [
        f"  concurrency {n}: aggregate TG {fmt_summary(agg)} t/s (all tokens generated / wall time of each pass's "
        f"{n} requests at once, over {counted(agg.n if agg else 0, 'pass', 'passes')})",
        f"  per request: TG {fmt_summary(tg)} t/s{spread}, acceptance {fmt_summary(acc, 2)} "
        f"(median [min-max] over {counted(tg.n if tg else 0, 'request')})",
    ]
