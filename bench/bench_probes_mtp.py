"""MTP on vs off on a generated model, measured by `mtp-tune probe` and judged by `mtp-tune runs compare`.

Usage: python bench/bench_probes_mtp.py [--preset small-mtp-q8_0] [--repeat 3] [--n-predict 512] [--no-write]

Runs three configurations through the real CLI (each launches llama-server under the supervisor, probes
the `tasks` suite, stores the run): MTP off; MTP on (n-max 3); MTP on with a q8_0 draft KV, ubatch 256
and fit-target 512. Then prints `runs compare OFF ON --workload 2000,800` and `runs export ... --format md`,
and appends both, with the commands, to bench/RESULTS.md under "Probes".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tui.cli import main as cli  # noqa: E402
from tui.core.demo.tiny_model import PRESETS, write_tiny_model  # noqa: E402

CONFIGS: tuple[tuple[str, list[str]], ...] = (
    ("MTP off", []),
    ("MTP on", ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]),
    ("MTP on, q8_0 draft KV, ub 256, fitt 512",
     ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "-ctkd", "q8_0", "-ctvd", "q8_0", "-ub", "256",
      "-fitt", "512"]),
)


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli(argv)
    return rc, out.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small-mtp-q8_0")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n-predict", type=int, default=512)
    ap.add_argument("--workload", default="2000,800")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="mtp-bench-probes-"))
    os.environ["MTP_TUNE_DATA_DIR"] = str(tmp / "data")
    os.environ["XDG_CONFIG_HOME"] = str(tmp / "xdg")
    model = write_tiny_model(tmp / f"{args.preset}.gguf", PRESETS[args.preset])
    db = str(tmp / "data" / "results.sqlite")
    ids: list[int] = []
    commands: list[str] = []
    started = time.time()
    load = os.getloadavg()[0]
    for _name, extra in CONFIGS:
        argv = ["probe", "--db", db, "--repeat", str(args.repeat), "--n-predict", str(args.n_predict), "--json",
                "-m", str(model), "-c", "4096", *extra]
        commands.append("mtp-tune " + " ".join(a if a != str(model) else f"{args.preset}.gguf" for a in argv if a not in ("--db", db)))
        rc, out = _run(argv)
        data = json.loads(out)
        if rc != 0:
            print(f"probe failed: {data.get('error')}", file=sys.stderr)
            return 1
        ids.append(int(data["run_id"]))
        print(f"run {data['run_id']}: TG {data['summary']['tg_tps']}", file=sys.stderr)
    took = time.time() - started
    _, compare = _run(["runs", "--db", db, "compare", str(ids[0]), str(ids[1]), "--workload", args.workload])
    _, table = _run(["runs", "--db", db, "export", *map(str, ids), "--format", "md"])
    print(compare)
    print(table)
    if args.no_write:
        return 0
    section = [
        "",
        f"## Probes: MTP on vs off ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)",
        "",
        f"Command: `python bench/bench_probes_mtp.py --preset {args.preset} --repeat {args.repeat} "
        f"--n-predict {args.n_predict}` ({took / 60:.1f} min; CPU llama-server b11434 built -O1, `-t 1`; "
        f"load average {load:.2f} at start on {os.cpu_count()} CPUs; {platform.machine()}, Python {platform.python_version()}).",
        "The probes it ran:",
        "",
        *[f"    {c}" for c in commands],
        "",
        f"`mtp-tune runs compare {ids[0]} {ids[1]} --workload {args.workload}`:",
        "",
        "```",
        compare.rstrip(),
        "```",
        "",
        f"`mtp-tune runs export {' '.join(map(str, ids))} --format md`:",
        "",
        table.rstrip(),
        "",
    ]
    with open(ROOT / "bench" / "RESULTS.md", "a", encoding="utf-8") as f:
        f.write("\n".join(section) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
