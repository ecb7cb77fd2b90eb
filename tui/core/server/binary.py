"""What an installed llama-server binary is and what it accepts, from `--version` and `--help`.

The rest of the app asks this module whether `draft-mtp`, `-ctkd`, `--fit-target` or `--load-mode`
exist in the user's build, instead of assuming the newest llama.cpp (`options.SERVER_OPTIONS` was
taken from one build; the user's may be older or newer). `--help` runs once per binary: its text is
cached by path, size and mtime, so the probe, the validator and `mtp-tune profile` share one run.

`--help` prints one entry per option starting at column 0: the spellings joined by ", " (the first
padded after its comma), then an optional value hint, then the help text; continuation lines are
indented (arg.cpp:184-220).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tui.core.server.process import child_env

#: `version: 4567 (abc123f)` (older builds) or `version: 0.6.0-dev (build 11434, commit abc123f)`.
VERSION_RE = re.compile(r"version:\s*(\d+)\s*\(([0-9a-zA-Z_.-]+)\)")
VERSION_NEW_RE = re.compile(r"version:\s*(\S+)\s*\(build\s+(\d+),\s*commit\s+([^)\s]+)\)")
BUILT_WITH_RE = re.compile(r"built with (.+)")


class ServerProbeError(RuntimeError):
    """The binary could not be run or does not look like llama-server."""


@dataclass(frozen=True)
class ServerInfo:
    path: Path
    version: int | None
    commit: str | None
    built_with: str | None
    options: frozenset[str] = field(default_factory=frozenset)
    spec_types: tuple[str, ...] = ()

    @property
    def version_string(self) -> str:
        if self.version is None:
            return "unknown"
        return f"b{self.version}" + (f" ({self.commit})" if self.commit else "")

    def accepts(self, option: str) -> bool:
        """True if `option` (e.g. `--fit-target`, `-ctkd`) is in the binary's --help."""
        return option in self.options

    @property
    def supports_draft_mtp(self) -> bool:
        return "draft-mtp" in self.spec_types

    def capabilities(self) -> dict[str, bool]:
        return {
            "draft_mtp": self.supports_draft_mtp,
            "ngram_mod": "ngram-mod" in self.spec_types,
            "draft_cache_types": self.accepts("-ctkd") or self.accepts("--spec-draft-type-k"),
            "fit_target": self.accepts("--fit-target"),
            "load_mode": self.accepts("--load-mode"),
            "rpc": self.accepts("--rpc"),
            "models_preset": self.accepts("--models-preset"),
        }


