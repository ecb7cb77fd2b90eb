"""The estimate against the real llama-server on architectures beyond qwen35/qwen35moe: shape-only
GGUFs of real models (tests/helpers/archshapes.py) launched on the CPU build with -nr.

Asserted: weights, KV (iswa, MLA, GQA), draft KV, recurrent state and output within 0.02 MiB + 0.5 %
(the log prints 0.01 MiB); compute and draft compute within 35 % or 1 MiB (KNOWN_WIDE: the two known misses,
with their own band; bench/bench_planner_heldout.py measures the held-out band, see bench/RESULTS.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.archshapes import write_arch_shape
from tests.helpers.launch import probe_launch
from tui.core.options.argv import settings_from_argv
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.plan import plan
from tui.core.planning.reconcile import reconcile

pytestmark = pytest.mark.slow

COMMON = ["-t", "1", "-tb", "1", "--no-warmup", "-fit", "off"]
MTP = ["--spec-type", "draft-mtp"]
CASES = {
    # SWA layers keep pad(n_swa x 1 + ubatch, 256) cells per stream, the full layers all 8192
    "gemma3-iswa-2slots": ("gemma3-1b", ["-c", "16384", "-np", "2", "-ub", "256"]),
    "gemma3-swa-full": ("gemma3-1b", ["-c", "8192", "-np", "1", "--swa-full"]),
    "deepseek2-mla-k-only": ("deepseek-v2-lite", ["-c", "8192", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0"]),
    "deepseek2-mla-mtp": ("glm47-flash", ["-c", "4096", "-np", "1", *MTP, "-ctkd", "q8_0", "-ctvd", "q8_0"]),
    # CPU_REPACK: the Q4_0 matrices get their own host buffer, mmap or not
    "gemma3-qat-repack": ("gemma3-1b-qat", ["-c", "4096", "-np", "1", "--repack"]),
    "gemma3-qat-repack-no-mmap": ("gemma3-1b-qat", ["-c", "4096", "-np", "1", "--repack", "--load-mode", "none"]),
    "glm4moe-mtp": ("glm45-air", ["-c", "4096", "-np", "2", *MTP]),
    "qwen3next-no-rollback": ("qwen3-next-80b", ["-c", "4096", "-np", "1", *MTP, "--spec-draft-n-max", "3"]),
    # per-layer KV heads (8 on SWA layers, 4 on full ones), K and V of different widths, an SWA draft block
    "mimo2-iswa-mtp": ("mimo-v2-flash-r32", ["-c", "8192", "-np", "2", *MTP, "-ub", "256"]),
    "qwen3-plain-fa-off": ("qwen3-8b", ["-c", "8192", "-np", "1", "-fa", "off", "-ub", "256"]),
    # Mamba-2 state on 23 blocks, KV on the 6 attention blocks only, nothing on the MoE blocks
    "nemotron-h-moe-2slots": ("nemotron-h-moe-r32", ["-c", "4096", "-np", "2"]),
}
#: components the estimate is known to miss by more than the band here (bench/RESULTS.md says why):
#: the hybrids' fitted widths overestimate qwen3next's MTP block and nemotron-h; MoE peaks are not additive on mimo2
KNOWN_WIDE = {("qwen3next-no-rollback", "draft_compute"): 1.0, ("mimo2-iswa-mtp", "compute"): 0.5,
              ("nemotron-h-moe-2slots", "compute"): 0.5}
EXACT = ("weights", "kv", "draft_kv", "recurrent", "output")


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("archshapes")
    return {n: write_arch_shape(n, root / f"{n}.gguf") for n in sorted({m for m, _ in CASES.values()})}


@pytest.mark.parametrize("case", list(CASES))
def test_arch_launch_matches_estimate(case: str, server_bin: Path, shapes: dict[str, Path]) -> None:
    name, args = CASES[case]
    model = shapes[name]
    args = args if "--repack" in args else [*args, "-nr"]  # repacking a big shape reads gigabytes of zeros
    res = probe_launch(server_bin, ["-m", str(model), *args, *COMMON], timeout_s=240)
    assert res.ready, f"llama-server did not get ready:\n{res.log[-3000:]}"
    meta = read_gguf(model)
    p = plan(meta, settings_from_argv(["-m", str(model), *args, *COMMON]).settings, [])
    rec = reconcile(p, res.report)
    bad = []
    for d in rec.diffs:
        band = KNOWN_WIDE.get((case, d.component), 0.35)
        tol = 0.02 + 0.005 * d.reported_mib if d.component in EXACT else max(1.0, band * d.reported_mib)
        if abs(d.error_mib) > tol:
            bad.append(d.to_dict())
    assert not bad, bad
    got = {d.component: d.reported_mib for d in rec.diffs}
    assert got["kv"] > 0 and got["weights"] > 0
    if "--spec-type" in args:
        assert got["draft_kv"] > 0
