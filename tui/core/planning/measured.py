"""A dry run's measurements laid onto the plan shape: llama.cpp's numbers, the closed forms' detail.

llama.cpp's `fit_memory_breakdown` gives, per device, model / context / compute in MiB floored;
the `-lv 5` lines of the same pass give compute, recurrent-state and output buffers per buffer and
the KV totals to 0.01 MiB. The plan wants seven components per device, so:

- compute, draft compute, recurrent state, output: the per-buffer lines (exact to 0.01 MiB);
  without them the breakdown's compute (+0.5 MiB, the middle of its floor).
- weights of an offload device: the closed form (every tensor's bytes) where it agrees with
  llama.cpp's floored figure; else llama.cpp's.
- host weights: from llama.cpp's own placement (tui.core.planning.hostweights): the mapped file
  range with mmap (which the no-mmap dry run cannot see) and the repacked buffer, each kept apart in
  `DeviceSource.buffers`, where their sums agree with llama.cpp's floored rows; else those rows.
- KV and draft KV: llama.cpp's KV total line (per context, 0.01 MiB), shared between devices in the
  closed form's proportions where those agree with each device's floored `context` minus its
  measured recurrent state, else in those floors' proportions.

Every component taken from a formula rather than a measurement is listed in `by_formula`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tui.core.planning.breakdown import Measurement
from tui.core.planning.devices import HOST
from tui.core.planning.hostweights import SLACK as _SLACK, agrees as _agrees, exact_host_weights
from tui.core.planning.result import Plan


@dataclass
class DeviceSource:
    """Where one device's figures come from; `why` says why a device stayed an estimate."""

    key: str
    exact: bool
    why: str = ""
    by_formula: list[str] = field(default_factory=list)
    buffers: dict[str, float] = field(default_factory=dict)  # the host's model buffers (CPU_Mapped, CPU_REPACK)

    @property
    def label(self) -> str:
        return "exact (llama.cpp)" if self.exact else "estimate"

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key, "source": self.label, "why": self.why, "by_formula": list(self.by_formula),
                "weights_buffers_mib": {k: round(v, 2) for k, v in self.buffers.items()}}


def _per_device(m: Measurement | None, keymap: dict[str, str]) -> dict[str, dict[str, float]]:
    if m is None:
        return {}
    out: dict[str, dict[str, float]] = {}
    for k, comps in m.detail.per_device().items():
        out[keymap.get(k, k)] = comps
    return out


def _rows(m: Measurement | None, plan_keys: list[str]) -> tuple[dict[str, tuple[int, int, int]], str]:
    """plan key -> (model, context, compute) MiB; llama.cpp lists its devices in the plan's order."""
    if m is None:
        return {}, "llama.cpp printed no measurement"
    devs = m.devices()
    out: dict[str, tuple[int, int, int]] = {}
    why = ""
    if len(devs) != len(plan_keys):
        why = f"llama.cpp used {len(devs)} offload devices where the plan has {len(plan_keys)}"
    for key, r in zip(plan_keys, devs):
        out[key] = (r.model, r.context, r.compute)
    host = m.host_rows()
    out[HOST] = (sum(r.model for r in host), sum(r.context for r in host), sum(r.compute for r in host))
    return out, why


def _kv_total(m: Measurement | None) -> float | None:
    if m is None or not m.detail.target.kv_lines:
        return None
    return sum(k.size_mib for k in m.detail.target.kv_lines)


