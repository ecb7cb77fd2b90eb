"""What a llama-server binary is and what it accepts, from `--version` and `--help`.

The rest of the app asks this object whether `draft-mtp`, `-ctkd`, `--fit-target` or `--load-mode`
exist in the user's build, instead of assuming the newest llama.cpp.
"""

from __future__ import annotations

import re
import subprocess
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
        proc = subprocess.run([str(path), arg], capture_output=True, text=True, timeout=timeout, env=env)
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


def probe(path: str | Path, timeout: float = 30.0) -> ServerInfo:
    """Run `--version` and `--help` and parse both; raises ServerProbeError with a fix."""
    from tui.core.server_options import parse_help, removed_options

    path = Path(path)
    version_out = _run(path, "--version", timeout)
    version, commit = parse_version(version_out)
    if version is None and "version:" not in version_out:
        raise ServerProbeError(
            f"{path} --version printed no llama.cpp version line; this does not look like llama-server."
        )
    built = BUILT_WITH_RE.search(version_out)
    help_out = _run(path, "--help", timeout)
    return ServerInfo(
        path=path,
        version=version,
        commit=commit,
        built_with=built.group(1).strip() if built else None,
        options=parse_help(help_out) - removed_options(help_out),
        spec_types=parse_spec_types(help_out),
    )
