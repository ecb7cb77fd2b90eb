"""What `mtp-tune plan` prints, the plain-text table and `--json`'s extras (shared by the estimate and `--exact`)."""

from __future__ import annotations

from typing import Any

from tui.cli._common import counted
from tui.core.config.text import safe_text


def unreachable_json(devices: Any) -> list[dict[str, str]]:
    """`--json`'s `unreachable`: each `--rpc` server of the DeviceSet that did not answer, and why."""
    return [{"endpoint": ep, "reason": why} for ep, why in zip(devices.unreachable, devices.reasons)]


def remote_line(fetched: Any, settings: Any = None) -> str:
    """Where a remote model's figures come from (`remote.fetch.Fetched`), then a line per `-hf`
    sidecar llama-server downloads too (`settings`: the flags, for where the projector goes)."""
    reqs = fetched.traffic.requests
    how = ("from the cache, no request" if fetched.cached and not reqs else "from the cache" if not reqs else
           f"{fetched.traffic.bytes / 2**20:.2f} MiB in {counted(reqs, 'range request')}")
    notes = "".join(f"; {safe_text(n)}" for n in fetched.notes)  # names from the server: shown escaped
    head = (f"remote: {safe_text(fetched.source.label)} -> {safe_text(fetched.name)} ({fetched.size / 2**30:.2f} GiB, "
            "not downloaded); "
            f"header {fetched.header_bytes / 2**20:.2f} MiB, {how}{notes}")
    return "\n".join([head, *(sidecar_line(s, settings) for s in getattr(fetched, "sidecars", ()))])


def mmproj_place(settings: Any) -> str:
    """Where llama-server b11434 loads the projector: `-mmdev`, else `--device`'s first (arg.cpp:893),
    else the first GPU ggml lists (mtmd/clip.cpp:188-197, `ggml_backend_init_by_type(GPU)`: not -mg's),
    host memory with `--no-mmproj-offload` or `-mmdev none`."""
    from tui.core.options import reader

    extra = list(getattr(settings, "extra_args", ()) or ())
    if reader.present(extra, "--mmproj-offload") is False:
        return "in host memory (--no-mmproj-offload)"
    dev = reader.value(extra, "--mmproj-device") or ""
    if dev:
        return "in host memory (-mmdev none)" if dev == "none" else f"on {dev} (-mmdev)"
    devices = [d for d in (reader.value(extra, "--device") or "").split(",") if d]
    if devices:
        return "in host memory (--device none)" if devices[0] == "none" else f"on {devices[0]} (--device's first)"
    return "on the first GPU (--mmproj-offload is the default)"


def sidecar_line(side: Any, settings: Any = None) -> str:
    """One line on a sidecar (`remote.hub.Sidecar`): what llama-server does with it, and that the plan
    does not count it (the planner plans neither a projector nor a separate draft model)."""
    size = f"{side.size / 2**30:.2f} GiB" if side.size >= 2**30 // 10 else f"{side.size / 2**20:.1f} MiB"
    what = f"llama-server also downloads {safe_text(side.path)} ({size})"
    if side.role == "mmproj":
        fit = "" if getattr(settings, "fit", None) is False else " (--fit reserves room for it before fitting)"
        return (f"{what} and loads it {mmproj_place(settings)}, with its own compute buffer: not in this plan{fit}; "
                "--no-mmproj skips it")
    spec = f"--spec-type draft-{side.role}"
    if not side.is_draft:
        return f"{what} for {spec}, but the -md draft is used: not in this plan"
    return (f"{what} and loads it as the draft model for {spec} (as -md would): not in this plan, which counts "
            "no separate draft model (only the MTP layers inside the model file)")


def _slots(ctx: dict[str, Any]) -> str:
    """`1 slot`, `4 slots, KV unified` or `4 slots, KV per slot` (one slot: the layout changes nothing)."""
    n = int(ctx["n_seq_max"])
    return counted(n, "slot") + ("" if n == 1 else ", KV unified" if ctx["kv_unified"] else ", KV per slot")


def render(p: Any, devices: Any = None) -> str:
    """A plain-text table for the terminal; `devices` is the DeviceSet planned on: its source tag, and
    a row per `--rpc` server that did not answer (the total's verdict says so, never "ok")."""
    source = devices.source if devices is not None else ""
    unreachable = tuple(devices.unreachable) if devices is not None else ()
    d = p.to_dict()
    m = d["model"]
    ctx = m["context"]
    lines = [
        f"{safe_text(m['name'] or m['path'])}  ({safe_text(m['architecture'])}, {m['weights_mib']:.0f} MiB of weights, "
        f"{m['attention_layers']} attention + {m['recurrent_layers']} recurrent layers, {m['nextn_predict_layers']} MTP)",
        f"n_ctx {ctx['n_ctx']} ({_slots(ctx)}), "
        f"ubatch {ctx['n_ubatch']}, KV {ctx['cache_type_k']}/{ctx['cache_type_v']}"
        + (f", MTP draft KV {ctx['cache_type_k_draft']}/{ctx['cache_type_v_draft']}, n_rs_seq {ctx['n_rs_seq']}" if ctx["mtp"] else "")
        + (f"  [devices: {source}]" if source else ""),
        "",
    ]
    cols = ("weights_mib", "kv_mib", "draft_kv_mib", "recurrent_mib", "compute_mib", "draft_compute_mib", "output_mib",
            "needed_mib", "free_mib", "headroom_mib")
    head = ("device", "weights", "KV", "draft KV", "recurrent", "compute", "draft cmp", "output", "needed", "free", "headroom", "risk")
    rows = [head]
    for ep in unreachable:
        rows.append((f"RPC {ep}"[:44], *("-" for _ in cols), "unreachable"))
    for dev in d["devices"] + [dict(d["totals"], name="total")]:
        risk = "unreachable" if dev["name"] == "total" and unreachable else str(dev.get("risk", ""))
        rows.append((safe_text(dev["name"])[:44], *(("-" if dev.get(c) is None else f"{dev[c]:.0f}") for c in cols), risk))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        lines.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)))
    fit = m["fit"]
    if fit["active"] and fit["action"] not in ("none",):
        lines += ["", f"fit: {safe_text(fit['message'])}"]
    for w in m["warnings"]:  # they may quote the model's own text (its architecture, a tensor's name)
        lines.append(f"warning: {safe_text(w)}")
    for note in devices.notes() if unreachable else ():
        lines.append(f"unreachable: {note} Start its ggml-rpc-server, or plan it at a size with --rpc-mib MIB.")
    return "\n".join(lines)
