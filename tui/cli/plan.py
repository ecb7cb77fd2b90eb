"""Plan llama-server's memory per device before launching: weights, KV, MTP draft KV, recurrent
state, compute and output buffers, the --fit-target margin and an OOM risk verdict per device.

Usage: mtp-tune plan -m FILE.gguf [any llama-server flags] [--gpus SPEC] [--json]
SPEC: `cpu` (host only), sizes like `2x16GiB` or `6GiB,24GiB`, or a profile name
(rtx3060-laptop-6g, rtx3090-24g, rtx4090-24g, 2xv100-16g, h200-141g). Without --gpus: the real GPUs
(NVML), or `cpu` when there are none. `--rpc host:port,...` devices are planned as remote devices.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tui.cli._common import fail, print_json

COMMAND = "plan"
HELP = "per-device memory plan and OOM risk for llama-server flags (MTP-aware)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", metavar="SPEC", help="cpu | 2x16GiB | 6GiB,24GiB | a profile name (default: real GPUs or cpu)")
    p.add_argument("--json", action="store_true", help="print one JSON object: model, devices, totals")
    p.add_argument("--rpc-mib", type=float, default=None, metavar="MIB",
                   help="memory of each --rpc device (default: this machine's RAM, as ggml-rpc-server reports)")
    p.set_defaults(server_args=[])
    # llama-server's flags are open-ended: whatever this parser does not know is theirs, in order.
    p.allow_abbrev = False
    parse_known = p.parse_known_args

    def parse_known_args(args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = parse_known(args, namespace)
        ns.server_args = list(getattr(ns, "server_args", []) or []) + [a for a in extras if a != "--"]
        return ns, []

    p.parse_known_args = parse_known_args  # type: ignore[method-assign]


def _host_memory() -> tuple[float | None, float | None]:
    """(MemTotal, MemAvailable) in MiB from /proc/meminfo; None where unknown."""
    try:
        vals: dict[str, float] = {}
        with open("/proc/meminfo") as f:
            for line in f:
                k, _, rest = line.partition(":")
                vals[k] = float(rest.split()[0]) / 1024
        return vals.get("MemTotal"), vals.get("MemAvailable")
    except (OSError, ValueError, IndexError):
        return None, None


def _real_gpus() -> list[Any]:
    """NVML GPUs as planner devices (CUDA order); [] when NVML or the telemetry module is unavailable."""
    from tui.core.planner import DeviceSpec

    try:
        from tui.core.gpu import Nvml, cuda_order  # written in parallel; optional here

        reading = Nvml(register_atexit=False).read()
        devs = list(getattr(reading, "devices", ()) or ())
        order = cuda_order(devs) or tuple(d.index for d in devs)
        by_index = {d.index: d for d in devs}
        out = []
        for i, idx in enumerate(order):
            d = by_index[idx]
            total = float(d.memory_total_mib)
            free = d.memory_free_mib
            free_f = float(free) if isinstance(free, (int, float)) else max(0.0, total - float(d.memory_used_mib))
            out.append(DeviceSpec(f"CUDA{i}", str(d.name), total, free_f))
        return out
    except Exception:  # noqa: BLE001 - no NVML, no driver, no GPU: plan for the CPU
        return []


def _parse_settings(args: list[str]) -> Any:
    """llama-server flags -> Settings, through tui.core.argv when it is there."""
    try:
        from tui.core.argv import settings_from_argv
    except ImportError:  # pragma: no cover - the settings engineer's module is part of the package
        settings_from_argv = None
    if settings_from_argv is not None:
        imp = settings_from_argv(args)
        errors = [p for p in getattr(imp, "problems", []) if getattr(p, "severity", "") == "error"]
        if errors:
            raise ValueError("; ".join(getattr(p, "message", str(p)) for p in errors))
        return imp.settings
    return _local_settings(args)


def _local_settings(args: list[str]) -> Any:
    """A small fallback parser for the flags the planner reads."""
    from tui.core.settings import Settings

    s = Settings()
    ints = {"-c": "ctx_size", "--ctx-size": "ctx_size", "-np": "parallel", "--parallel": "parallel",
            "-b": "batch_size", "--batch-size": "batch_size", "-ub": "ubatch_size", "--ubatch-size": "ubatch_size",
            "--spec-draft-n-max": "spec_draft_n_max", "-mg": "main_gpu", "--main-gpu": "main_gpu",
            "-ncmoe": "n_cpu_moe", "--n-cpu-moe": "n_cpu_moe", "-fitc": "fit_ctx", "--fit-ctx": "fit_ctx"}
    strs = {"-m": "model", "--model": "model", "-ctk": "cache_type_k", "--cache-type-k": "cache_type_k",
            "-ctv": "cache_type_v", "--cache-type-v": "cache_type_v", "-ctkd": "cache_type_k_draft",
            "--spec-draft-type-k": "cache_type_k_draft", "-ctvd": "cache_type_v_draft", "--spec-draft-type-v": "cache_type_v_draft",
            "-fa": "flash_attn", "--flash-attn": "flash_attn", "-ngl": "n_gpu_layers", "--n-gpu-layers": "n_gpu_layers",
            "-sm": "split_mode", "--split-mode": "split_mode", "-lm": "load_mode", "--load-mode": "load_mode"}
    i = 0
    while i < len(args):
        a = args[i]
        v = args[i + 1] if i + 1 < len(args) else None
        if a in ints and v is not None:
            setattr(s, ints[a], int(v))
            i += 2
        elif a in strs and v is not None:
            setattr(s, strs[a], v)
            i += 2
        elif a == "--spec-type" and v is not None:
            s.spec_type.extend(v.split(","))
            i += 2
        elif a in ("-ts", "--tensor-split") and v is not None:
            s.tensor_split = [float(x) for x in v.replace("/", ",").split(",")]
            i += 2
        elif a in ("-fit", "--fit") and v is not None:
            s.fit = v == "on"
            i += 2
        elif a in ("-fitt", "--fit-target") and v is not None:
            s.fit_target = [int(x) for x in v.split(",")]
            i += 2
        elif a == "--rpc" and v is not None:
            s.rpc = v.split(",")
            i += 2
        elif a in ("-cmoe", "--cpu-moe"):
            s.cpu_moe = True
            i += 1
        else:
            s.extra_args.append(a)
            i += 1
    return s


def _devices(spec: str | None, rpc: list[str], rpc_mib: float | None) -> tuple[list[Any], str]:
    from tui.core.hwprofiles import parse_gpus_spec
    from tui.core.planner import DeviceSpec

    host_total, host_free = _host_memory()
    remote = []
    for i, ep in enumerate(rpc):
        mib = rpc_mib if rpc_mib is not None else (host_total or 0.0)
        remote.append(DeviceSpec(f"RPC0[{ep}]", f"RPC server {i} at {ep}", mib, mib, remote=True))
    tag = f"{len(remote)} RPC + " if remote else ""
    if spec is None:
        local = _real_gpus()
        return remote + local, tag + ("nvml" if local else "cpu")
    prof = parse_gpus_spec(spec)  # ValueError with a message naming the bad part
    if prof is None:
        return remote, tag + "cpu"
    local = [DeviceSpec(f"CUDA{i}", d.name, float(d.total_mib), float(d.total_mib - d.baseline_mib))
             for i, d in enumerate(prof.devices)]
    return remote + local, tag + prof.key


def run(args: argparse.Namespace) -> int:
    from tui.core.gguf_meta import GGUFError, read_gguf
    from tui.core.planner import PlanError, plan

    server_args = [a for a in args.server_args if a != "--"]
    try:
        settings = _parse_settings(server_args)
    except ValueError as exc:
        return fail(f"the llama-server flags could not be read: {exc}")
    if not settings.model:
        return fail("plan needs the model file: mtp-tune plan -m FILE.gguf [llama-server flags] [--gpus SPEC] [--json]")
    try:
        devices, source = _devices(args.gpus, list(settings.rpc), args.rpc_mib)
    except ValueError as exc:
        return fail(str(exc))
    try:
        meta = read_gguf(os.path.expanduser(settings.model))
        host_total, host_free = _host_memory()
        p = plan(meta, settings, devices, host_total_mib=host_total, host_free_mib=host_free)
    except (GGUFError, PlanError) as exc:
        return fail(str(exc))
    if args.json:
        print_json(p.to_dict())
        return 0
    print(render(p, source))
    return 0 if p.worst_risk != "oom" else 1


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
