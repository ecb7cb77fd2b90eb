"""Quality vs memory (`D`): each K/V type's KV memory at the context on screen against what it costs.

Why side by side: a cache type is a trade, memory saved against output lost, and the two figures come
from different places: the KV memory from the planner (the estimate the plan panel shows, at the
settings on screen with only -ctk/-ctv changed), the cost from the quality index (what
`mtp-tune quality` or the cockpit's `d` measured on this model: mean KLD and same top token against f16
K/V). A type not measured says so; nothing is guessed. f16/f16 is the reference (0 by definition).
No Textual here: `memory_view` blocks (a worker) and never raises.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tui.core.gpu.types import GpuSnapshot
from tui.core.options.settings import Settings
from tui.core.quality.index import Measured, newest_for, settings_measured, where_text
from tui.core.quality.request import REFERENCE_TYPE, KvPair
from tui.ui.cockpit.calibrating import model_of
from tui.ui.cockpit.measuring import kv_of, look_up
from tui.ui.cockpit.planning import core_plan, devices_for
from tui.ui.cockpit.remote import to_local
from tui.ui.options import AppOptions

#: the cache types always listed (measured or not), widest first
COMMON_TYPES = ("f16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0")


@dataclass(frozen=True)
class QualityMemoryRow:
    """One K/V setting: its KV memory (MiB, all devices) and saving against f16, and its measured cost."""

    kv: KvPair
    kv_mib: float | None  # None: the planner refused these types for this model (`said` says why)
    saving_mib: float | None
    kld: float | None  # None: not measured
    same_top_pct: float | None
    said: str  # "reference", "measured, -c 2048", "not measured", or the planner's refusal
    current: bool = False  # the K/V types on screen


@dataclass(frozen=True)
class QualityMemoryView:
    title: str
    rows: tuple[QualityMemoryRow, ...] = ()
    note: str = ""
    error: str = ""


def _kv_mib(plan: Any) -> float:
    return float(sum(d.components["kv"] for d in plan.devices))


def row(kv: KvPair, kv_mib: float | None, f16_mib: float | None, m: Measured | None, *, current: bool = False,
        refused: str = "") -> QualityMemoryRow:
    """One row from the planner's KV figure and the newest measurement of `kv` (None: not measured)."""
    saving = f16_mib - kv_mib if kv_mib is not None and f16_mib is not None else None
    if kv.is_reference:
        return QualityMemoryRow(kv, kv_mib, saving, 0.0, 100.0, "reference", current)
    said = refused or (where_text(m) if m is not None else "not measured")
    return QualityMemoryRow(kv, kv_mib, saving, m.figures.kld_mean.value if m else None,
                            m.figures.same_top_pct.value if m else None, said, current)


def memory_view(settings: Settings, snapshot: GpuSnapshot | None, options: AppOptions) -> QualityMemoryView:
    """Every common K/V type, the one on screen and every one measured on this model, widest first."""
    model = model_of(settings)
    if model is None:
        return QualityMemoryView("Quality vs memory", error="no model yet: give a model file (or -hf repo) in the form")
    looked = look_up(model, options.server_bin)
    if isinstance(looked, str):
        return QualityMemoryView("Quality vs memory", error=looked)
    entries = looked[1]
    current = kv_of(settings)
    kvs = list(dict.fromkeys([*(KvPair(t, t) for t in COMMON_TYPES), current, *settings_measured(entries)]))
    try:
        local = to_local(settings)
        ds = devices_for(snapshot, options, local.rpc)
    except Exception as exc:  # noqa: BLE001 - RemoteError and friends carry the user's sentence
        return QualityMemoryView("Quality vs memory", error=str(exc))
    planned: dict[KvPair, tuple[float | None, str]] = {}
    ctx = None
    for kv in kvs:
        try:
            p = core_plan(replace(local, cache_type_k=kv.k, cache_type_v=kv.v), snapshot, options, devices=ds)
        except Exception as exc:  # noqa: BLE001 - a type this model cannot take is a row that says why
            planned[kv] = (None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            continue
        planned[kv] = (_kv_mib(p), "")
        ctx = ctx or p.resolved.n_ctx
    f16 = planned[KvPair(REFERENCE_TYPE, REFERENCE_TYPE)][0]
    rows = [row(kv, planned[kv][0], f16, newest_for(entries, kv), current=kv == current, refused=planned[kv][1])
            for kv in kvs]
    rows.sort(key=lambda r: -(r.kv_mib if r.kv_mib is not None else -1.0))
    name = model.rsplit("/", 1)[-1]
    title = f"Quality vs memory: {name}" + (f" at -c {ctx}" if ctx else "")
    note = ("KV: the planner's estimate at the settings on screen with only -ctk/-ctv changed (all devices); "
            "KLD and same top: measured against f16 K/V by llama-perplexity (d measures the types on screen, "
            "`mtp-tune quality --kv` any); the draft KV changes acceptance, not quality.")
    return QualityMemoryView(title, tuple(rows), note)
