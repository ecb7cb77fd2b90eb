"""A Hub repo of Qwen3.6-35B-A3B quants, shape-only: what `mtp-tune variants` is tested and shown on.

Each quant is the real tensor table of the 35B-A3B shape (tests/helpers/shapemodel.py) with the
tensor types a quant of that name uses, so the file sizes and every planned figure are the real
model's; the files are sparse (~20-35 GB apparent, ~12 MB of header on disk each). `fixed_host`
pins the host RAM the planner sees, so a table does not depend on the machine that made it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from gguf import GGMLQuantizationType as QT

from tests.helpers.shapemodel import ShapeSpec, write_shape_model

REPO = "unsloth-like/Qwen3.6-35B-A3B-GGUF"
STEM = "Qwen3.6-35B-A3B"

#: quant name -> the tensor types of the shape (experts, attention/SSM projections, embeddings, output)
QUANTS: dict[str, ShapeSpec] = {
    "Q8_0": ShapeSpec(expert_type=QT.Q8_0, proj_type=QT.Q8_0, embd_type=QT.Q8_0, output_type=QT.Q8_0),
    "Q6_K": ShapeSpec(expert_type=QT.Q6_K, proj_type=QT.Q8_0, embd_type=QT.Q6_K, output_type=QT.Q6_K),
    "Q5_K_M": ShapeSpec(expert_type=QT.Q5_K, proj_type=QT.Q6_K, embd_type=QT.Q5_K, output_type=QT.Q6_K),
    "Q4_K_M": ShapeSpec(),  # the shape's own default types
    "IQ4_XS": ShapeSpec(expert_type=QT.IQ4_XS, proj_type=QT.Q6_K, embd_type=QT.IQ4_XS, output_type=QT.Q6_K),
}


def quant_name(tag: str) -> str:
    return f"{STEM}-{tag}.gguf"


def write_quants(dest: Path, tags: list[str] | None = None) -> dict[str, Path]:
    """The quants' shape files under `dest` (written once; about a second each): repo path -> file."""
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for tag in tags or list(QUANTS):
        p = dest / quant_name(tag)
        if not p.exists():
            write_shape_model(p, QUANTS[tag])
        out[p.name] = p
    return out


@contextmanager
def fixed_host(total_mib: int = 65536, free_mib: int = 61440) -> Iterator[None]:
    """Every telemetry pass in this process sees this much host RAM (default: 64 GiB, 60 GiB free)."""
    from tui.core.gpu.types import HostMemory

    with mock.patch("tui.core.gpu.collect.read_host_memory", lambda *a, **k: HostMemory(total_mib, free_mib)):
        yield
