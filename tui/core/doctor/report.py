"""`mtp-tune doctor`: what was found, and what will silently change results.

llama-server reads `/etc/llama.cpp/config.ini`, `$XDG_CONFIG_HOME/llama.cpp/config.ini` and every
`LLAMA_ARG_*` variable before its command line, so a tuning run can differ from what the form shows
without any error. Doctor lists them, with the server, its capabilities, the GPUs and free RAM.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui import package_version
from tui.core.server import provision
from tui.core.gpu import Nvml, or_none, read_host_memory
from tui.core.gpu.collect import other_process_warnings
from tui.core.server.binary import ServerProbeError, probe
from tui.core.options.redact import redact_env
from tui.core.quality.oracle import OracleError, oracle_version

#: Options whose absence changes what mtp-tune can do with a build.
KEY_OPTIONS = ("--spec-type", "-ctkd", "-ctvd", "--fit-target", "--load-mode", "--spec-draft-n-max")


@dataclass
class DoctorReport:
    version: str = ""  # mtp-tune's own
    server: dict[str, Any] = field(default_factory=dict)
    perplexity: dict[str, Any] = field(default_factory=dict)
    nvml: dict[str, Any] = field(default_factory=dict)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    llama_config_files: list[dict[str, Any]] = field(default_factory=list)
    llama_env: dict[str, str] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "server": self.server,
            "perplexity": self.perplexity,
            "nvml": self.nvml,
            "gpus": self.gpus,
            "llama_config_files": self.llama_config_files,
            "llama_env": self.llama_env,
            "host": self.host,
            "warnings": self.warnings,
        }


def llama_config_paths() -> list[Path]:
    """The config files llama-server applies before its command line (arg.cpp:721-766)."""
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return [Path("/etc/llama.cpp/config.ini"), Path(xdg) / "llama.cpp" / "config.ini"]


def _config_keys(path: Path) -> list[str]:
    keys = []
    try:
        for line in path.read_text(errors="replace").splitlines():
            s = line.strip()
            if s and s[0] not in ";#[" and "=" in s:
                keys.append(s.split("=", 1)[0].strip())
    except OSError:
        pass
    return keys


def _gpus(report: DoctorReport) -> None:
    try:
        reading = Nvml().read()
    except Exception as exc:  # telemetry must never stop doctor
        report.nvml = {"status": "error", "message": f"GPU telemetry failed: {exc}"}
        return
    report.nvml = {
        "status": str(reading.status),
        "message": reading.message,
        "driver": or_none(reading.driver_version),
    }
    report.gpus = [dev.to_dict() for dev in reading.devices]
    report.warnings.extend(other_process_warnings(reading.devices))
    report.warnings.extend(reading.warnings)


def _perplexity(report: DoctorReport, perplexity_bin: str | None, server: Path | None) -> None:
    """llama-perplexity (the quality oracle): where, which build, and whether it is the server's build."""
    try:
        found = provision.find_perplexity(perplexity_bin, server)
    except provision.ProvisionError as exc:
        report.perplexity = {"path": None, "source": None, "version": None}
        report.warnings.append(str(exc))
        return
    if found is None:
        report.perplexity = {"path": None, "source": None, "version": None}
        report.warnings.append("No llama-perplexity found (beside the server, in the cache or on PATH): `mtp-tune "
                               "quality` needs it. `mtp-tune doctor --build` builds it with llama-server.")
        return
    report.perplexity = {"path": str(found.path), "source": found.source}
    try:
        build, commit = oracle_version(found.path)
    except OracleError as exc:
        report.perplexity.update(version=None, error=str(exc))
        report.warnings.append(str(exc))
        return
    version = "unknown" if build is None else f"b{build}" + (f" ({commit})" if commit else "")
    report.perplexity.update(version=version, build_number=build)
    server_build = report.server.get("build_number")
    if build is not None and server_build is not None and build != server_build:
        report.perplexity["same_build_as_server"] = False
        report.warnings.append(f"llama-perplexity {found.path} is build {build}, llama-server is build {server_build}: "
                               "quality is measured by another llama.cpp than the one that serves; use the "
                               "llama-perplexity of the server's own build (--perplexity-bin).")
    elif build is not None and server_build is not None:
        report.perplexity["same_build_as_server"] = True


def collect(server_bin: str | None = None, configured: str | None = None,
            perplexity_bin: str | None = None) -> DoctorReport:
    """Gather the report; never raises for a missing piece, it becomes a warning instead."""
    report = DoctorReport(version=package_version())
    try:
        found = provision.find_server(server_bin, configured)
    except provision.ProvisionError as exc:
        found = None
        report.warnings.append(str(exc))
    if found is None:
        report.server = {"path": None, "source": None, "version": None, "supports_draft_mtp": False}
        report.warnings.append(
            "No llama-server found (checked --server-bin, $MTP_TUNE_LLAMA_SERVER, the config, PATH and the "
            f"cache {provision.build_root()}). Run `mtp-tune doctor --build` to build one (about 6 min on 2 cores)."
        )
    else:
        report.server = {"path": str(found.path), "source": found.source}
        try:
            info = probe(found.path)
        except ServerProbeError as exc:
            report.server.update(version=None, supports_draft_mtp=False, error=str(exc))
            report.warnings.append(str(exc))
        else:
            report.server.update(
                version=info.version_string,
                build_number=info.version,
                built_with=info.built_with,
                supports_draft_mtp=info.supports_draft_mtp,
                spec_types=list(info.spec_types),
                capabilities=info.capabilities(),
                rpc_server=str(provision.rpc_server_for(found.path) or "") or None,
            )
            from tui.core.planning.exact_check import check_exact_mode  # a real dry run (a tiny model, ~0.1 s)
            report.server["exact_mode"] = check_exact_mode(found.path).to_dict()
            if not info.supports_draft_mtp:
                report.warnings.append(
                    f"{found.path} ({info.version_string}) does not list draft-mtp in --spec-type: it is too old "
                    "for MTP. Update llama.cpp, or let mtp-tune build a current CPU server with `mtp-tune doctor --build`."
                )
            missing = [o for o in KEY_OPTIONS if not info.accepts(o)]
            if missing:
                report.warnings.append(f"This llama-server does not accept {', '.join(missing)}; those fields are disabled.")
    _perplexity(report, perplexity_bin, found.path if found else None)
    for path in llama_config_paths():
        if path.is_file():
            keys = _config_keys(path)
            report.llama_config_files.append({"path": str(path), "keys": keys})
            report.warnings.append(
                f"{path} exists and llama-server applies it before the command line ({', '.join(keys) or 'no keys'}): "
                "results may differ from the settings shown."
            )
    report.llama_env = redact_env({k: v for k, v in sorted(os.environ.items()) if k.startswith("LLAMA_ARG_") or (k == "LLAMA_API_KEY" and v)}, mask="***")
    if report.llama_env:
        report.warnings.append(
            f"LLAMA_ARG_* variables are set ({', '.join(report.llama_env)}); llama-server treats each as an option."
        )
    _gpus(report)
    report.host = {**read_host_memory().to_dict(), "cpus": os.cpu_count()}
    avail = report.host.get("ram_available_mib")
    if isinstance(avail, int) and avail < 2048:
        report.warnings.append(f"Only {avail} MiB of RAM is free; weights spilled to host memory will swap.")
    return report
