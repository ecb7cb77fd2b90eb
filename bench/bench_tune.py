"""Tune against the grid (issue 21): the launches and the wall time the search needs to reach the
full grid's best (within its noise), on the demo's CPU llama-server with a tiny MTP model.

The space: MTP on/off x draft n-max 1-6 x micro-batch 64/128/256/512 x draft KV f16/q8_0, the rest
fixed (-b 512, -ctk/-ctv f16, -fa auto, -np 1): 4 MTP-off + 48 MTP-on = 52 configurations, one
launch each for the grid. Configurations really differ: draft KV q8_0 costs ~30 % on this CPU, a
longer draft pays with acceptance 1.0, and MTP itself loses with one thread but wins with two, so the
experiment runs once per `--threads` value (default 1 and 2): the answer is MTP off in one, an MTP-on
corner of the 48 in the other. Both go through `TuneRun` (the code `mtp-tune tune` runs: llama.cpp's
dry run for every candidate, the real server, the probe runner) with the same request shape:

* the grid: `tuner.GridReference` (set as the run's `strategy`), every configuration measured to the
  last rung (4 passes) through the same lab trials as the search;
* the search (`tuner.Tuner`): deterministic, so it is run from two different start points
  (the defaults n-max 3 / ubatch 512 / draft KV f16, and the far corner n-max 1 / ubatch 64 / q8_0)
  and once more from the first, for the run-to-run noise.

Judged with the tuner's own noise rule (`lab.ranking`, i.e. `probes.stats.verdict` on per-pass
seconds per request): a search reached the grid's best when the configuration it answered is, in the
grid's own measurements, the grid's fastest or "same" as it; the median gap is printed beside it.
The MTP-on best is judged the same way against the grid's MTP-on side. Goal: at most 1/3 of the
grid's launches. About 10 minutes on 2 CPUs. Appends to bench/RESULTS.md under "## Tune: the search
against the grid (issue 21)".

    .venv/bin/python bench/bench_tune.py [--workload 128:384] [--threads 1,2] [--agree 1.0]
        [--search-runs 3] [--grid-runs 1] [--dump FILE.json] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import publish  # noqa: E402
from _tune_laptop import laptop, render_laptop  # noqa: E402

from tui.core.options.settings import Settings  # noqa: E402
from tui.core.probes.stats import SAME  # noqa: E402
from tui.core.lab import ranking  # noqa: E402
from tui.core.tune.space import Floors  # noqa: E402
from tui.core.lab.trial import Trial  # noqa: E402
from tui.core.tune.result import fmt_seconds  # noqa: E402

HEADING = "## Tune: the search against the grid (issue 21)"
#: Axis values; the first of each is where a search starts (DEFAULT_VALUES' starts: n-max 3, ubatch 512).
VALUES: dict[str, tuple[Any, ...]] = {"draft-n-max": (3, 1, 2, 4, 5, 6), "ubatch": (512, 64, 128, 256),
                                      "draft-kv": ("f16", "q8_0")}
#: The far corner: every axis starts at its other end.
CORNER: dict[str, tuple[Any, ...]] = {"draft-n-max": (1, 2, 3, 4, 5, 6), "ubatch": (64, 128, 256, 512),
                                      "draft-kv": ("q8_0", "f16")}


@dataclass
class Run:
    name: str
    start: str
    launches: int = 0
    wall_s: float = 0.0
    grid_size: int = 0
    records: list[Trial] = field(default_factory=list)
    best: Trial | None = None
    best_on: Trial | None = None
    best_off: Trial | None = None
    same: list[Trial] = field(default_factory=list)
    stopped: str = ""
    reached_s: float | None = None  # wall time when the final best was first measured
    reached_launches: int | None = None  # launches by then
    others_cpu: float = 0.0  # the machine's CPU used by other processes during the run, 0..1


class CpuMeter:
    """The share of this machine's CPU that other processes used since `start`: /proc/stat's busy
    time minus this process and its reaped children (the servers and dry runs it ran)."""

    def __init__(self) -> None:
        self.hz = os.sysconf("SC_CLK_TCK")
        self.t0, self.busy0, self.own0 = time.monotonic(), self._busy(), self._own()

    def _busy(self) -> float:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / self.hz  # user nice system irq softirq steal

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def others(self) -> float:
        wall = max(1e-9, time.monotonic() - self.t0)
        return max(0.0, (self._busy() - self.busy0) - (self._own() - self.own0)) / (wall * (os.cpu_count() or 1))


def wait_quiet(max_s: float = 120.0, window_s: float = 3.0, threshold: float = 0.10) -> float:
    """Before a run: wait (at most `max_s`) until other processes use under `threshold` of the
    machine's CPU over `window_s`; returns the seconds waited. The machine is shared; this only
    avoids starting inside someone else's burst, it cannot stop one mid-run (others' CPU says)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        m = CpuMeter()
        time.sleep(window_s)  # a measurement window, not a synchronisation
        if m.others() < threshold:
            break
    return time.monotonic() - t0


