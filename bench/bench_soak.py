"""Soak the TUI: N minutes of continuous probing in the demo, mtp-tune's RSS and CPU sampled over time.

Goal (issue 14): memory stays flat (bounded buffers), so an overnight sweep does not keep growing.
Everything is real: `mtp-tune --demo` in a private tmux server (a real terminal, 120x40), the demo's
CPU llama-server; a new probe run starts as soon as the previous one is on screen. Every `--sample-s`
seconds the mtp-tune process's RSS (/proc/PID/status VmRSS) and CPU time are read. The slope is a
least-squares line through the samples after the warm-up (the first probe runs import modules and
fill caches that then stay), in MB per hour. Appends to bench/RESULTS.md under "## Soak".

    .venv/bin/python bench/bench_soak.py [--minutes 30] [--warmup-minutes 2] [--source DIR] [--label TEXT]
        [--no-write]

`--source DIR` runs the `tui` package found in DIR (e.g. a copy of an older tree) instead of this
checkout's, to measure before and after a change on the same machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import publish  # noqa: E402
from bench_ui import SUITE, Term, base_env, cpu_seconds  # noqa: E402

HEADING = "## Soak"
#: The probe panel's line when a run is over: "ok: 6 request(s), run 12".
RUN_DONE = re.compile(r"(\w+): (\d+) request\(s\), run (\d+)")
RUN_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Sample:
    t_s: float  # since the first sample
    rss_mb: float  # VmRSS: all resident pages
    anon_mb: float  # RssAnon: the heap (what a leak grows; file pages come and go with the page cache)
    cpu_s: float
    runs: int


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, RssAnon) of `pid` in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024.0, int(fields["RssAnon"].split()[0]) / 1024.0


def slope_mb_per_hour(samples: list[Sample], attr: str = "anon_mb") -> float:
    """Least-squares slope of `attr` over time."""
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(s.t_s for s in samples) / n
    mr = sum(getattr(s, attr) for s in samples) / n
    var = sum((s.t_s - mt) ** 2 for s in samples)
    if var == 0:
        return 0.0
    cov = sum((s.t_s - mt) * (getattr(s, attr) - mr) for s in samples)
    return cov / var * 3600.0


def soak(root: Path, env: dict[str, str], minutes: float, sample_s: float, n_predict: int, suite: str,
         progress: bool = True) -> tuple[list[Sample], int]:
    """Launch the demo, then probe continuously for `minutes`; returns the samples and the pid."""
    term = Term(root, env, ["--demo", "--suite", suite, "--probe-repeat", "1", "--probe-n-predict", str(n_predict)])
    samples: list[Sample] = []
    try:
        term.start()
        term.wait("READY", 300, poll=0.5)
        pid = term.pid()
        runs, last_run = 0, None
        t0 = time.monotonic()
        end = t0 + minutes * 60.0
        next_sample = t0
        term.keys("p")
        run_deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            now = time.monotonic()
            if now >= next_sample:
                samples.append(Sample(now - t0, *memory_mb(pid), cpu_seconds(pid), runs))
                next_sample += sample_s
                if progress:
                    s = samples[-1]
                    print(f"  {s.t_s / 60:5.1f} min  RSS {s.rss_mb:6.1f} MB  anon {s.anon_mb:6.1f} MB  "
                          f"CPU {s.cpu_s:7.1f} s  runs {runs}", flush=True)
            if now >= end:
                break
            match = RUN_DONE.search(term.screen())
            if match and match.group(3) != last_run:
                last_run = match.group(3)
                runs += 1
                term.keys("p")
                run_deadline = time.monotonic() + RUN_TIMEOUT_S
            elif now > run_deadline:
                raise SystemExit(f"bench_soak: no probe run finished in {RUN_TIMEOUT_S:.0f} s:\n{term.screen()}")
            time.sleep(0.5)
        term.keys("q")
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        term.close()
    return samples, pid


def summarise(samples: list[Sample], warmup_s: float) -> dict[str, float]:
    after = [s for s in samples if s.t_s >= warmup_s] or samples
    first, last = samples[0], samples[-1]
    wall = last.t_s - first.t_s
    half = [x for x in samples if x.t_s >= wall / 2.0] or samples
    runs_after = after[-1].runs - after[0].runs
    half_runs = half[-1].runs - half[0].runs
    return {
        "minutes": wall / 60.0,
        "rss_start": first.rss_mb, "rss_end": last.rss_mb, "rss_max": max(s.rss_mb for s in samples),
        "anon_start": first.anon_mb, "anon_end": last.anon_mb, "anon_max": max(s.anon_mb for s in samples),
        "anon_after_warmup": after[0].anon_mb,
        "slope_all": slope_mb_per_hour(samples), "slope_after_warmup": slope_mb_per_hour(after),
        "rss_slope_after_warmup": slope_mb_per_hour(after, "rss_mb"),
        "cpu_percent": 100.0 * (last.cpu_s - first.cpu_s) / wall if wall > 0 else 0.0,
        "runs": float(last.runs),
        # The second half alone: bounded caches (Rich's, Textual's, SQLite's) fill in the first
        # hundreds of runs; what still grows in the second half is what an overnight session keeps.
        "slope_second_half": slope_mb_per_hour(half), "half_from_min": half[0].t_s / 60.0,
        "kb_per_run_after_warmup": (after[-1].anon_mb - after[0].anon_mb) * 1024.0 / runs_after if runs_after else 0.0,
        "kb_per_run_second_half": (half[-1].anon_mb - half[0].anon_mb) * 1024.0 / half_runs if half_runs else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to probe (default 30)")
    parser.add_argument("--warmup-minutes", type=float, default=2.0, help="left out of the slope (default 2)")
    parser.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples (default 10)")
    parser.add_argument("--n-predict", type=int, default=64, help="tokens per probe request (default 64)")
    parser.add_argument("--suite", help="probe suite (default: two short prompts; `tasks` is the demo's own)")
    parser.add_argument("--source", type=Path, help="a directory holding the `tui` package to run instead")
    parser.add_argument("--label", default="", help="what was measured (e.g. 'before: unbounded log tail')")
    parser.add_argument("--csv", type=Path, help="also write the samples here")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.minutes <= 0:
        raise SystemExit("bench_soak: --minutes must be positive")
    if shutil.which("tmux") is None:
        raise SystemExit("bench_soak: tmux is required")

    from tui.core.demo.prepare import prepare_demo

    setup = prepare_demo()
    load = os.getloadavg()[0]
    started = dt.datetime.now(dt.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="mtp-bench-soak-") as tmp:
        root = Path(tmp)
        env = base_env(root, setup.server)
        if args.source is not None:
            env["PYTHONPATH"] = str(args.source.resolve())
        suite = args.suite
        if suite is None:
            suite = str(root / "soak.toml")
            Path(suite).write_text(SUITE)  # two short prompts: probe runs come often
        samples, _pid = soak(root, env, args.minutes, args.sample_s, args.n_predict, suite)
    if args.csv:
        args.csv.write_text("t_s,rss_mb,anon_mb,cpu_s,runs\n" + "".join(
            f"{s.t_s:.1f},{s.rss_mb:.2f},{s.anon_mb:.2f},{s.cpu_s:.2f},{s.runs}\n" for s in samples))
    r = summarise(samples, args.warmup_minutes * 60.0)
    label = f" ({args.label})" if args.label else ""
    section = f"""
