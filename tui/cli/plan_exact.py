"""`mtp-tune plan --exact`: the plan from llama.cpp's own dry run, beside the instant estimate.

Simulated GPUs (`--gpus` with a profile or sizes) are played by loopback ggml-rpc-server stand-ins;
real GPUs and `--rpc` devices are measured as they are by the server found (a CUDA build's numbers
are exact for its GPUs). When exact mode is unavailable the estimate is printed with the reason.
An `--rpc` server that did not answer is left out of the dry run as it is of the estimate.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tui.cli._common import counted, print_json
from tui.core.config.text import safe_text
from tui.core.planning.cache import attach


def _calibrate(meta: Any, server: Any, res: Any, settings: Any, ds: Any, quiet: bool) -> dict[str, Any] | None:
    """The first exact run of a model also calibrates the estimate on it (a few more dry runs, cached
    with exact's results): every later plan of the model, for any settings, uses llama.cpp's terms."""
    from tui.core.planning.calibrate import calibrate
    from tui.core.planning.plan import plan

    if not res.available:
        return None
    if not quiet:
        print("calibrating the estimate on this model (llama.cpp dry runs at the design points) ...", file=sys.stderr)
    c = calibrate(meta, server, progress=None)
    if isinstance(c, str):
        if not quiet:
            print(f"note: the estimate could not be calibrated ({c}); it stays structural.", file=sys.stderr)
        return {"status": "failed", "reason": c}
    attach(meta, c)
    est = plan(meta, settings, list(ds.devices), host_total_mib=ds.host_total_mib, host_free_mib=ds.host_free_mib,
               apply_fit=False)
    worst = 0.0
    for d in res.plan.devices:
        e = est.device(d.key)
        for k in ("compute", "draft_compute"):
            m = d.components[k]
            if e is not None and m > 0:
                worst = max(worst, abs(e.components[k] - m) / m)
    return {"status": "calibrated", "runs": c.runs, "seconds": round(c.seconds, 2), "kind": c.kind,
            "worst_compute_error_here": round(worst, 4)}


def calibration_line(calibrated: dict[str, Any]) -> str:
    """What the calibration is worth, in plain words: at the settings just measured, how far the
    calibrated estimate's compute buffers (`worst_compute_error_here`: the largest relative error of
    compute or draft compute on any device) are from what llama.cpp's dry run measured."""
    how = "cached" if calibrated["runs"] == 0 else f"{counted(calibrated['runs'], 'dry run')}, {calibrated['seconds']:.1f} s"
    off = 100 * calibrated["worst_compute_error_here"]
    here = ("match llama.cpp's" if off < 0.05 else f"differ from llama.cpp's by up to {off:.1f} %")
    return (f"estimate: calibrated on this model ({how}); at these settings its compute buffers {here}; every later "
            "plan of this model uses the calibration")


def run_exact(args: argparse.Namespace, settings: Any, meta: Any, ds: Any, estimate: Any, remote: Any = None) -> int:
    """`ds`: the DeviceSet the estimate was planned on (`planning.devices.device_set`); `remote`: the
    `remote.fetch.Fetched` header copy when the model is not on this disk (the dry run reads it)."""
    from dataclasses import replace

    from tui.cli._plan_table import remote_line, render, unreachable_json
    from tui.core.server import provision
    from tui.core.planning.exact import exact_plan

    try:
        found = provision.find_server(getattr(args, "server_bin", None))
    except provision.ProvisionError as exc:
        found = None
        print(f"warning: {exc}", file=sys.stderr)
    simulated = bool(args.gpus) and args.gpus.strip().lower() != "cpu"
    if found is None:
        from tui.core.planning.exact import unavailable

        res = unavailable("no llama-server found (run `mtp-tune doctor`); exact mode needs one.")
    else:
        res = exact_plan(replace(settings, rpc=ds.rpc_endpoints) if ds.unreachable else settings, list(ds.devices),
                         found.path, meta=meta, stand_in=simulated, host_total_mib=ds.host_total_mib,
                         host_free_mib=ds.host_free_mib)
    calibrated = _calibrate(meta, found.path, res, settings, ds, quiet=args.json) if found is not None else None
    if args.json:
        print_json({"estimate": estimate.to_dict(), "exact": res.to_dict(), "unreachable": unreachable_json(ds),
                    "calibration": calibrated,
                    **({"remote": remote.to_dict()} if remote is not None else {})})
        return 0
    if remote is not None:
        print(remote_line(remote, settings))
    failed = 1 if ds.unreachable else 0
    if not res.available:
        print(render(estimate, ds))
        print(f"\nexact: unavailable, {safe_text(res.reason, keep_lines=True)} The figures above are the estimate.")
        return 0 if estimate.worst_risk != "oom" and not failed else 1
    how = "cached" if res.cached else f"{counted(res.runs, 'dry run')}, {res.seconds:.1f} s"
    print(f"exact (llama.cpp): {how}" + (", measured on a header-only copy of the model" if res.sparse_copy else ""))
    print(render(res.plan, ds))
    lines = []
    for d in res.plan.devices:
        src = res.sources.get(d.key)
        if src is None:
            continue
        est = estimate.device(d.key)
        delta = "" if est is None else f", estimate {est.needed_mib:.0f} MiB"
        note = f" ({src.why})" if src.why else ""
        bufs = ", ".join(f"{k} {v:.2f} MiB" for k, v in src.buffers.items())
        lines.append(f"  {d.key}: {res.label(d.key)}{note}{delta}"
                     + (f"; weights in {bufs}" if bufs else "")
                     + (f"; by formula: {', '.join(src.by_formula)}" if src.by_formula else ""))
    print("\nsources:\n" + "\n".join(lines))
    if res.fit is not None and res.fit.changed:
        print(f"fit chose: {' '.join(res.fit.flags())}")
    if calibrated is not None and calibrated["status"] == "calibrated":
        print(calibration_line(calibrated))
    for w in res.warnings:
        print(f"note: {safe_text(w, keep_lines=True)}")
    return 0 if res.plan.worst_risk != "oom" and not failed else 1