def run_tune(name: str, start: str, model: Path, server: Path, base: Settings, values: dict[str, tuple[Any, ...]],
             workload: str, grid: bool, state_root: Path) -> Run:
    from tui.core.planning.devices import devices_now
    from tui.core.tune.run import TuneRequest, TuneRun
    from tui.core.tune.workload import parse_workload
    from tui.core.tune.search import GridReference

    seen: dict[int, tuple[float, int]] = {}  # record number -> (seconds since start, launches so far)
    req = TuneRequest(base, parse_workload(workload), server, Floors(), values, "cpu", ab_passes=0, fresh=True,
                      state_root=state_root)
    tr = TuneRun(req, devices=devices_now("cpu"))
    if grid:
        tr.strategy = GridReference
    waited = wait_quiet()
    t0 = time.monotonic()

    def on_event(ev: Any) -> None:
        if ev.kind == "trial" and ev.trial is not None:
            seen[ev.trial.number] = (time.monotonic() - t0, tr.launches)

    tr.on_event = on_event
    meter = CpuMeter()
    out = tr.run()
    wall = time.monotonic() - t0
    res = out.result
    run = Run(name, start, res.launches, wall, res.grid_size, list(res.records), res.best, res.best_mtp_on,
              res.best_mtp_off, list(res.same_as_best), res.stopped, others_cpu=meter.others())
    if res.best is not None and res.best.number in seen:
        run.reached_s, run.reached_launches = seen[res.best.number]
    print(f"[bench_tune] {name} ({start}): {res.message} wall {wall:.1f} s, others' CPU {run.others_cpu:.0%}, "
          f"waited {waited:.0f} s for quiet", file=sys.stderr, flush=True)
    return run


def label(r: Trial | None) -> str:
    if r is None:
        return "-"
    v = r.values
    if not v.get("mtp"):
        return f"MTP off, ub {v.get('ubatch')}"
    return f"MTP n{v.get('draft-n-max')}, ub {v.get('ubatch')}, dKV {v.get('draft-kv')}"


def figures(r: Trial | None) -> str:
    """`0.462 [0.455-0.470] s (n=4), PP 2101, TG 870 t/s, acc 1.00`."""
    if r is None or r.e2e() is None:
        return "-"
    e = r.e2e()
    assert e is not None
    acc = r.median("acceptance")
    return (f"{fmt_seconds(e)} s ({e.spread:.1%}, n={e.n}); PP {r.median('pp_tps') or 0:.0f}, "
            f"TG {r.median('tg_tps') or 0:.0f} t/s" + (f", acc {acc:.2f}" if acc is not None else ""))


def judge(grid: Run, pick: Trial | None, side: bool | None) -> tuple[str, bool]:
    """Is `pick` (a search's choice) the grid's best within the grid's noise, on one side or both?

    In the grid's own measurements: the grid's fastest on that side, or `same` as it by the noise
    rule. Returns (a sentence, the yes/no)."""
    if pick is None:
        return "nothing picked", False
    pool = [r for r in grid.records if side is None or r.mtp == side]
    lead = ranking.leader(pool)
    twin = next((r for r in pool if r.key == pick.key), None)
    if lead is None or twin is None:
        return "not in the grid", False
    if twin is lead:
        return f"the grid's fastest (#{lead.number})", True
    v = ranking.versus(lead, twin)
    ok = v.label == SAME
    return (f"{'same as' if ok else v.label + ' than'} the grid's fastest #{lead.number} ({label(lead)}) in the "
            f"grid's figures: {v.rel_change:+.1%} vs noise {v.noise:.1%}" if v.rel_change is not None and v.noise is not None
            else f"{v.label}: {v.reason}"), ok


