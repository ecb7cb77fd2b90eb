"""What a KV cache type or a weight quant costs in output quality, measured by llama.cpp itself.

`mtp-tune quality -m FILE [llama-server flags] [--kv q8_0,q4_0,q8_0/q4_0] [--ref FILE]` runs
llama-perplexity once with f16 K/V (the reference: the same file, or --ref, a higher quant of the
same model) and once per K/V setting with `--kl-divergence`, and prints what it printed: the mean KL
divergence from the reference with its uncertainty, the 99th percentile and the maximum, how often
the most likely token is the same, and the mean change in the probability of the text's token (Δp).
A setting is K and V apart (`q8_0/q4_0`); a single type means both. Without --kv: the -ctk/-ctv of
your flags, else q8_0 and q4_0 (against --ref: your flags' K/V, else f16).

The text scored is your workload (--workload: a probe suite's prompts joined; default the full probe
workload), or --text FILE; it must hold two contexts' worth of tokens. The context is your -c, or the
longest the text allows, lowered when the text or the disk cap needs it (said). The reference's
logits (n_vocab x 2 bytes per scored token) are kept under the cache dir within --disk-cap, and each
result too: asking again is instant and says "cached"; a new setting costs one pass.

`--mtp` asks the other quality question: does MTP change the output? Speculative decoding must not
change what a greedy model writes, so the workload's prompts are generated with temperature 0 with
your flags' MTP on, then off (two launches of llama-server), and compared token for token; a
difference is printed as a finding with its first diverging position and both tokens.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tui.cli._common import (
    ServerArgsError, check_server_args, fail, names_a_model, pass_unknown_to_server, print_json, server_or_fail,
)

COMMAND = "quality"
#: what is measured without --kv and without -ctk/-ctv in the flags
DEFAULT_KV = "q8_0,q4_0"
HELP = "what each KV cache type or quant costs in output quality: KL divergence by llama-perplexity (-m FILE --kv ...)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kv", metavar="TYPES", default="",
                   help="K/V settings to measure, e.g. q8_0,q4_0,q8_0/q4_0 (default: the flags' -ctk/-ctv, else q8_0,q4_0)")
    p.add_argument("--ref", metavar="FILE", help="reference model: a higher quant of the same model (default: -m itself, f16 K/V)")
    text = p.add_mutually_exclusive_group()
    text.add_argument("--text", metavar="FILE", help="a UTF-8 text file to score")
    text.add_argument("--workload", metavar="tasks|long-prompt|full|FILE",
                      help="a probe suite whose prompts are scored (default: full, the task prompts and the long document)")
    p.add_argument("--chunks", type=int, metavar="N", help="chunks of -c tokens to score (default: what the text and --disk-cap allow, at most 8)")
    p.add_argument("--disk-cap", type=float, default=2.0, metavar="GIB",
                   help="most disk for reference logits, one file and all kept ones together (default 2)")
    p.add_argument("--pass-timeout", type=float, default=1800.0, metavar="S", help="seconds one llama-perplexity pass may take (default 1800)")
    p.add_argument("--perplexity-bin", metavar="PATH", help="llama-perplexity binary (default: beside the server, else mtp-tune's build)")
    p.add_argument("--server-bin", metavar="PATH", help="the llama-server whose llama-perplexity to use")
    p.add_argument("--mtp", action="store_true",
                   help="instead: generate the workload greedily with MTP on and off and compare the outputs token for token")
    p.add_argument("--n-predict", type=int, default=128, metavar="N",
                   help="with --mtp: tokens per prompt that sets none (default 128)")
    p.add_argument("--ready-timeout", type=float, default=180.0, metavar="S",
                   help="with --mtp: seconds to wait for each load (default 180)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    pass_unknown_to_server(p)


def _progress(msg: str) -> None:
    print(f"quality: {msg}", file=sys.stderr, flush=True)


def _request(args: argparse.Namespace) -> Any:
    """The measurement asked for, every flag and K/V type checked by the one validator; or an exit code."""
    from pathlib import Path

    from tui.core.quality.measure import QualityRequest
    from tui.core.quality.request import KvPair, parse_kv_list
    from tui.core.quality.text import load_text

    server_args = [a for a in args.server_args if a != "--"]
    if not names_a_model(server_args):
        return fail("quality needs a model file: `mtp-tune quality -m FILE.gguf [llama-server flags] --kv q8_0,q4_0`.")
    try:
        settings = check_server_args(server_args)
        if not settings.model:
            return fail("quality reads a model file on disk (-m FILE); download a Hub model first (-hf and -mu are "
                        "not measured).")
        kvs = parse_kv_list(args.kv)
        if not kvs:  # the flags' own K/V (an unset one is llama-server's f16), else the usual question
            k, v = settings.cache_type_k, settings.cache_type_v
            kvs = [KvPair(k or "f16", v or "f16")] if k or v else \
                [KvPair("f16", "f16")] if args.ref else parse_kv_list(DEFAULT_KV)
        for kv in kvs:  # each type through the one validator, as -ctk/-ctv
            check_server_args([*server_args, *kv.args], warn=False)
        if args.disk_cap <= 0:
            return fail(f"--disk-cap {args.disk_cap:g}: give a size in GiB above 0 (e.g. 2).")
        if args.pass_timeout <= 0:
            return fail(f"--pass-timeout {args.pass_timeout:g}: give seconds above 0.")
        text = load_text(args.text, args.workload)
    except (ServerArgsError, ValueError) as exc:
        return fail(str(exc))
    return QualityRequest(model=Path(settings.model).expanduser(), server_args=tuple(server_args), kv=tuple(kvs),
                          text=text, ref_model=Path(args.ref).expanduser() if args.ref else None,
                          ctx=settings.ctx_size or None, chunks=args.chunks, cap_bytes=int(args.disk_cap * 2**30),
                          pass_timeout=args.pass_timeout)


def run(args: argparse.Namespace) -> int:
    if args.mtp:
        return _run_mtp(args)
    from tui.core.quality.measure import QualityError, identify, measure
    from tui.core.quality.oracle import OracleError, oracle_info
    from tui.core.server import provision

    req = _request(args)
    if isinstance(req, int):
        return req
    try:
        identify(req)  # a wrong file or reference is said before a binary is found or built
        server = provision.find_server(args.server_bin)
        found = provision.ensure_perplexity(args.perplexity_bin, server.path if server else None,
                                            progress=lambda ev: _progress(f"[build] {ev.phase}: {ev.message}"))
        oracle = oracle_info(found.path)
        report = measure(req, oracle, progress=None if args.json else _progress)
    except (provision.ProvisionError, OracleError, QualityError) as exc:
        return fail(str(exc), 1)
    except ValueError as exc:  # ModelError, BudgetError, TextError: the input, named
        return fail(str(exc))
    except TimeoutError as exc:
        return fail(f"{exc}; try again when it has finished.", 1)
    if args.json:
        print_json(report.to_json())
        return 0
    print(render(report))
    return 0


def _run_mtp(args: argparse.Namespace) -> int:
    """MTP on against off, greedy, on the workload's prompts (quality.agreement): the flags checked by the
    one validator first, the K/V options refused (they belong to the KL divergence question)."""
    from tui.core.lab.events import LabError, LabEvent  # the lab stays out of `--help`
    from tui.core.quality.agreement import mtp_agreement

    server_args = [a for a in args.server_args if a != "--"]
    if args.kv or args.ref or args.text:
        return fail("--mtp compares MTP on and off on the same settings; --kv, --ref and --text belong to the KL "
                    "divergence question (ask it without --mtp).")
    if not names_a_model(server_args):
        return fail("quality --mtp needs a model: `mtp-tune quality --mtp -m FILE.gguf [llama-server flags]`.")
    if args.n_predict < 1:
        return fail(f"--n-predict {args.n_predict}: give at least 1 token.")
    try:
        settings = check_server_args(server_args)
    except ServerArgsError as exc:
        return fail(str(exc))
    found = server_or_fail(args.server_bin)
    if isinstance(found, int):
        return found

    def on_event(ev: LabEvent) -> None:
        if ev.kind in {"started", "launching", "ready", "launch_failed", "probe"} and not args.json:
            _progress(ev.message)

    try:
        agreement = mtp_agreement(settings, args.workload or "tasks", server_bin=found.path,
                                  n_predict=args.n_predict, cancel=None, on_event=on_event,
                                  ready_timeout=args.ready_timeout)
    except LabError as exc:
        return fail(str(exc))
    if args.json:
        print_json(agreement.to_json())
    else:
        print(agreement.text())
    return 0 if agreement.status == "complete" else 1


def render(report: Any) -> str:
    """The report as text: what was measured against what, then one row per K/V setting."""
    from tui.cli._common import counted

    ref = report.reference
    same = ref.path == report.model.path
    lines = [
        f"model      : {report.model.path}",
        f"reference  : {'the same file' if same else ref.path} with f16 K/V; logits "
        f"{report.ref_bytes / 1e6:.0f} MB" + (f", {report.ref_seconds:.1f} s" if report.ref_seconds is not None else "")
        + (" (cached)" if report.ref_cached else ""),
        f"text       : {report.text.label}, {report.text.n_bytes / 1000:.0f} kB",
        f"measured   : -c {report.ctx}, {counted(report.chunks, 'chunk')}, {report.tokens} tokens scored per setting, "
        f"by llama-perplexity {report.oracle.version_string}",
        "",
        f"{'K/V':<12} {'mean KLD ± unc':>22} {'p99 KLD':>9} {'max KLD':>9} {'same top % ± unc':>17} "
        f"{'Δp % ± unc':>16} {'time':>8}",
    ]
    for r in report.results:
        f = r.figures
        kld, dp = f.kld_mean.value + 0.0, f.dp_mean_pct.value + 0.0  # llama.cpp may print -0.000000: it is 0
        lines.append(
            f"{r.kv.label:<12} {kld:>10.6f} ± {f.kld_mean.uncertainty or 0:<9.6f} {f.kld_p99:>9.6f} "
            f"{f.kld_max:>9.6f} {f.same_top_pct.value:>8.3f} ± {f.same_top_pct.uncertainty or 0:<6.3f} "
            f"{dp:>7.3f} ± {f.dp_mean_pct.uncertainty or 0:<6.3f} {r.seconds:>6.1f} s"
            + ("  cached" if r.cached else ""))
    lines.append("")
    p = report.passes
    lines.append(f"passes     : {counted(p['reference'], 'reference pass', 'reference passes')}, "
                 f"{counted(p['settings'], 'setting pass', 'setting passes')} "
                 + (f"(and {p['repeated']} run again) " if p["repeated"] else "")
                 + f"({counted(sum(r.cached for r in report.results), 'setting')} from the cache)")
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)
