"""Every import of mtp-tune's core modules the check needs, in one place.

The core is being reorganised; when a module moves, only the import lines below change. The rest of
the check talks to the product through its CLI (`python -m tui.cli ...`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tui.core.server.provision import BUILD_FLAGS, BUILD_TARGETS, RPC_SERVER_NAME, SDIST_NAME, SDIST_VERSION, SERVER_NAME
from tui.core.server.classify import classify
from tui.core.server.memreport import parse_log

from tests.helpers.shapemodel import write_shape_model

__all__ = ["BUILD_FLAGS", "BUILD_TARGETS", "RPC_SERVER_NAME", "SDIST_NAME", "SDIST_VERSION", "SERVER_NAME",
           "buffers", "classify_log", "write_shape"]


def buffers(log_text: str) -> dict[str, Any]:
    """What llama.cpp allocated, per device and component (the product's memreport)."""
    rep = parse_log(log_text)
    d = rep.to_dict()
    return {"devices": d["devices"], "totals": d["totals"], "breakdowns": d["breakdowns"],
            "flash_attn": rep.target.flash_attn, "complete": rep.complete}


def classify_log(exit_code: int | None, log_text: str, argv: list[str] | None = None,
                 was_ready: bool = False) -> dict[str, Any]:
    """The product's failure classifier on a server log: kind, device, message, the evidence line."""
    f = classify(exit_code, log_text.splitlines(), argv=argv, was_ready=was_ready)
    return {"kind": f.kind.value, "flag_or_file": f.flag_or_file, "message": f.message, "evidence": f.evidence}


def write_shape(path: Path) -> Path:
    """The sparse shape-only Qwen3.6-35B-A3B GGUF (a few MB on disk)."""
    return write_shape_model(path)


def exact(server_args: list[str], server_bin: Path, timeout_s: float, root: Path) -> dict[str, Any]:
    """The product's exact mode (llama.cpp's own `--fit` dry run, through this CUDA build) of these
    flags on the GPUs NVML sees now; never raises (the result says why it is unavailable)."""
    try:
        from tui.core.options.argv import settings_from_argv
        from tui.core.planning.devices import devices_now
        from tui.core.planning.exact import exact_plan

        imp = settings_from_argv(list(server_args))
        ds = devices_now()
        res = exact_plan(imp.settings, list(ds.devices), server_bin, host_total_mib=ds.host_total_mib,
                         host_free_mib=ds.host_free_mib, timeout_s=timeout_s, use_cache=False, root=root)
        return res.to_dict()
    except Exception as exc:  # noqa: BLE001 - a moved module or a failed run is a result here, not a crash
        return {"status": "unavailable", "reason": f"{type(exc).__name__}: {exc}", "plan": None}
