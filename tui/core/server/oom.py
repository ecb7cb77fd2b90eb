"""An out-of-memory ending read from a llama-server log: GPU or host, which device, what was being
allocated (weights, KV cache, compute buffers; of the MTP draft context or not) and how much.

Patterns are the verbatim wording of llama.cpp b11434's CUDA/HIP/MUSA, Vulkan, Metal and CPU
backends and of its allocators.
"""

from __future__ import annotations

import re

from tui.core.server.failures import Failure, FailureKind

# Memory: (regex, where) with where in {"device", "host"}; a named group `buf` is a buffer type
# (CUDA0, Vulkan0, CPU, CUDA_Host, Metal...), `dev` a CUDA device index, `size` a size in MiB.
_OOM_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"allocating (?P<size>[\d.]+) MiB on device (?P<dev>\d+): (?:cuda|hip|musa)Malloc failed: "
                r"out of memory", re.I), "device"),
    (re.compile(r"(?:cuda|hip|musa)Malloc failed: out of memory", re.I), "device"),
    (re.compile(r"(?:CUDA|ROCm|MUSA) error: out of memory"), "device"),
    (re.compile(r"ErrorOutOfDeviceMemory|OutOfDeviceMemoryError|out of device memory|OUT_OF_DEVICE_MEMORY", re.I),
     "device"),
    (re.compile(r"Device memory allocation of size (?P<bytes>\d+) failed"), "device"),
    (re.compile(r"failed to allocate Metal buffer"), "device"),
    (re.compile(r"ggml_metal\w*: error: failed to allocate buffer, size = *(?P<size>[\d.]+) MiB"), "device"),
    (re.compile(r"failed to allocate (?P<buf>[\w.:\[\]-]+) buffer of size (?P<bytes>\d+)"), "auto"),
    (re.compile(r"unable to allocate (?P<buf>[\w.-]+) buffer"), "auto"),
    (re.compile(r"ErrorOutOfHostMemory|OutOfHostMemoryError", re.I), "host"),
    (re.compile(r"insufficient memory \(attempted to allocate (?P<mb>[\d.]+) MB\)"), "host"),
    (re.compile(r"Memory allocation of size (?P<bytes>\d+) failed"), "host"),
    (re.compile(r"cpu_buffer_type_alloc_buffer: failed to allocate buffer of size (?P<bytes>\d+)"), "host"),
    (re.compile(r"std::bad_alloc|\bbad_alloc\b|Cannot allocate memory"), "host"),
    (re.compile(r"failed to allocate memory for prompt cache state"), "host"),
]
_OOM_COMPONENT: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"failed to allocate buffer for kv cache|kv_cache", re.I), "the KV cache"),
    (re.compile(r"failed to allocate buffer for rs cache|memory_recurrent", re.I), "the recurrent state"),
    (re.compile(r"compute (?:pp |tg )?buffers|gallocr", re.I), "a compute buffer"),
    (re.compile(r"output buffer", re.I), "the output buffer"),
    (re.compile(r"unable to allocate \S+ buffer|llama_model_load", re.I), "the model weights"),
    (re.compile(r"prompt cache", re.I), "the host prompt cache (--cache-ram)"),
]
_HOST_BUFS = re.compile(r"^(?:CPU|.*_Host|.*Host|CPU_\w+)$")
_MTP_CONTEXT = re.compile(r"creating MTP draft context")


def oom_failure(lines: list[str], msgs: list[str]) -> Failure | None:
    """The first out-of-memory line of the log as a Failure (None if there is none)."""
    for i, (raw, m) in enumerate(zip(lines, msgs)):
        for pat, where in _OOM_PATTERNS:
            om = pat.search(m)
            if not om:
                continue
            gd = om.groupdict()
            buf = gd.get("buf")
            if where == "auto":
                where = "host" if buf and _HOST_BUFS.match(buf) else "device"
            device = buf or (f"CUDA{gd['dev']}" if gd.get("dev") else None)
            if device is None:
                device = _device_from_context(msgs, i) if where == "device" else "host RAM"
            size = gd.get("size") or gd.get("mb")
            if size is None and gd.get("bytes"):
                size = f"{int(gd['bytes']) / 1048576:.2f}"
            component = _component(msgs, i)
            draft = any(_MTP_CONTEXT.search(x) for x in msgs[:i])
            what = f" while allocating {component}" if component else ""
            if draft:
                what += " of the MTP draft context" if component else " (after the MTP draft context was created)"
            amount = f" ({size} MiB)" if size else ""
            if where == "device":
                return Failure(
                    FailureKind.OOM_DEVICE,
                    f"Out of GPU memory on {device or 'the GPU'}{what}{amount}: the weights, KV cache and compute "
                    "buffers do not fit in free VRAM.",
                    device,
                    "Lower -c (context), quantize the KV cache (-ctk/-ctv q8_0; for MTP also -ctkd/-ctvd q8_0), "
                    "use --fit on with a larger --fit-target, offload fewer layers (-ngl) or MoE experts to the CPU "
                    "(--n-cpu-moe), or a smaller -ub; close other programs that use the GPU.",
                    evidence=raw,
                )
            return Failure(
                FailureKind.OOM_HOST,
                f"Out of host memory{what}{amount}: the system could not allocate RAM for llama-server.",
                device if device != "host RAM" else None,
                "Free RAM, lower -c or --cache-ram (the host prompt cache, default 8192 MiB), keep the default "
                "--load-mode (mmap) instead of 'none', or offload more to the GPU.",
                evidence=raw,
            )
    return None


def _device_from_context(msgs: list[str], i: int) -> str | None:
    for m in reversed(msgs[max(0, i - 5): i + 3]):
        dm = re.search(r"current device: (\d+)", m)
        if dm:
            return f"CUDA{dm.group(1)}"
        if "vulkan" in m.lower():
            return "Vulkan"
        if "metal" in m.lower():
            return "Metal"
    return None


def _component(msgs: list[str], i: int) -> str | None:
    for m in msgs[i: i + 5]:
        if "buffer size =" in m:  # an INFO size line, not the failed allocation
            continue
        for pat, name in _OOM_COMPONENT:
            if pat.search(m):
                return name
    return None
