"""The estimate's measured error band per component, for the UI to show beside each figure.

Produced by bench/bench_planner_heldout.py on its held-out matrix (shapes never used to calibrate
the estimate) and committed as data (error_bands.json, with the date and commit it was measured at).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

BANDS_PATH = Path(__file__).with_name("error_bands.json")


@lru_cache(maxsize=1)
def measured() -> dict[str, Any]:
    """{"measured", "commit", "configurations", "architectures", "band_pct": {component: %}}; {} if absent."""
    try:
        data = json.loads(BANDS_PATH.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def error_band(calibrated: bool = False) -> dict[str, float]:
    """Component -> the 95th-percentile relative error (%) of the estimate on the held-out matrix:
    the structural estimate's, or (`calibrated`) the estimate calibrated on the model by llama.cpp.
    Both were measured on the CPU backend (host and CPU-backed RPC devices)."""
    bands = measured().get("calibrated_band_pct" if calibrated else "band_pct", {})
    return {str(k): float(v) for k, v in bands.items() if isinstance(v, (int, float))}
