"""The plain-text plan table `mtp-tune plan` prints (shared by the estimate and `--exact`)."""

from __future__ import annotations

from typing import Any


def render(p: Any, source: str = "") -> str:
    """A plain-text table for the terminal."""
    d = p.to_dict()
    m = d["model"]
    ctx = m["context"]
    lines = [
        f"{m['name'] or m['path']}  ({m['architecture']}, {m['weights_mib']:.0f} MiB of weights, "
        f"{m['attention_layers']} attention + {m['recurrent_layers']} recurrent layers, {m['nextn_predict_layers']} MTP)",
        f"n_ctx {ctx['n_ctx']} ({ctx['n_seq_max']} slots, {'unified' if ctx['kv_unified'] else 'per slot'}), "
        f"ubatch {ctx['n_ubatch']}, KV {ctx['cache_type_k']}/{ctx['cache_type_v']}"
        + (f", MTP draft KV {ctx['cache_type_k_draft']}/{ctx['cache_type_v_draft']}, n_rs_seq {ctx['n_rs_seq']}" if ctx["mtp"] else "")
        + (f"  [devices: {source}]" if source else ""),
        "",
    ]
    cols = ("weights_mib", "kv_mib", "draft_kv_mib", "recurrent_mib", "compute_mib", "draft_compute_mib", "output_mib",
            "needed_mib", "free_mib", "headroom_mib")
    head = ("device", "weights", "KV", "draft KV", "recurrent", "compute", "draft cmp", "output", "needed", "free", "headroom", "risk")
    rows = [head]
    for dev in d["devices"] + [dict(d["totals"], name="total")]:
        rows.append((str(dev["name"])[:44], *(("-" if dev.get(c) is None else f"{dev[c]:.0f}") for c in cols), str(dev.get("risk", ""))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        lines.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
    fit = m["fit"]
    if fit["active"] and fit["action"] not in ("none",):
        lines += ["", f"fit: {fit['message']}"]
    for w in m["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)