def cross(a: Trial | None, b: Trial | None) -> str:
    """`b` (a search's pick, its own passes) against `a` (the grid's pick): the verdict on seconds."""
    if a is None or b is None:
        return "-"
    v = ranking.versus(a, b)
    return f"{v.label} ({v.rel_change:+.1%}, noise {v.noise:.1%})" if v.rel_change is not None and v.noise is not None \
        else v.label


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="128:384", help="the request shape IN:OUT (default 128:384)")
    parser.add_argument("--threads", default="1,2",
                        help="llama-server -t, one experiment each (default 1,2: MTP loses with one thread, wins with two)")
    parser.add_argument("--agree", type=float, default=1.0,
                        help="the MTP head's agreement with the trunk (draft acceptance); 1.0: the demo model itself")
    parser.add_argument("--search-runs", type=int, default=3, help="search runs: defaults, far corner, defaults again ...")
    parser.add_argument("--grid-runs", type=int, default=1, help="full grids (a second shows the grid's own noise)")
    parser.add_argument("--dump", metavar="FILE.json", help="also write every run's records here")
    parser.add_argument("--no-laptop", action="store_true", help="skip the laptop experiment (tune --stand-ins)")
    parser.add_argument("--laptop-gpus", default="rtx3060-laptop-6g",
                        help="the simulated GPU of the laptop experiment (default rtx3060-laptop-6g)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    from dataclasses import replace

    from tui.core.demo.prepare import prepare_demo
    from tui.core.demo.tiny_model import PRESETS, write_tiny_model

    setup = prepare_demo()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    started = dt.datetime.now(dt.timezone.utc)
    load0 = os.getloadavg()[0]
    t_all = time.monotonic()
    blocks: list[tuple[int, list[Run], list[Run]]] = []
    with tempfile.TemporaryDirectory(prefix="mtp-bench-tune-") as tmp:
        root = Path(tmp)
        os.environ["MTP_TUNE_CONFIG_DIR"] = str(root / "config")
        os.environ["MTP_TUNE_DATA_DIR"] = str(root / "data")
        os.environ["LLAMA_CACHE"] = str(root / "llama-cache")
        if args.agree >= 1.0:
            model, model_text = setup.model, f"the demo's {setup.model.name} (draft acceptance 1.0)"
        else:
            model = write_tiny_model(root / "small-mtp-agree.gguf", replace(PRESETS["small-mtp-q8_0"], mtp_agree=args.agree))
            model_text = f"small-mtp-q8_0 with mtp_agree {args.agree}"
        for threads in (int(t) for t in args.threads.split(",")):
            base = Settings(model=str(model), batch_size=512, cache_type_k="f16", cache_type_v="f16", flash_attn="auto",
                            threads=threads, parallel=1, metrics=False)
            grids = [run_tune(f"grid {i + 1}", "every configuration", model, setup.server, base, VALUES, args.workload,
                              True, root / f"t{threads}g{i}") for i in range(args.grid_runs)]
            searches = []
            for i in range(args.search_runs):
                corner = i % 2 == 1
                searches.append(run_tune(f"search {i + 1}", "far corner" if corner else "defaults", model, setup.server,
                                         base, CORNER if corner else VALUES, args.workload, False,
                                         root / f"t{threads}s{i}"))
            blocks.append((threads, grids, searches))
        lap = None if args.no_laptop else laptop(setup, root, args.laptop_gpus)
    total = time.monotonic() - t_all
    if args.dump:
        Path(args.dump).write_text(json.dumps([{"threads": t, "name": r.name, "start": r.start, "launches": r.launches,
                                                "wall_s": r.wall_s, "records": [x.to_json() for x in r.records]}
                                               for t, gs, ss in blocks for r in [*gs, *ss]], indent=1, default=str))
    section, met = render(args, blocks, model_text, setup, commit, started, load0, total)
    if lap is not None:
        section += render_laptop(*lap)
    publish(HEADING, section, write=not args.no_write)
    return 0 if met else 1


def render(args: argparse.Namespace, blocks: list[tuple[int, list[Run], list[Run]]], model_text: str, setup: Any,
           commit: str, started: dt.datetime, load0: float, total: float) -> tuple[str, bool]:
    grid0 = blocks[0][1][0]
    n_on = sum(1 for r in grid0.records if r.mtp)
    lines = [
        f"### {started.strftime('%Y-%m-%d %H:%M UTC')}, commit {commit}", "",
        f"Command: `{Path(sys.executable).name} bench/bench_tune.py {' '.join(sys.argv[1:])}`.".replace(" `.", "`."),
        f"Machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs (shared with other "
        f"work), load average {load0:.2f} at start, {os.getloadavg()[0]:.2f} at the end; whole bench {total / 60:.1f} min.",
        f"Model: {model_text}, real CPU llama-server ({setup.server.parent.parent.name}); workload `{args.workload}` "
        f"(prompt:output tokens; the objective is seconds per request); fixed `-b 512 -ctk f16 -ctv f16 -fa auto -np 1`, "
        f"context {grid0.records[0].settings.get('ctx_size') if grid0.records else '?'} (the workload's).",
        f"Space: MTP on/off x draft n-max {{1..6}} x ubatch {{64,128,256,512}} x draft KV {{f16,q8_0}} = "
        f"{grid0.grid_size} configurations ({grid0.grid_size - n_on} MTP off, {n_on} MTP on), one launch each. Every "
        "candidate of every run is planned with llama.cpp's dry run first (exact mode); the grid measures each to 4 "
        "passes, the search races 2 then 4 passes. The search is deterministic: runs differ by start point (defaults: "
        "n-max 3, ubatch 512, draft KV f16; far corner: n-max 1, ubatch 64, q8_0) and by the machine's noise.",
        "A search reached the grid's best when its answer is, in the grid's own figures, the grid's fastest or the "
        "same within the noise (`probes.stats.verdict` on per-pass seconds per request, the rule the tuner uses); the "
        "median gap is shown too. Others' CPU: the share of the machine's CPU that other processes used during a run "
        "(/proc/stat less this bench's own and its children's), what makes a run noisy here; each run starts once "
        "others use under 10 % over 3 s (waiting 2 min at most).",
    ]
    met = True
    for threads, grids, searches in blocks:
        grid = grids[0]
        lines += ["", f"#### `-t {threads}`", "",
                  "| run | start | launches | wall | others' CPU | answer | its figures: s/request [range] (spread, passes) | "
                  "answer first measured after | best MTP on | best MTP off |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in [*grids, *searches]:
            reached = f"{r.reached_launches} launches, {r.reached_s:.0f} s" if r.reached_s is not None else "-"
            lines.append(f"| {r.name} | {r.start} | **{r.launches}** | {r.wall_s:.0f} s | {r.others_cpu:.0%} | {label(r.best)} | "
                         f"{figures(r.best)} | {reached} | {label(r.best_on)}: "
                         f"{fmt_seconds(r.best_on.e2e()) if r.best_on else '-'} | {label(r.best_off)}: "
                         f"{fmt_seconds(r.best_off.e2e()) if r.best_off else '-'} |")
        lead = ranking.leader(grid.records)
        lead_on = ranking.leader([r for r in grid.records if r.mtp])
        lines += ["", f"The grid's fastest: {label(lead)}, {figures(lead)}. The grid's answer (the cheapest within the "
                  f"noise of its fastest, the tuner's tie rule): {label(grid.best)}, {len(grid.same) + 1 if grid.best else 0} "
                  f"of {len(grid.records)} configurations within that noise. Its fastest with MTP on: {label(lead_on)}, "
                  f"{figures(lead_on)}.", "",
                  "| search | launches / grid's | wall / grid's | its answer, in the grid's figures | its answer vs the "
                  "grid's answer (each run's own passes) | its best MTP on, in the grid's figures (MTP-on side) |",
                  "|---|---|---|---|---|---|"]
        for s in searches:
            j, ok = judge(grid, s.best, None)
            jo, _ = judge(grid, s.best_on, True)
            ratio = s.launches / max(1, grid.launches)
            met = met and ok and ratio <= 1 / 3
            lines.append(f"| {s.name} ({s.start}) | {s.launches} / {grid.launches} = **{ratio:.2f}** | "
                         f"{s.wall_s:.0f} / {grid.wall_s:.0f} s = {s.wall_s / max(1e-9, grid.wall_s):.2f} | {j} | "
                         f"{cross(grid.best, s.best)} | {jo} |")
        if len(grids) > 1:
            j, _ = judge(grids[0], grids[1].best, None)
            lines += ["", f"The second grid's answer ({label(grids[1].best)}) in the first grid's figures: {j}."]
    ratios = [s.launches / max(1, g[0].launches) for _, g, ss in blocks for s in ss]
    reached = [judge(g[0], s.best, None)[1] for _, g, ss in blocks for s in ss]
    walls = [s.wall_s / max(1e-9, g[0].wall_s) for _, g, ss in blocks for s in ss]
    lines += ["", f"Goal (<= 1/3 of the grid's launches, reaching the grid's best within its noise): "
              f"**{'met' if met else 'not met'}**: launches {min(ratios):.2f}-{max(ratios):.2f} of the grid's, wall time "
              f"{min(walls):.2f}-{max(walls):.2f} of the grid's; {sum(reached)}/{len(reached)} searches reached the "
              "grid's best."]
    return "\n".join(lines) + "\n", met


if __name__ == "__main__":
    raise SystemExit(main())
