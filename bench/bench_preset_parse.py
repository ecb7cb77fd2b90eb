"""Time the `--models-preset` INI reader on big and hostile files: long blank runs, a 1 MB line, 100k sections.

Why: every INI read (the form's preset view, `profile import`, `preset check`) goes through
tui/core/presets/parse.py, and a value with 40k blanks once took 17.6 s (issue 29: the value pattern
looked ahead over every blank run from every blank, quadratic). Goal: a 1 MB line and 100k sections
in about a second. `scan` is the line splitter alone; `parse` adds the per-section checks (unknown keys,
duplicates, the form's validator per model). Each case runs in its own process under a time limit, so
a quadratic parser reports "over N s" instead of hanging the bench. Appends to bench/RESULTS.md.

    .venv/bin/python bench/bench_preset_parse.py [--source DIR] [--label TEXT] [--limit 60] [--no-write]

`--source DIR`: import `tui` from DIR instead of this checkout (to time an older parser).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import publish  # noqa: E402

HEADING = "## Preset parser (issue 29)"

#: name -> (what the file is, Python expression building its text)
CASES: dict[str, tuple[str, str]] = {
    "blanks-40k": ("a value with 40k blanks inside", "'[m]\\nmodel = a' + ' ' * 40_000 + 'b.gguf\\n'"),
    "blanks-200k": ("a value with 200k blanks inside", "'[m]\\nmodel = a' + ' ' * 200_000 + 'b.gguf\\n'"),
    "line-1mb-blanks": ("a 1 MB line of blanks inside a value", "'[m]\\nmodel = a' + ' ' * 1_000_000 + 'b.gguf\\n'"),
    "line-1mb-text": ("a 1 MB value of letters", "'[m]\\nmodel = ' + 'a' * 1_000_000 + '.gguf\\n'"),
    "line-1mb-invalid": ("a 1 MB line that is not key = value", "'[m]\\n' + ' ' * 1_000_000 + 'x\\n'"),
    "headers-unclosed": ("20k '[' lines with no ']' anywhere", "'[m\\n' * 20_000"),
    "sections-100k": ("100k sections, 2 keys each", "''.join(f'[m{i}]\\nmodel = m{i}.gguf\\nctx-size = 4096\\n' for i in range(100_000))"),
}

_CHILD = """
import sys, time
sys.path.insert(0, {source!r})
from tui.core.presets.parse import parse_preset, scan
text = {expr}
t0 = time.perf_counter(); lines, _ = scan(text); t1 = time.perf_counter()
pf = parse_preset(text); t2 = time.perf_counter()
print(len(text), len(lines), len(pf.sections), t1 - t0, t2 - t1)
"""


def run_case(expr: str, source: str, limit: float) -> str:
    """One case in a child process: 'size, scan s, parse s', or how long it ran before being stopped."""
    code = _CHILD.format(source=source, expr=expr)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=limit, check=True)
    except subprocess.TimeoutExpired:
        return f"| over {limit:.0f} s (stopped) | | |"
    except subprocess.CalledProcessError as e:
        return f"| failed: {e.stderr.strip().splitlines()[-1] if e.stderr.strip() else e.returncode} | | |"
    size, nlines, nsec, t_scan, t_parse = out.stdout.split()
    return f"| {int(size) / 1e6:.2f} MB, {nlines} lines, {nsec} sections | {float(t_scan):.3f} s | {float(t_parse):.3f} s |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=str(ROOT), help="directory holding the tui package to time")
    ap.add_argument("--label", default="", help="what the source is (e.g. 'before')")
    ap.add_argument("--limit", type=float, default=60.0, help="seconds a case may run before it is stopped")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="run only these cases")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    label = f" ({args.label})" if args.label else ""
    rows = ["| case | input | scan | parse (scan + checks) |", "|---|---|---|---|"]
    for name in args.case or list(CASES):
        what, expr = CASES[name]
        rows.append(f"| {name}: {what} {run_case(expr, os.path.abspath(args.source), args.limit)}")
    head = f"### {stamp}{label}, Python {platform.python_version()}, {os.cpu_count()} cores (shared)"
    publish(HEADING, head + "\n\n" + "\n".join(rows), write=not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