def _run(path: Path, arg: str, timeout: float) -> str:
    env = child_env()
    try:
        proc = subprocess.run([str(path), arg], capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ServerProbeError(f"{path}: no such file. Check --server-bin / $MTP_TUNE_LLAMA_SERVER.") from None
    except PermissionError:
        raise ServerProbeError(f"{path}: not executable (chmod +x it, or point mtp-tune at another binary).") from None
    except OSError as exc:
        raise ServerProbeError(
            f"{path} cannot run on this machine ({exc.strerror}): it may be built for another CPU or OS."
        ) from None
    except subprocess.TimeoutExpired:
        raise ServerProbeError(f"{path} {arg} did not finish in {timeout:.0f} s; is it really llama-server?") from None
    out = proc.stdout + proc.stderr
    if proc.returncode == 127 or "error while loading shared libraries" in out:
        raise ServerProbeError(
            f"{path} cannot start: {out.strip().splitlines()[-1] if out.strip() else 'exit 127'}. "
            "A shared library is missing; reinstall that build or let mtp-tune build a static one "
            "(`mtp-tune doctor --build`)."
        )
    return out


def parse_version(text: str) -> tuple[int | None, str | None]:
    """(build number, commit) from `--version`; build 0 (a tree without git) reads as unknown."""
    m = VERSION_NEW_RE.search(text)
    if m:
        build = int(m.group(2))
        commit = None if m.group(3) == "unknown" else m.group(3)
        return (build or None, commit)
    m = VERSION_RE.search(text)
    if m:
        return (int(m.group(1)), m.group(2))
    return (None, None)


def parse_spec_types(help_text: str) -> tuple[str, ...]:
    """The speculative types listed in `--spec-type`'s help entry."""
    m = re.search(r"--spec-type\b(.*?)(?:\n\S|\n\s*-{1,2}[a-z])", help_text, re.S)
    chunk = m.group(1) if m else ""
    names = re.findall(r"\b(none|draft-[a-z0-9]+|ngram-[a-z0-9-]+)\b", chunk)
    seen: dict[str, None] = {}
    for n in names:
        seen.setdefault(n, None)
    return tuple(seen)


_SPELLING = re.compile(r"-{1,2}[A-Za-z0-9][^\s,]*")


def _entry_spellings(line: str) -> list[str]:
    """Spellings at the start of one entry line, up to the value hint or the help text."""
    out: list[str] = []
    pos = 0
    while True:
        m = _SPELLING.match(line, pos)
        if not m:
            break
        out.append(m.group(0))
        pos = m.end()
        if line.startswith(",", pos):
            pos += 1
            while pos < len(line) and line[pos] == " ":
                pos += 1
            continue
        break  # a space (value hint or help text) or the end of the line
    return out


def parse_help(text: str) -> frozenset[str]:
    """Every option spelling (`-c`, `--ctx-size`, `--no-mmproj`, ...) in `llama-server --help` text.

    Removed options the server still registers (`--draft-max`) are included; `removed_options` names them.
    """
    found: set[str] = set()
    for line in text.splitlines():
        if line.startswith("-") and not line.startswith("---"):
            found.update(_entry_spellings(line))
    return frozenset(found)


_OPT_LINE = re.compile(r"^(-[^ ].*?)(?:\s{2,}|$)(.*)")


def removed_options(help_text: str) -> frozenset[str]:
    """Spellings that --help still lists but marks "the argument has been removed"."""
    removed: set[str] = set()
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        m = _OPT_LINE.match(line)
        if not m:
            continue
        desc = m.group(2) + " " + " ".join(ln.strip() for ln in lines[i + 1 : i + 3] if ln.startswith(" "))
        if "has been removed" in desc:
            removed.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", m.group(1)))
    return frozenset(removed)


def parse_help_entries(text: str) -> list[tuple[str, ...]]:
    """The spellings of each entry, in order; one tuple per option (useful for diagnostics)."""
    return [
        tuple(sp)
        for line in text.splitlines()
        if line.startswith("-") and not line.startswith("---") and (sp := _entry_spellings(line))
    ]


#: Path -> (file identity, `--help` text): one entry per binary, replaced when the file changes.
_HELP_CACHE: dict[str, tuple[tuple[int, int, int, int], str]] = {}
_HELP_LOCK = threading.Lock()


def server_help(server: str | os.PathLike[str], timeout: float = 30.0) -> str:
    """`server --help` (no LLAMA_ARG_* in its environment), run once per binary.

    Cached by path, size, mtime (and inode and ctime), so a rebuilt or replaced binary is asked again.
    Raises ServerProbeError with a fix when it cannot run.
    """
    path = Path(server)
    try:
        st = path.stat()
    except OSError:
        return _run(path, "--help", timeout)  # raises the error that says what is wrong
    key, ident = str(path.resolve()), (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    with _HELP_LOCK:
        hit = _HELP_CACHE.get(key)
    if hit is not None and hit[0] == ident:
        return hit[1]
    text = _run(path, "--help", timeout)
    with _HELP_LOCK:
        _HELP_CACHE[key] = (ident, text)
    return text


def accepted_options(server: str | os.PathLike[str], timeout: float = 30.0) -> frozenset[str]:
    """The option spellings `server` accepts (removed ones it still lists included), from its `--help`."""
    return parse_help(server_help(server, timeout))


def probe(path: str | Path, timeout: float = 30.0) -> ServerInfo:
    """Run `--version` and (once per binary) `--help` and parse both; raises ServerProbeError with a fix."""
    path = Path(path)
    version_out = _run(path, "--version", timeout)
    version, commit = parse_version(version_out)
    if version is None and "version:" not in version_out:
        raise ServerProbeError(
            f"{path} --version printed no llama.cpp version line; this does not look like llama-server."
        )
    built = BUILT_WITH_RE.search(version_out)
    help_out = server_help(path, timeout)
    return ServerInfo(
        path=path,
        version=version,
        commit=commit,
        built_with=built.group(1).strip() if built else None,
        options=parse_help(help_out) - removed_options(help_out),
        spec_types=parse_spec_types(help_out),
    )
