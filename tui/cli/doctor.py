"""Show the llama-server in use, its capabilities, GPUs, free RAM, and what silently changes results."""

from __future__ import annotations

import argparse
import sys

from tui.cli._common import fail, print_json
from tui.core.server import provision
from tui.core.doctor.report import collect

COMMAND = "doctor"
HELP = "check the llama-server, GPUs and environment (--build to build a server)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--server-bin", help="llama-server binary to use")
    p.add_argument("--perplexity-bin", help="llama-perplexity binary to use (the quality oracle)")
    p.add_argument("--build", action="store_true",
                   help="build and cache a CPU llama-server (with llama-perplexity) if none is found")


def _progress(ev: provision.BuildProgress) -> None:
    step = f" {ev.done}/{ev.total}" if ev.total else ""
    print(f"[{ev.phase}{step}] {ev.message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if args.build:
        try:
            found = provision.ensure_server(args.server_bin, progress=_progress)
            provision.ensure_perplexity(args.perplexity_bin, found.path, progress=_progress)
        except provision.ProvisionError as exc:
            return fail(str(exc), 1)
    report = collect(args.server_bin, perplexity_bin=args.perplexity_bin)
    if args.json:
        print_json(report.to_json())
        return 0
    s = report.server
    print(f"mtp-tune     : {report.version}")
    print(f"llama-server : {s.get('path') or 'not found'}" + (f"  (from {s['source']})" if s.get("source") else ""))
    if s.get("version"):
        print(f"version      : {s['version']}  built with {s.get('built_with') or '?'}")
        print(f"draft-mtp    : {'yes' if s.get('supports_draft_mtp') else 'NO'}")
        caps = s.get("capabilities") or {}
        print("capabilities : " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in caps.items()))
        print(f"rpc server   : {s.get('rpc_server') or 'not found'}")
        if s.get("exact_mode"):
            print(f"exact mode   : {'yes' if s['exact_mode']['ok'] else 'NO'} ({s['exact_mode']['message']})")
    q = report.perplexity
    print(f"perplexity   : {q.get('path') or 'not found'}" + (f"  (from {q['source']})" if q.get("source") else "")
          + (f"  {q['version']}" if q.get("version") else "")
          + ("  NOT the server's build" if q.get("same_build_as_server") is False else ""))
    print(f"NVML         : {report.nvml.get('status')}" + (f" ({report.nvml['message']})" if report.nvml.get("message") else ""))
    for g in report.gpus:
        print(f"  GPU {g.get('index')}: {g.get('name')}  {g.get('memory_used_mib')}/{g.get('memory_total_mib')} MiB used")
    h = report.host
    print(f"host RAM     : {h.get('ram_available_mib')} MiB free of {h.get('ram_total_mib')} MiB")
    for f in report.llama_config_files:
        print(f"config.ini   : {f['path']} ({', '.join(f['keys'])})")
    for k, v in report.llama_env.items():
        print(f"env          : {k}={v}")
    for w in report.warnings:
        print(f"warning: {w}")
    return 0