def apply_measurements(est: Plan, target: Measurement, draft: Measurement | None, keymap: dict[str, str],
                       mtp: bool) -> dict[str, DeviceSource]:
    """Overwrite `est`'s components with the measured ones (in place); return the source per device.

    `keymap` maps the dry run's buffer device names (e.g. a stand-in's `RPC0[127.0.0.1:port]`) to
    the plan's keys (`CUDA0`)."""
    plan_keys = [d.key for d in est.devices if d.key != HOST]
    rows_t, why_t = _rows(target, plan_keys)
    rows_d, why_d = _rows(draft, plan_keys) if draft is not None else ({}, "")
    det_t, det_d = _per_device(target, keymap), _per_device(draft, keymap)
    has_detail = bool(det_t)
    kv_t, kv_d = _kv_total(target), _kv_total(draft)
    sources: dict[str, DeviceSource] = {}
    kv_parts: dict[str, list[tuple[str, float, int]]] = {"kv": [], "draft_kv": []}
    for d in est.devices:
        src = DeviceSource(d.key, True)
        sources[d.key] = src
        if d.key not in rows_t:
            src.exact, src.why = False, why_t or "llama.cpp did not measure this device"
            continue
        c = d.components
        model, ctx, comp = rows_t[d.key]
        dt = det_t.get(d.key, {})
        if d.key == HOST:  # llama.cpp's placement and host buffers (mapped range, repacked buffer)
            c["weights"], src.buffers, notes = exact_host_weights(est.model, est.resolved, target)
            src.by_formula += notes
        elif not _agrees(c["weights"], model):  # an offload device: the closed form inside llama.cpp's floor
            c["weights"] = model + 0.5 if model else 0.0
        else:
            src.by_formula.append("weights")
        # compute, recurrent, output: the per-buffer lines
        if has_detail:
            c["compute"] = dt.get("compute", 0.0)
            rec = dt.get("recurrent", 0.0)
            c["output"] = dt.get("output", 0.0) + det_d.get(d.key, {}).get("output", 0.0)
        else:
            c["compute"] = comp + 0.5 if comp else 0.0
            rec = c["recurrent"] if _agrees(c["recurrent"], ctx) or c["recurrent"] <= ctx + 1 else float(ctx)
            src.by_formula += ["recurrent", "output"]
        c["recurrent"] = rec
        kv_parts["kv"].append((d.key, c["kv"], ctx - int(rec)))
        if mtp and draft is not None and d.key in rows_d:
            dmodel, dctx, dcomp = rows_d[d.key]
            c["draft_compute"] = det_d.get(d.key, {}).get("compute", 0.0) if det_d else (dcomp + 0.5 if dcomp else 0.0)
            kv_parts["draft_kv"].append((d.key, c["draft_kv"], dctx))
        elif mtp:
            src.by_formula += ["draft_kv", "draft_compute"]
            if not src.why:
                src.why = why_d or "llama.cpp did not measure the MTP context; its figures are estimates"
    _split_kv(est, kv_parts["kv"], kv_t, "kv", sources)
    if mtp and draft is not None:
        _split_kv(est, kv_parts["draft_kv"], kv_d, "draft_kv", sources)
    return sources


def _split_kv(est: Plan, parts: list[tuple[str, float, int]], total: float | None, comp: str,
              sources: dict[str, DeviceSource]) -> None:
    """KV per device from llama.cpp's KV total line (0.01 MiB) and floored per-device context: one
    device takes the total; several share it in the closed form's proportions where those agree with
    the floors, else in the floors'. Without the total line: the closed form where it agrees, else
    the floors (+0.5 MiB)."""
    if not parts:
        return
    agree = all(_agrees(f, floor) or (floor <= 0 and f < 1 + _SLACK) for _, f, floor in parts)
    if total is None:
        for key, f, floor in parts:
            if agree:
                sources[key].by_formula.append(comp)
            else:
                est.device(key).components[comp] = max(0, floor) + 0.5 if floor > 0 else 0.0  # type: ignore[union-attr]
        return
    weights = {key: (f if agree else max(0.0, floor + 0.5 if floor > 0 else 0.0)) for key, f, floor in parts}
    holders = [k for k, w in weights.items() if w > 0]
    base = sum(weights.values())
    for key, w in weights.items():
        est.device(key).components[comp] = total * (w / base) if base else 0.0  # type: ignore[union-attr]
        if len(holders) > 1 and w > 0:
            sources[key].by_formula.append(f"{comp} (split of llama.cpp's total)")
