"""Quality in the cockpit: what the K/V types on screen cost, looked up, and measured in the background.

The lookup (`look_up`) reads the model's header (once: `planning.model_meta`) and the quality index
(`core.quality.index`): nothing runs. A measurement (`measure_kv`) is `mtp-tune quality` for one K/V
setting with the form's flags: llama-perplexity found as that command finds it (beside the server,
mtp-tune's build, PATH; never built from the cockpit: a missing one is one sentence saying how to get
it), the default text, the form's -c. Both block (a worker thread) and never raise: an error is one
sentence. The line the plan panel shows (`line`) is plain text. No Textual here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tui.core.options.argv import settings_to_argv
from tui.core.options.settings import Settings
from tui.core.quality.index import Measured, cost_text, lookup
from tui.core.quality.request import REFERENCE_TYPE, KvPair
from tui.ui.cockpit.planning import model_meta

CANCELLED = "cancelled"


def kv_of(settings: Settings) -> KvPair:
    """The main K/V types on screen (-ctk/-ctv; llama-server's default is the reference, f16)."""
    return KvPair(settings.cache_type_k or REFERENCE_TYPE, settings.cache_type_v or REFERENCE_TYPE)


def line(entries: Sequence[Measured] | None, kv: KvPair, key: str, *, measuring: str = "", note: str = "") -> str:
    """The plan panel's quality line for `kv` ("" while the lookup has not answered): its cost, the
    measurement's progress, or "not measured — press KEY" (with `note`: why the last try gave nothing)."""
    head = f"quality {kv.k}/{kv.v}"
    if measuring:
        return f"{head}: {measuring} ({key} or Esc cancels)"
    if entries is None:
        return ""
    said = cost_text(entries, kv)
    if said == "reference":
        return f"{head}: reference (the unquantized cache, what the others are measured against)"
    if said is not None:
        return f"{head}: {said}"
    why = f" ({note.rstrip('.')})" if note else ""  # a sentence inside brackets loses its full stop
    return f"{head}: not measured{why} — press {key}"


def progress_words(message: str, kv: KvPair) -> str:
    """`measure`'s progress as the line says it: "measuring: chunk 3/8", "measuring: the f16 reference pass"."""
    if message.startswith("reference:"):
        return "measuring: the f16 reference pass first"
    rest = message.removeprefix(f"{kv.label}: ")
    return f"{rest}…" if rest.startswith("measuring") or rest.startswith("starting") else f"measuring: {rest}"


def look_up(model: str, server_bin: Path | None) -> tuple[str, list[Measured]] | str:
    """(the model's header digest, what is measured on it, newest first), or one sentence why not."""
    # lazy: the header digest's module loads on this worker, with the header read
    from tui.core.planning.sparse import header_hash
    try:
        meta = model_meta(model, server_bin)
        digest = header_hash(meta)
    except Exception as exc:  # noqa: BLE001 - GGUFError and OSError carry the user's sentence
        return str(exc)
    return digest, lookup(digest)


MeasureFn = Callable[[Settings, KvPair, Path | None, threading.Event, Callable[[str], None]], Any]


def measure_kv(settings: Settings, kv: KvPair, server_bin: Path | None, cancel: threading.Event,
               progress: Callable[[str], None]) -> list[Measured] | str:
    """Measure `kv` on the settings' model file with their flags (blocks: a worker thread): what is then
    measured on the model (newest first), CANCELLED, or one sentence why not."""
    # lazy: the measurement (llama-perplexity's runner, the probe suites for the text) loads when one starts
    from tui.core.quality.measure import QualityRequest, measure
    from tui.core.quality.oracle import oracle_info
    from tui.core.quality.text import load_text
    from tui.core.server import provision

    if not settings.model:
        return "quality is measured on a model file on disk (-m FILE); a Hub or URL model is not measured here."
    try:
        found = provision.find_perplexity(None, server_bin)
        if found is None:
            return ("no llama-perplexity beside llama-server or in mtp-tune's build: `mtp-tune doctor --build` "
                    "builds it, as does the first `mtp-tune quality`.")
        progress("starting llama-perplexity…")
        req = QualityRequest(model=Path(settings.model).expanduser(), server_args=tuple(settings_to_argv(settings.redacted())),
                             kv=(kv,), text=load_text(), ctx=settings.ctx_size or None)
        report = measure(req, oracle_info(found.path), progress=progress, cancel=cancel)
    except Exception as exc:  # noqa: BLE001 - QualityError, ModelError, OracleError, BudgetError: one sentence
        return CANCELLED if cancel.is_set() else str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return lookup(report.model.digest)
