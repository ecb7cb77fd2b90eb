"""The laptop experiment of bench/bench_tune.py: one `mtp-tune tune --gpus rtx3060-laptop-6g --stand-ins`
command, MTP on/off x ubatch x draft KV, each row's smallest fit-target searched by real launches on a
loopback ggml-rpc-server capped at the simulated GPU's free memory (the stand-ins option of lab/launcher.py)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LAPTOP_FLAGS = ["-c", "262144", "-b", "2048", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "auto", "--spec-draft-n-max", "3",
                "-t", "1", "-np", "1"]
LAPTOP_AXES = ["--axis", "ubatch=512,1024,2048", "--axis", "draft-kv=q8_0,q4_0"]
#: A generated model with the laptop's problem: tiny weights, but 4 attention layers of 8 KV heads x 256
#: wide, so a 262144-token context needs ~4.3 GiB of q8_0 KV plus the draft's, more than 6 GiB in all
#: with MTP and a large micro-batch (the 35B's KV and compute on a 6 GB card, without its 20 GB of weights).
WIDE = dict(ctx=262144, n_layer=8, n_head=8, n_head_kv=8, head_dim=256, n_rot=64)


def laptop(setup: Any, root: Path, gpus: str) -> tuple[str, dict[str, Any] | None]:
    from tui.core.demo.tiny_model import preset, write_tiny_model
    from tui.core.planning.standin import host_total_mib

    model = write_tiny_model(root / "wide-ctx-tiny-mtp.gguf", preset("tiny-mtp", **WIDE))
    report = root / "laptop-tune.md"
    argv = [str(Path(sys.executable).parent / "mtp-tune"), "tune", "-m", str(model), *LAPTOP_FLAGS, "--workload", "64:32",
            *LAPTOP_AXES, "--ab-passes", "2", "--gpus", gpus, "--stand-ins", "--json", "--report", str(report),
            "--server-bin", str(setup.server)]
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t0
    shown = " ".join(Path(a).name if a.startswith(str(root)) else shlex.quote(a) for a in argv[1:] if a != str(setup.server))
    shown = shown.replace(" --server-bin", "")
    if done.returncode != 0:
        return (f"`mtp-tune {shown}` failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}", None)
    d = json.loads(done.stdout)
    return shown, {**d, "wall_s": wall, "host_mib": host_total_mib(), "report": report.read_text()}


def _med(xs: list[Any], fmt: str = ".0f") -> str:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return "-"
    m = xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
    return format(m, fmt)


def render_laptop(shown: str, d: dict[str, Any] | None) -> str:
    head = ["", "#### The laptop experiment as one command", ""]
    if d is None:
        return "\n".join([*head, shown, ""])
    res = d["result"]
    measured = [r for r in res["records"] if r["status"] in ("ok", "eliminated")]
    lines = [*head,
             f"`mtp-tune {shown}`: the laptop author's axes (MTP on/off x ubatch 512-2048 x draft KV q8_0/q4_0, main "
             "KV q8_0, a 262144-token context) on a generated model whose KV and compute buffers need 4.6-7.5 GiB on "
             "the device (tiny weights; 8 KV heads x 256 wide), against the simulated 6 GB laptop GPU played by a "
             "loopback ggml-rpc-server capped at its free memory (`--stand-ins`). Each row's smallest `--fit-target` "
             "that survives a first decode is searched by real launches (64 MiB steps), remembered per memory "
             "footprint and seeded from the nearest.",
             f"{res['launches']} launches for the search ({d['launches_this_run']} with the A/B), {len(measured)} of "
             f"{d['grid_size']} configurations measured, {d['wall_s']:.0f} s. {res['message']}", "",
             "| # | MTP | ubatch | draft KV | planned on the GPU (MiB, at the default margin) | smallest --fit-target "
             "(MiB) | fit-search launches: value outcome | s/request | PP t/s | TG t/s | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["records"]:
        v = r["values"]
        fit = r.get("fit") or {}
        trials = ", ".join(f"{t['value']} {t['outcome']}" for t in fit.get("trials") or []) or "remembered"
        s = r.get("samples") or {}
        ft = r.get("fit_target")
        vram = f"{r['vram_mib']:.0f}" if r.get("vram_mib") is not None else "-"
        lines.append(f"| {r['number']} | {'on' if v.get('mtp') else 'off'} | {v.get('ubatch')} | "
                     f"{v.get('draft-kv', '-') if v.get('mtp') else '-'} | {vram} | {ft if ft is not None else '-'} | "
                     f"{trials} | {_med(s.get('e2e_s') or [], '.3f')} | {_med(s.get('pp_tps') or [])} | "
                     f"{_med(s.get('tg_tps') or [])} | {r['status']} |")
    from tui.core.probes.breakeven import BreakEven

    ab = d.get("ab") or {}
    be = BreakEven(**d["break_even"]).text() if d.get("break_even") else "-"
    lines += ["", f"Final A/B (interleaved, 2 passes each, #{res['best_mtp_on']} against #{res['best_mtp_off']}): "
              f"{ab.get('label', d.get('ab_note'))}; {be}", ""]
    fits = {r.get("fit_target") for r in measured}
    if fits == {0}:
        lines += ["Every row's smallest --fit-target is 0 MiB: with the stand-in, llama.cpp's fit never ran out of "
                  "memory, because its dry run measures the same CPU backend the stand-in then allocates with, so what "
                  "it plans is what is allocated. The margins the laptop author needed come from allocations fit does "
                  "not see on CUDA (the CUDA context, cuBLAS workspaces, the pool's growth at the first decode), which a "
                  "CPU stand-in does not make. The table has the seed's rows and fit's real choices per row (the "
                  "planned device use, e.g. MTP on offloads layers to the host where MTP off keeps all on the GPU); "
                  "the margins themselves need the real GPU (`scripts/gpu-check.sh`).", ""]
    return "\n".join(lines)
