"""Planner speed: metadata read of the ~20 GB shape-only Qwen3.6-35B-A3B GGUF, and a re-plan after
one knob changes. Goals: read < 300 ms, re-plan < 16 ms. Appends to bench/RESULTS.md.

    .venv/bin/python bench/bench_planner_speed.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _results import append_under  # noqa: E402

from tui.core.planning.gguf_reader import read_gguf  # noqa: E402
from tui.core.planning.devices import DeviceSpec  # noqa: E402
from tui.core.planning.plan import plan  # noqa: E402
from tui.core.options.settings import Settings  # noqa: E402
from tests.helpers.archshapes import write_arch_shape  # noqa: E402
from tests.helpers.shapemodel import write_shape_model  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = "## Memory planner"


def timed(fn, n: int) -> list[float]:  # noqa: ANN001
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def append_section(text: str) -> None:
    """Append under the "## Memory planner" heading; other sections stay."""
    append_under(HEADING, text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keep", type=Path, help="directory for the shape file (default: a temp dir)")
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    tmp = a.keep or Path(tempfile.mkdtemp(prefix="mtp-bench-planner-"))
    path = tmp / "qwen36-35b-a3b-shape.gguf"
    if not path.exists():
        write_shape_model(path)
    size_gib = path.stat().st_size / 2**30
    read_gguf(path)  # warm the page cache for the header (first read from disk is I/O, not parsing)
    reads = timed(lambda: read_gguf(path), 15)
    meta = read_gguf(path)
    devs = [DeviceSpec("CUDA0", "RTX 3090", 24576, 24316)]
    two = [DeviceSpec("CUDA0", "V100", 16384, 16084), DeviceSpec("CUDA1", "V100", 16384, 16084)]
    base = Settings(ctx_size=65536, parallel=1, spec_type=["draft-mtp"], cache_type_k="q8_0", cache_type_v="q8_0")
    knobs = [replace(base, ctx_size=c) for c in (32768, 65536, 98304, 131072)] + \
            [replace(base, spec_draft_n_max=n) for n in (1, 2, 4, 6)] + [replace(base, ubatch_size=u) for u in (256, 1024)]
    i = 0

    def replan() -> None:
        nonlocal i
        plan(meta, knobs[i % len(knobs)], devs)
        i += 1

    replans = timed(replan, 200)
    replans_two = timed(lambda: plan(meta, replace(base, tensor_split=[1, 1]), two), 100)
    fit_auto = timed(lambda: plan(meta, Settings(parallel=1, spec_type=["draft-mtp"]), devs), 30)
    # the structural compute model and per-layer SWA/MLA closed forms on other architectures
    others = {}
    for name in ("gemma3-12b", "glm47-flash"):
        m = read_gguf(write_arch_shape(name, tmp / f"{name}.gguf"))
        mtp = ["draft-mtp"] if m.hparams.n_nextn else []
        ks = [replace(base, ctx_size=c, spec_type=mtp) for c in (32768, 65536, 131072)]
        others[name] = timed(lambda m=m, ks=ks: plan(m, ks[len(others) % 3], devs), 100)
    med = statistics.median
    p95 = lambda xs: sorted(xs)[int(0.95 * (len(xs) - 1))]  # noqa: E731
    lines = [
        "### Speed (bench/bench_planner_speed.py)",
        "",
        f"Command: `.venv/bin/python bench/bench_planner_speed.py` on {platform.node() or 'this machine'} "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()}), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| measurement | median ms | p95 ms | goal |",
        "|---|---|---|---|",
        f"| GGUF header read, shape-only Qwen3.6-35B-A3B ({size_gib:.1f} GiB apparent, 248,320 tokens, 247,587 merges, "
        f"{len(meta.tensors)} tensors), page cache warm | {med(reads):.1f} | {p95(reads):.1f} | < 300 |",
        f"| re-plan after one knob change (1 GPU, fit check) | {med(replans):.3f} | {p95(replans):.3f} | < 16 |",
        f"| re-plan, 2 GPUs -ts 1,1 | {med(replans_two):.3f} | {p95(replans_two):.3f} | < 16 |",
        f"| plan with -c unset (the expected --fit search re-plans several times) | {med(fit_auto):.2f} | {p95(fit_auto):.2f} | < 16 |",
        *(f"| re-plan, {n} shape (1 GPU) | {med(v):.3f} | {p95(v):.3f} | < 16 |" for n, v in others.items()),
    ]
    text = "\n".join(lines)
    print(text)
    if not a.no_write:
        append_section(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
