"""Which file of a Hugging Face repo fits: every quant planned side by side, before any download.

One row per model file (split parts as one row; projectors and draft sidecars are no rows) and per
main K/V setting (`--kv q8_0,q8_0/q4_0`, as -ctk and -ctv; the draft KV stays as the flags say): file size, each
device's need and what it has left (GiB), how it fits at the flags' -c, what `--fit on` would
change, the largest `-c` that loads with every layer where the flags put it, and what the row's K/V
types cost in output quality when `mtp-tune quality` measured it on that file (found by its header
digest in the quality index; blank when not measured, never guessed). The best-quality
variant that fits as given comes first, then those that need fit; the table's legend says what
each column means.

Only the headers are read (HTTP range requests, cached: a second run asks nothing but a stale
listing); `--exact` measures each row with llama.cpp's own dry run. Every flag and KV type is
checked before the first request.

Exit status: 0 when a row loads at all, with fit or without (always with --json, as `plan --json`),
1 when none does, 2 when a flag is refused or the repo cannot be listed.

--json: one object per row with `tier` ("yes", "with fit", "no", or "error" for a row that could not
be planned), `tight` (tier yes, inside the --fit-target margin), `fits` (it loads at all: tier yes
or with fit), `fit_choice` (fit's flags), `max_ctx`, `devices` (need, free, headroom, risk; the
host's `mapped_mib`: the part of its need that is model file mapped between its own tensors), and
`quality` (null when not measured; "reference" for f16/f16; else the measured figures).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from tui.cli._common import check_server_args, fail, mib_arg, pass_unknown_to_server, print_json
from tui.core.config.text import safe_text

COMMAND = "variants"
HELP = "every quant of a Hugging Face repo planned side by side from the headers alone: which file fits"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("repo", metavar="REPO[:QUANT]", help="a Hugging Face repo, e.g. unsloth/Qwen3.6-35B-A3B-GGUF")
    p.add_argument("--gpus", metavar="SPEC", help="cpu | 2x16GiB | 6GiB,24GiB | a profile name (default: real GPUs or cpu)")
    p.add_argument("--kv", metavar="TYPES", default="",
                   help="main K/V settings to compare, e.g. f16,q8_0,q8_0/q4_0 (default: as the flags say)")
    p.add_argument("--exact", action="store_true", help="measure every row with llama.cpp's own --fit dry run")
    p.add_argument("--refresh", action="store_true", help="ask the Hub again now (default: a listing up to 6 h old)")
    p.add_argument("--rpc-mib", type=mib_arg, default=None, metavar="MIB", help="memory of each --rpc device, without asking")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object: repo, commit, devices, rows")
    out.add_argument("--md", action="store_true", help="a Markdown table with its legend")
    pass_unknown_to_server(p)


def kv_list(spec: str) -> list[str | None]:
    """`--kv f16,q8_0,q8_0/q4_0` -> each setting's label (`q8_0`, or `K/V` when they differ), each once, in
    order, read by quality's one K/V list reader (KvSpecError names a bad entry); empty: [None], the
    flags' own K/V types."""
    from tui.core.quality.request import parse_kv_list  # lazy, as every command's core imports: --help loads none

    return [kv.label for kv in parse_kv_list(spec)] or [None]


def _settings_for(server_args: list[str], count: int | None) -> Any:
    from tui.core.quality.request import parse_kv_list  # lazy, as every command's core imports: --help loads none

    def settings_for(path: str, kv: str | None) -> Any:
        kv_args = parse_kv_list(kv)[0].args if kv else []  # a label of `kv_list`: one setting
        return check_server_args([*server_args, *kv_args, "-m", path], warn=False, device_count=count)
    return settings_for


def run(args: argparse.Namespace) -> int:
    from tui.core.options.reader import value, without
    from tui.core.options.redact import redact_argv
    from tui.core.planning.devices import devices_now
    from tui.core.remote.errors import RemoteError
    from tui.core.remote.hub import split_repo_tag
    from tui.core.remote.source import REMOTE_OPTIONS
    from tui.core.remote.variants import plan_variants

    server_args = [a for a in args.server_args if a != "--"]
    token = value(server_args, "--hf-token") or os.environ.get("HF_TOKEN") or None
    server_args = without(server_args, "--hf-repo", "--model", *REMOTE_OPTIONS)
    try:
        kvs = kv_list(args.kv)
        split_repo_tag(args.repo)
        settings = check_server_args(server_args)
        ds = devices_now(args.gpus, list(settings.rpc), args.rpc_mib)
        for kv in kvs:  # every flag and KV type refused here, before anything is fetched
            _settings_for(server_args, ds.count or None)("model.gguf", kv)
    except ValueError as exc:
        return fail(str(exc))
    for note in ds.notes():
        print(f"mtp-tune: {note}", file=sys.stderr)
    exact = _exact_fn(args, ds) if args.exact else None

    def progress(msg: str) -> None:
        if not (args.json or args.md):
            print(f"mtp-tune: {safe_text(msg)}", file=sys.stderr)

    try:
        table = plan_variants(args.repo, _settings_for(server_args, ds.count or None), ds, kvs, token=token,
                              refresh=args.refresh, exact=exact, progress=progress)
    except RemoteError as exc:
        return fail(str(exc))
    from tui.cli._variants_table import render
    from tui.core.quality.index import measured_rows, quality_json

    measured = measured_rows(table.rows)  # what the quality index knows of each row's file: nothing is run
    if args.json:
        data = table.to_dict()
        for row, m in zip(data["rows"], measured):
            row["quality"] = quality_json(m)
        print_json({**data, "device_source": ds.source, "host_free_mib": ds.host_free_mib,
                    "devices": [{"key": d.key, "name": d.name, "total_mib": d.total_mib, "free_mib": d.free_mib}
                                for d in ds.devices]})
        return 0
    print(render(table, ds, markdown=args.md, flags=redact_argv(server_args), measured=measured))
    return 0 if any(r.fits for r in table.rows) and not ds.unreachable else 1


def _exact_fn(args: argparse.Namespace, ds: Any) -> Any:
    """Each row's dry run, as `plan --exact` runs it: simulated GPUs played by loopback stand-ins."""
    from dataclasses import replace

    from tui.core.planning.exact import exact_plan, unavailable
    from tui.core.server import provision

    try:
        found = provision.find_server(getattr(args, "server_bin", None))
        why = "no llama-server found (run `mtp-tune doctor`); exact mode needs one."
    except provision.ProvisionError as exc:
        found, why = None, str(exc)
    simulated = bool(args.gpus) and args.gpus.strip().lower() != "cpu"

    def exact(settings: Any, meta: Any) -> Any:
        if found is None:
            return unavailable(why)
        s = replace(settings, rpc=ds.rpc_endpoints) if ds.unreachable else settings
        return exact_plan(s, list(ds.devices), found.path, meta=meta, stand_in=simulated,
                          host_total_mib=ds.host_total_mib, host_free_mib=ds.host_free_mib)
    return exact