### {started.strftime('%Y-%m-%d %H:%M UTC')}{label}

Command: `{shlex.join([Path(sys.executable).name, *sys.argv])}`  
Ran for **{r['minutes']:.1f} minutes** of continuous probing ({int(r['runs'])} probe runs of the
{args.suite or 'two-prompt'} suite, one pass, {args.n_predict} tokens per request) in `mtp-tune --demo` (tmux 120x40, real CPU llama-server, {setup.model.name}).
Machine: {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load:.2f}
at start (shared with other work). Memory of the mtp-tune process sampled every {args.sample_s:.0f} s: the heap
(RssAnon, what a leak grows) and all resident pages (VmRSS, whose file-backed part the kernel drops and
reloads as the shared machine's page cache churns).

| measure | result | goal |
|---|---|---|
| heap (RssAnon) at start -> end, MB | {r['anon_start']:.1f} -> {r['anon_end']:.1f} (max {r['anon_max']:.1f}) | |
| heap slope after the first {args.warmup_minutes:g} min (from {r['anon_after_warmup']:.1f} MB), MB/hour | {r['slope_after_warmup']:+.2f} | |
| heap slope over the second half (from minute {r['half_from_min']:.0f}), MB/hour | **{r['slope_second_half']:+.2f}** | flat (< 1) |
| heap growth per probe run: after the warm-up; second half, KB | {r['kb_per_run_after_warmup']:+.1f}; {r['kb_per_run_second_half']:+.1f} | |
| heap slope over the whole run, MB/hour | {r['slope_all']:+.2f} | |
| VmRSS at start -> end, MB; slope after the warm-up, MB/hour | {r['rss_start']:.1f} -> {r['rss_end']:.1f} (max {r['rss_max']:.1f}); {r['rss_slope_after_warmup']:+.2f} | |
| CPU of mtp-tune while probing, % of one core | {r['cpu_percent']:.1f} | |
"""
    publish(HEADING, section, write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
