"""Running `mtp-tune plan` as a user does (a child process) against the loopback Hub, and comparing
plans by the figures that come from the model (not the live host memory, nor the file's path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

#: what a plan reads from the running machine, not the model: dropped before comparing two plans
_LIVE = ("free_mib", "headroom_mib")


def child_env(**extra: str) -> dict[str, str]:
    """The test's (hermetic) environment for a child, minus what this process set for itself:
    `tui.core.remote` sets HF_HUB_DISABLE_TELEMETRY here on import, and the child must do it alone."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_DISABLE_TELEMETRY", "DISABLE_TELEMETRY")}
    env.update(extra)
    return env


def plan_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`python -m tui.cli plan ARGS` (bounded); the completed process."""
    return subprocess.run([sys.executable, "-m", "tui.cli", "plan", *args], capture_output=True, text=True,
                          env=child_env() if env is None else env, timeout=timeout)


def plan_json(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """`plan ARGS --json`, which must succeed; its object."""
    out = plan_cli(*args, "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    return json.loads(out.stdout)


def _devices(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Devices and totals without the host's live free memory (the simulated GPUs' stay: they are fixed)."""
    out = []
    for d in [*plan["devices"], dict(plan["totals"], name="total")]:
        live = d["name"] in ("Host", "total")
        out.append({k: v for k, v in d.items() if not (live and k in _LIVE)})
    return out


def figures(plan: dict[str, Any], *, file_size: bool = True) -> dict[str, Any]:
    """A plan's model-derived figures: every model field but its path (and, for a split set compared
    with the whole file, its size: every part repeats a header), every device's breakdown, the fit verdict."""
    model = {k: v for k, v in plan["model"].items() if k != "path" and (file_size or k != "file_size_mib")}
    return {"model": model, "devices": _devices(plan)}


def exact_figures(out: dict[str, Any]) -> dict[str, Any]:
    """`plan --exact --json`'s measured part: status, fit, sources, warnings and the plan's figures."""
    exact = out["exact"]
    assert exact["status"] == "exact", exact["reason"]
    keep = {k: exact[k] for k in ("status", "fit", "sources", "warnings", "sparse_copy")}
    return {**keep, "plan": figures(exact["plan"])}


def one_error(out: subprocess.CompletedProcess[str]) -> str:
    """The one-line error of a failed plan (`--json`: no progress lines); asserts no traceback."""
    assert out.returncode != 0, out.stdout
    assert "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    return lines[0]
