"""Plan llama-server's memory per device before launching: weights, KV, MTP draft KV, recurrent
state, compute and output buffers, the --fit-target margin and an OOM risk verdict per device.

A remote model (`-hf REPO[:QUANT]`, `-mu URL`) is planned before download from its GGUF header alone,
read by HTTP range requests and cached (`tui.core.remote`); `-hf` resolves to the file(s)
llama-server's own `-hf` would download.

--gpus SPEC: `cpu` (host only), sizes like `2x16GiB` or `6GiB,24GiB`, or a profile name
(rtx3060-laptop-6g, rtx3090-24g, rtx4090-24g, 2xv100-16g, h200-141g). Without --gpus: the real GPUs
(NVML), or `cpu` when there are none. `--rpc host:port,...` devices are planned as remote devices,
ahead of the local GPUs as llama.cpp orders them (the one device list: tui.core.planning.devices),
at the size each server reports (asked once) or `--rpc-mib`.

Exit status: 0 when no device is predicted to run out, 1 for a predicted OOM or an `--rpc` server
that does not answer (named and left out of the plan: llama-server given that `--rpc` would not
start either), 2 for a refused flag.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tui.cli._common import counted, fail, mib_arg, pass_unknown_to_server, print_json

COMMAND = "plan"
HELP = "per-device memory plan and OOM risk for llama-server flags (MTP-aware)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", metavar="SPEC", help="cpu | 2x16GiB | 6GiB,24GiB | a profile name (default: real GPUs or cpu)")
    p.add_argument("--json", action="store_true", help="print one JSON object: model, devices, totals")
    p.add_argument("--exact", action="store_true", help="measure with llama.cpp's own --fit dry run (about a second)")
    p.add_argument("--refresh", action="store_true",
                   help="-hf/-mu: ask the server again now (default: a cached listing or header up to 6 h old)")
    p.add_argument("--rpc-mib", type=mib_arg, default=None, metavar="MIB",
                   help="memory of each --rpc device, without asking the servers (default: what each server reports)")
    pass_unknown_to_server(p)


def _parse_settings(args: list[str], devices: Any = None) -> Any:
    """llama-server flags -> Settings through the one validator (`check_server_args`), its per-device
    rules against `devices` (a DeviceSet: RPC devices count) when given; ValueError on a refusal."""
    from tui.cli._common import check_server_args

    if devices is None:
        return check_server_args(args, warn=False)  # read for --rpc and -m; warned on the second pass
    try:
        return check_server_args(args, device_count=devices.count or None)  # no device: CPU only, -ts is moot
    except ValueError as exc:
        raise ValueError("\n  ".join([str(exc), *devices.notes()])) from exc


def _draft_hint(fetched: Any) -> str:
    """For a plan refused for want of MTP layers: the repo's draft sidecar llama-server would load instead."""
    drafts = [s for s in (fetched.fetched.sidecars if fetched is not None else ()) if s.is_draft]
    if not drafts:
        return ""
    return (f" But this repo ships {drafts[0].path}, which llama-server downloads and loads as the draft model "
            "instead; mtp-tune does not plan a separate draft model: plan without --spec-type to see the rest.")


def _attach_cached_calibration(meta: object, args: argparse.Namespace) -> str:
    """Attach this model's cached calibration (nothing is run); the sentence that says so, or ""."""
    from tui.core.planning.cache import attach_cached  # the cache alone: calibrate runs dry runs (a server)
    from tui.core.server import provision

    try:
        found = provision.find_server(getattr(args, "server_bin", None))
    except provision.ProvisionError:
        return ""
    c = attach_cached(meta, found.path if found is not None else None)  # type: ignore[arg-type]
    return (f"calibrated on this model by llama.cpp ({counted(c.runs, 'dry run')}, cached; compute and draft compute near-exact "
            "for any settings on CPU-backed devices)") if c is not None else ""


def run(args: argparse.Namespace) -> int:
    from tui.core.planning.devices import devices_now
    from tui.core.planning.errors import PlanError
    from tui.core.planning.gguf_meta import GGUFError
    from tui.core.planning.gguf_reader import read_gguf
    from tui.core.planning.plan import plan

    server_args = [a for a in args.server_args if a != "--"]
    try:
        settings = _parse_settings(server_args)
    except ValueError as exc:
        return fail(str(exc))
    fetched = None
    from tui.core.remote.source import source_of

    if source_of(settings) is not None:  # -hf (wins over -m) or -mu (downloads to -m): the remote file
        from tui.cli._remote import fetch_for_plan

        fetched = fetch_for_plan(settings, server_args, refresh=args.refresh, quiet=args.json)
        if isinstance(fetched, int):
            return fetched
        server_args, settings = fetched.server_args, fetched.settings
    if not settings.model and fetched is None:
        return fail("plan needs a model: mtp-tune plan (-m FILE.gguf | -hf REPO[:QUANT] | -mu URL) [llama-server flags] "
                    "[--gpus SPEC] [--json]")
    try:
        ds = devices_now(args.gpus, list(settings.rpc), args.rpc_mib)  # ValueError naming a bad --gpus
        settings = _parse_settings(server_args, ds)
    except ValueError as exc:
        return fail(str(exc))
    try:
        meta = read_gguf(os.path.expanduser(settings.model))
        cal_note = _attach_cached_calibration(meta, args)
        p = plan(meta, settings, list(ds.devices), host_total_mib=ds.host_total_mib, host_free_mib=ds.host_free_mib)
    except (GGUFError, PlanError) as exc:
        return fail(str(exc) + (_draft_hint(fetched) if "no MTP (NextN) layers" in str(exc) else ""))
    remote = fetched.fetched if fetched is not None else None
    if args.exact:
        from tui.cli.plan_exact import run_exact
        return run_exact(args, settings, meta, ds, p, remote)
    from tui.cli._plan_table import render, remote_line, unreachable_json

    if args.json:
        print_json({**p.to_dict(), "unreachable": unreachable_json(ds),
                    **({"remote": remote.to_dict()} if remote is not None else {})})
        return 0
    if remote is not None:
        print(remote_line(remote, settings))
    print(render(p, ds))
    print(f"\nestimate: {cal_note}" if cal_note else "\nestimate: structural (run `plan --exact` once to calibrate it on "
          "this model)")
    return 0 if p.worst_risk != "oom" and not ds.unreachable else 1
