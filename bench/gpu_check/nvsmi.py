"""nvidia-smi's own view of the card, to hold mtp-tune's NVML layer against.

The query fields mirror what `mtp-tune gpus --json` reports per device; `compare` lines them up.
"""

from __future__ import annotations

import csv
import io
from typing import Any

#: nvidia-smi --query-gpu fields -> the `gpus --json` device key they correspond to (None: no twin).
QUERY_FIELDS: dict[str, str | None] = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "pci.bus_id": "pci_bus_id",
    "driver_version": None,
    "compute_cap": None,
    "memory.total": "memory_total_mib",
    "memory.used": "memory_used_mib",
    "memory.free": "memory_free_mib",
    "utilization.gpu": "utilization_gpu_percent",
    "utilization.memory": "utilization_memory_percent",
    "temperature.gpu": "temperature_c",
    "power.draw": "power_draw_w",
    "power.limit": "power_limit_w",
}
VOLATILE = frozenset({"utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw"})
APPS_FIELDS: tuple[str, ...] = ("pid", "process_name", "used_memory")


def query_argv() -> list[str]:
    return ["nvidia-smi", "--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits"]


def apps_argv() -> list[str]:
    return ["nvidia-smi", "--query-compute-apps=" + ",".join(APPS_FIELDS), "--format=csv,noheader,nounits"]


def _value(text: str) -> Any:
    t = text.strip()
    if t in ("", "[N/A]", "N/A", "[Not Supported]"):
        return None
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t


def parse_csv(text: str, fields: tuple[str, ...] | list[str] = tuple(QUERY_FIELDS)) -> list[dict[str, Any]]:
    """Rows of `--format=csv,noheader,nounits` output as dicts; a header line, if present, is skipped.

    Raises ValueError naming the line when a row has the wrong number of columns.
    """
    rows: list[dict[str, Any]] = []
    for lineno, cols in enumerate(csv.reader(io.StringIO(text)), 1):
        if not cols or not "".join(cols).strip():
            continue
        if cols[0].strip() == fields[0] or cols[0].strip().startswith(fields[0] + " ["):
            continue  # a header
        if len(cols) != len(fields):
            raise ValueError(f"nvidia-smi CSV line {lineno}: {len(cols)} columns, expected {len(fields)} ({','.join(fields)})")
        rows.append({f: _value(c) for f, c in zip(fields, cols)})
    return rows


def compute_cap(rows: list[dict[str, Any]]) -> str | None:
    """CMAKE_CUDA_ARCHITECTURES for the first GPU: compute_cap 9.0 -> "90"."""
    if not rows or rows[0].get("compute_cap") is None:
        return None
    return str(rows[0]["compute_cap"]).replace(".", "")


def compare(smi_rows: list[dict[str, Any]], gpus_json: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (device, field): nvidia-smi's value, mtp-tune's, and whether they agree.

    Memory may differ by a few MiB between two reads taken moments apart: `agree` allows 64 MiB
    there and wants equality elsewhere; volatile fields (utilisation, power, temperature) get None.
    """
    devices = {d.get("index"): d for d in gpus_json.get("devices", [])}
    out: list[dict[str, Any]] = []
    for r in smi_rows:
        dev = devices.get(r.get("index"), {})
        for f, key in QUERY_FIELDS.items():
            if key is None:
                continue
            a, b = r.get(f), dev.get(key)
            agree: bool | None
            if f in VOLATILE:
                agree = None  # changes between two reads moments apart: shown, not judged
            elif isinstance(a, (int, float)) and isinstance(b, (int, float)):
                agree = abs(a - b) <= (64 if f.startswith("memory.") else 0)
            else:
                agree = (a is None and b is None) or str(a).strip().lower() == str(b).strip().lower()
            out.append({"index": r.get("index"), "field": f, "nvidia_smi": a, "mtp_tune": b, "agree": agree})
    return out


def used_mib(rows: list[dict[str, Any]], index: int = 0) -> float | None:
    for r in rows:
        if r.get("index") == index and isinstance(r.get("memory.used"), (int, float)):
            return float(r["memory.used"])
    return None
