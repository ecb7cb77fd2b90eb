"""Build llama-server, llama-fit-params and ggml-rpc-server with CUDA from the carried sdist.

The product's CPU build flags (tui/core/server/provision.py) are reused, plus CUDA for the local
architecture only, the default FlashAttention type pairs without bf16 (the matrix uses f16, q8_0 and
q4_0), no fatbin compression and no NCCL: each cuts nvcc work without changing what is measured.
Resumable: an existing build folder is configured once and Ninja continues where a killed call stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

from bench.gpu_check import adapter
from bench.gpu_check.budget import BudgetClock

TARGETS: tuple[str, ...] = ("llama-server", "llama-fit-params", "ggml-rpc-server")
CUDA_FLAGS: tuple[str, ...] = (
    "-DGGML_CUDA=ON",
    "-DGGML_CUDA_FA_ALL_QUANTS=OFF",
    "-DGGML_CUDA_FA_QUANTS=q4_0-q4_0,q8_0-q8_0,f16-f16",  # the default without bf16-bf16
    "-DGGML_CUDA_COMPRESSION_MODE=none",
    "-DGGML_CUDA_NCCL=OFF",
)


def sdist_name() -> str:
    return f"{adapter.SDIST_NAME.replace('-', '_')}-{adapter.SDIST_VERSION}.tar.gz"


def cmake_args(src: Path, bdir: Path, arch: str) -> list[str]:
    """The configure command: the product's flags, then the CUDA ones (later -D entries win).

    A numeric arch gets `-real`: SASS for this card only, no PTX for later ones to JIT.
    """
    archs = f"{arch}-real" if arch.isdigit() else arch
    return ["cmake", "-S", str(src), "-B", str(bdir), "-G", "Ninja", *adapter.BUILD_FLAGS, *CUDA_FLAGS,
            f"-DCMAKE_CUDA_ARCHITECTURES={archs}"]


def build_args(bdir: Path, jobs: int) -> list[str]:
    return ["cmake", "--build", str(bdir), "-j", str(jobs), "--target", *TARGETS]


def plan(sdist: Path, work: Path, arch: str, jobs: int) -> dict[str, Any]:
    """What `build` runs, without running it (the dry mode's record, and the first lines of the log)."""
    src = work / "src" / f"{adapter.SDIST_NAME.replace('-', '_')}-{adapter.SDIST_VERSION}" / "llama.cpp"
    bdir = work / "cuda-build"
    return {"sdist": str(sdist), "src": str(src), "build_dir": str(bdir), "bin_dir": str(bdir / "bin"),
            "arch": arch, "jobs": jobs, "targets": list(TARGETS),
            "configure": cmake_args(src, bdir, arch), "build": build_args(bdir, jobs)}


def _run(cmd: list[str], log: Any, timeout: float) -> tuple[int, float]:
    t0 = time.monotonic()
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    try:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        rc = 124
    return rc, round(time.monotonic() - t0, 1)


def build(sdist: Path, work: Path, arch: str, jobs: int, clock: BudgetClock, log_path: Path) -> dict[str, Any]:
    """Extract, configure and build; returns the record (phase times, rc, binaries). Never raises on
    a failed step: the record says which step failed, with the log's last lines."""
    rec = _build(sdist, work, arch, jobs, clock, log_path)
    if not rec["ok"] and log_path.is_file():
        rec["log_tail"] = log_path.read_text(errors="replace").splitlines()[-30:]
    return rec


def _build(sdist: Path, work: Path, arch: str, jobs: int, clock: BudgetClock, log_path: Path) -> dict[str, Any]:
    rec = plan(sdist, work, arch, jobs)
    src, bdir = Path(rec["src"]), Path(rec["build_dir"])
    rec["phases"] = {}
    rec["ok"] = False
    if not sdist.is_file():
        rec["error"] = f"{sdist}: the sdist is not there (carry .whl, see docs/gpu-check.md)"
        return rec
    for tool in ("cmake", "ninja", "nvcc"):
        if not shutil.which(tool):
            rec["error"] = f"{tool} is not on PATH"
            return rec
    with open(log_path, "a") as log:
        if not (src / "CMakeLists.txt").is_file():
            t0 = time.monotonic()
            with tarfile.open(sdist) as tf:
                tf.extractall(work / "src", filter="data")
            rec["phases"]["extract_s"] = round(time.monotonic() - t0, 1)
        if not (bdir / "build.ninja").is_file():
            rc, dt = _run(rec["configure"], log, clock.timeout(180))
            rec["phases"]["configure_s"] = dt
            if rc != 0:
                rec["error"] = f"cmake configure failed (exit {rc}); see {log_path.name}"
                return rec
        rc, dt = _run(rec["build"], log, clock.timeout(3600))
        rec["phases"]["build_s"] = dt
        if rc != 0:
            rec["error"] = ("the build ran out of time; run the same command again to continue (Ninja resumes)"
                            if rc == 124 else f"the build failed (exit {rc}); see {log_path.name}")
            return rec
    missing = [t for t in TARGETS if not os.access(bdir / "bin" / t, os.X_OK)]
    if missing:
        rec["error"] = f"built, but {', '.join(missing)} not produced"
        return rec
    rec["ok"] = True
    rec["binary_mib"] = {t: round((bdir / "bin" / t).stat().st_size / 2**20, 1) for t in TARGETS}
    (bdir / "bin" / "gpu-check-build.json").write_text(json.dumps(rec, indent=1))
    return rec
