"""The laptop experiment of bench/bench_tune.py: one `mtp-tune tune` command with MTP on/off x ubatch x
draft KV and each row's smallest fit-target found from real out-of-memory failures, on a loopback
ggml-rpc-server capped in memory (tests/helpers/rlimit_exec.py) standing in for a small GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


LAPTOP_FLAGS = ["-c", "262144", "-b", "2048", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "auto", "--spec-draft-n-max", "3",
                "-t", "1"]
LAPTOP_AXES = ["--axis", "ubatch=512,1024,2048", "--axis", "draft-kv=q8_0,q4_0"]


def laptop(setup: Any, root: Path, limit_mib: int) -> tuple[str, dict[str, Any] | None]:
    """The laptop experiment as one `mtp-tune tune` command: the tiny MTP model with a 262144-token
    context (its KV and compute buffers are what a 6 GiB GPU runs out of, scaled down) against a
    ggml-rpc-server stand-in under an address-space limit of `limit_mib`, so --fit-target has a real
    device to run out of memory on and the tune searches each row's smallest fit-target for real."""
    import shlex
    import socket

    from tui.core.demo.tiny_model import preset, write_tiny_model
    from tui.core.planning.standin import host_total_mib
    from tui.core.server.process import free_port

    model = write_tiny_model(root / "long-ctx-tiny-mtp.gguf", preset("tiny-mtp", ctx=262144, head_dim=64))
    rpc_bin = setup.server.parent / "ggml-rpc-server"
    port = free_port()
    env = {**os.environ, "MALLOC_ARENA_MAX": "1"}  # one malloc arena: the same address-space bound every launch
    with open(root / "rpc.log", "wb") as log:
        rpc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "helpers" / "rlimit_exec.py"), str(limit_mib),
                                str(rpc_bin), "-H", "127.0.0.1", "-p", str(port), "-t", "1"], stdout=log,
                               stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            if rpc.poll() is not None:
                raise SystemExit(f"bench_tune: ggml-rpc-server exited at start (see {root / 'rpc.log'})")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("bench_tune: ggml-rpc-server did not listen within 20 s") from None
                time.sleep(0.05)  # polling for the port to open
        report = root / "laptop-tune.md"
        argv = [str(Path(sys.executable).parent / "mtp-tune"), "tune", "-m", str(model), "--rpc", f"127.0.0.1:{port}",
                *LAPTOP_FLAGS, "--workload", "64:32", *LAPTOP_AXES, "--ab-passes", "2", "--json",
                "--report", str(report), "--server-bin", str(setup.server)]
        t0 = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env)
        wall = time.monotonic() - t0
    finally:
        rpc.kill()
        rpc.wait(10)
    shown = " ".join(shlex.quote(a) if not a.startswith(str(root)) and a != str(setup.server) else Path(a).name
                     for a in argv[1:])
    shown = shown.replace(f"127.0.0.1:{port}", "127.0.0.1:PORT").replace(f" --server-bin {setup.server.name}", "")
    if done.returncode != 0:
        return (f"`mtp-tune {shown}` failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}", None)
    d = json.loads(done.stdout)
    return shown, {**d, "wall_s": wall, "host_mib": host_total_mib(), "limit_mib": limit_mib}


def render_laptop(shown: str, d: dict[str, Any] | None) -> str:
    head = ["", "#### The laptop experiment as one command", ""]
    if d is None:
        return "\n".join([*head, shown, ""])
    res = d["result"]
    host = d["host_mib"]
    lines = [*head,
             f"`mtp-tune {shown}`, against a ggml-rpc-server stand-in under a {d['limit_mib']} MiB address-space limit "
             "(tests/helpers/rlimit_exec.py): the laptop author's axes (MTP on/off x ubatch 512-2048 x draft KV "
             "q8_0/q4_0, main KV q8_0, a long context), each configuration's smallest `--fit-target` that survives a "
             "first decode found by real launches (64 MiB steps), remembered per memory footprint and seeded from the "
             f"nearest. The stand-in reports this host's {host} MiB as its memory, so a fit-target here reads "
             f"`{host} - fit-target` = the device memory --fit may plan with.",
             f"{res['launches']} launches for the search ({d['launches_this_run']} with the A/B), "
             f"{len([r for r in res['records'] if r['status'] in ('ok', 'eliminated')])} of {d['grid_size']} "
             f"configurations measured, {d['wall_s']:.0f} s. {res['message']}", "",
             "| # | MTP | ubatch | draft KV | smallest --fit-target (MiB) | device budget it leaves (MiB) | "
             "fit-search launches: value outcome | s/request | PP t/s | TG t/s | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["records"]:
        v = r["values"]
        fit = r.get("fit") or {}
        trials = ", ".join(f"{t['value']} {t['outcome']}" for t in fit.get("trials") or []) or "remembered"
        s = r.get("samples") or {}

        def med(xs: list[Any], fmt: str = ".0f") -> str:
            xs = sorted(x for x in xs if x is not None)
            m = xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2 if xs else None
            return "-" if m is None else format(m, fmt)

        ft = r.get("fit_target")
        lines.append(f"| {r['number']} | {'on' if v.get('mtp') else 'off'} | {v.get('ubatch')} | "
                     f"{v.get('draft-kv', '-') if v.get('mtp') else '-'} | {ft if ft is not None else '-'} | "
                     f"{host - ft if ft is not None else '-'} | {trials} | {med(s.get('e2e_s') or [], '.3f')} | "
                     f"{med(s.get('pp_tps') or [])} | {med(s.get('tg_tps') or [])} | {r['status']} |")
    from tui.core.probes.breakeven import BreakEven

    ab = d.get("ab") or {}
    be = BreakEven(**d["break_even"]).text() if d.get("break_even") else "-"
    lines += ["", f"Final A/B (interleaved, 2 passes each, #{res['best_mtp_on']} against #{res['best_mtp_off']}): "
              f"{ab.get('label', d.get('ab_note'))}; {be}",
              "",
              "Not `--gpus rtx3060-laptop-6g`: with simulated GPUs the tune plans against loopback stand-ins but "
              "launches on this machine's CPU backend, which cannot run out of the simulated GPU's memory, so it "
              "searches no fit-target (tune_run.real_offload). What that needs and does not exist yet: "
              "(1) `planning.standin.RpcServers` with a memory cap per stand-in (RLIMIT_AS at the simulated GPU's free "
              "memory, as here by hand); (2) tune_run launching the candidates through those stand-ins (`--rpc` to "
              "them, -ngl auto) instead of the bare CPU backend when `--gpus` is simulated; (3) the fit-target found "
              "translated back from the stand-in's view (it reports the host's RAM) to the simulated GPU's margin, "
              "`margin = fit_target - host_total + simulated_free` (the inverse of `standin.fit_targets`). A literal 6 "
              "GiB stand-in would also need a model that needs more than 6 GiB on the device (the tiny model's KV at "
              "this context is ~0.2 GiB), i.e. allocating 6+ GiB per launch on this 24 GiB shared machine; the "
              f"{d['limit_mib']} MiB stand-in is the same experiment scaled down.", ""]
    return "\n".join(lines)
