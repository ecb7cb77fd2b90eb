"""The calibrated estimate in the TUI: a model's compute terms fitted on llama.cpp's own dry runs.

A model read for the screen gets its cached calibration at once (core `cache.attach_cached`, from
`planning.model_meta`: nothing is run). After the first exact result for a model, the controller
(tui/ui/cockpit/calibration.py) runs `calibrate` on a worker; its handler hangs the result on the
model's GGUFMeta (`take`), so every later plan of that model, any settings, is the calibrated
estimate (`PlanView.calibrated`). No Textual here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tui.core.options.settings import Settings
from tui.ui.cockpit.planning import loaded_meta, model_meta
from tui.ui.cockpit.remote import known_local


def model_of(settings: Settings) -> str | None:
    """The local file the settings' model is planned from (a remote model's header copy once read),
    or None when there is none yet; cheap, for the UI thread (no header is read)."""
    local = known_local(settings)
    return str(Path(local.model).expanduser()) if local is not None and local.model else None


def is_calibrated(model: str) -> bool:
    """Whether the model's metadata, if read, already carries a calibration (the UI thread's: reads nothing)."""
    meta = loaded_meta(model)
    return meta is not None and meta.calibration is not None


def run(model: str, server_bin: Path, cancel: threading.Event,
        progress: Callable[[str], None]) -> tuple[Any, Any]:
    """Calibrate `model` (blocks: a worker thread): (its GGUFMeta or None, the Calibration or one
    sentence why not, "cancelled" when `cancel` was set). `progress` hears "calibrating the estimate 3/21"."""
    # lazy: calibration runs llama.cpp (the exact planner, httpx): loaded when one starts
    from tui.core.planning.calibrate import calibrate
    try:
        meta = model_meta(model, server_bin)
    except Exception as exc:  # noqa: BLE001 - GGUFError and friends carry the user's sentence
        return None, str(exc)
    if meta.calibration is not None:
        return meta, meta.calibration  # found in the cache when the header was read
    try:
        res = calibrate(meta, server_bin, cancel=cancel,
                        progress=lambda s: progress(s.replace("calibrating", "calibrating the estimate", 1)))
    except Exception as exc:  # noqa: BLE001 - a failed calibration leaves the estimate as it was
        res = f"the calibration failed ({type(exc).__name__}: {exc})"
    return meta, res


def take(meta: Any, result: Any) -> str | None:
    """A finished calibration (the UI thread): attach it to `meta` and say None, or the one
    sentence why the structural estimate stays ("" for a cancelled run: nothing to say)."""
    # lazy: the calibration's types and the plan cache (hashlib) load when one ends
    from tui.core.planning.cache import attach
    from tui.core.planning.calibration import Calibration

    if isinstance(result, Calibration) and meta is not None:
        attach(meta, result)
        return None
    if result == "cancelled":
        return ""
    return str(result) or "the calibration gave no result."
