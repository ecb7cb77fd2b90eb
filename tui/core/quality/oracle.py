"""Running `llama-perplexity`, the quality oracle: one bounded pass, its version, its options.

Why a pass runs like the server does: the binary is started by the product's spawner (own process
group, parent-death signal), registered so it is stopped with mtp-tune (atexit, SIGTERM, Ctrl-C), its
output pumped by `process.pump_output` into a bounded tail, and every wait is bounded (`timeout`) and
cancellable. Nothing here interprets the figures: `parse` reads what llama-perplexity printed.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tui.core.server.binary import parse_help, parse_version
from tui.core.server.process import child_env, kill_group, pump_output, register, unregister
from tui.core.server.spawn import SpawnError, spawn

#: lines of a pass's output kept (the statistics block and the perf print fit well inside)
TAIL_LINES = 400
#: longest line kept (the reference pass prints `[1]12.3,[2]...` on one line, one entry per chunk)
LINE_CHARS = 4000
#: `--version` and `--help` answer at once; a binary that does not is not llama-perplexity
QUICK_TIMEOUT_S = 30.0


class OracleError(RuntimeError):
    """llama-perplexity could not be run or did not finish; one sentence naming the file or flag."""


@dataclass(frozen=True)
class PassOutput:
    """What one llama-perplexity run left: its exit code, wall seconds and the tail of its output."""

    argv: tuple[str, ...]
    returncode: int
    seconds: float
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


class _Running:
    """A started pass, registered so mtp-tune's exit (or a signal) stops its process group."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.proc = spawn(list(argv), env=child_env())
        self.ended = threading.Event()
        self.returncode: int | None = None
        register(self)

    def _terminate_now(self, grace: float) -> None:
        kill_group(self.proc, grace, ended=self.ended.wait)


def run_pass(argv: Sequence[str], *, timeout: float, on_line: Callable[[str], None] | None = None,
             cancel: threading.Event | None = None) -> PassOutput:
    """Run `argv` (a llama-perplexity command) to its end, at most `timeout` seconds.

    `on_line` sees each output line as it comes (stdout and stderr merged); a set `cancel` or the
    timeout kills the process group and raises OracleError, as does a binary that cannot start."""
    exe = str(argv[0])
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

    def line(raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")[:LINE_CHARS]
        tail.append(text)
        if on_line is not None:
            on_line(text)

    started = time.monotonic()
    try:
        child = _Running(argv)
    except (OSError, SpawnError) as exc:
        raise OracleError(f"{exe} cannot be started ({exc}); check --perplexity-bin or "
                          "`mtp-tune doctor`.") from None

    def pump() -> None:
        try:
            child.returncode = pump_output(child.proc, None, line)
        finally:
            child.ended.set()

    threading.Thread(target=pump, name="llama-perplexity-output", daemon=True).start()
    deadline = started + timeout
    why = ""
    try:
        while not child.ended.wait(0.2):
            if cancel is not None and cancel.is_set():
                why = "cancelled"
                break
            if time.monotonic() > deadline:
                why = f"did not finish within {timeout:g} s"
                break
    finally:
        if not child.ended.is_set():  # a timeout, a cancel, or Ctrl-C in the caller's thread
            kill_group(child.proc, 2.0, ended=child.ended.wait)
        unregister(child)
    if why:
        raise OracleError(f"{Path(exe).name} {why}" + (" (raise --pass-timeout for a large model)."
                                                        if why != "cancelled" else "."))
    return PassOutput(tuple(str(a) for a in argv), child.returncode if child.returncode is not None else -1,
                      round(time.monotonic() - started, 2), tuple(tail))


def _quick(path: Path, arg: str) -> str:
    out = run_pass([str(path), arg], timeout=QUICK_TIMEOUT_S)
    if out.returncode == 127 or "error while loading shared libraries" in out.text:
        raise OracleError(f"{path} cannot start: {out.lines[-1] if out.lines else 'exit 127'}.")
    return out.text


@dataclass(frozen=True)
class OracleInfo:
    """The llama-perplexity in use: where, its build number and commit, the options it accepts."""

    path: Path
    build: int | None
    commit: str | None
    options: frozenset[str]

    @property
    def version_string(self) -> str:
        if self.build is None:
            return "unknown"
        return f"b{self.build}" + (f" ({self.commit})" if self.commit else "")


def oracle_version(path: str | Path) -> tuple[int | None, str | None]:
    """(build number, commit) from `llama-perplexity --version` (llama.cpp's common version line)."""
    return parse_version(_quick(Path(path), "--version"))


def oracle_info(path: str | Path) -> OracleInfo:
    """Its version and the option spellings its `--help` lists (the common argument table's format)."""
    p = Path(path)
    build, commit = oracle_version(p)
    options = parse_help(_quick(p, "--help"))
    if "--kl-divergence-base" not in options:
        raise OracleError(f"{p} --help lists no --kl-divergence-base: this is not llama-perplexity, or one too old "
                          "to measure KL divergence.")
    return OracleInfo(p, build, commit, options)
