"""Named simulated GPU setups, for planning and demos on machines that are not the one at hand.

Totals are what NVML reports on those cards (slightly under the marketing size); the baseline is
memory already in use before llama-server starts (a desktop compositor, the CUDA context).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MiB = 1024 * 1024
GiB = 1024 * MiB
#: GPUs one machine can have for llama.cpp: a CUDA build of ggml sees at most 16 (GGML_CUDA_MAX_DEVICES,
#: ggml-cuda.h:20; Vulkan and CANN also 16). A bound so `99999999999x1GiB` is refused before a device
#: list is built (it once allocated until killed). llama-server's own cap on GPUs and RPC servers
#: together is `options.rules.MAX_DEVICES`, checked by the validator.
MAX_GPUS = 16
#: The largest simulated device: 16 TiB, fifty times the largest accelerator made (288 GB). A bound,
#: so a size of 400 digits is one sentence and not an overflow deep in the planner.
MAX_DEVICE_MIB = 16 * 1024 * 1024


@dataclass(frozen=True)
class SimDevice:
    name: str
    total_mib: int
    baseline_mib: int = 0  # used before the server starts


@dataclass(frozen=True)
class HwProfile:
    key: str
    description: str
    devices: tuple[SimDevice, ...]


PROFILES: dict[str, HwProfile] = {
    p.key: p
    for p in (
        HwProfile(
            "rtx3060-laptop-6g",
            "Laptop RTX 3060 6 GB with a desktop session",
            (SimDevice("NVIDIA GeForce RTX 3060 Laptop GPU", 6144, baseline_mib=310),),
        ),
        HwProfile(
            "rtx3090-24g",
            "RTX 3090 24 GB, headless",
            (SimDevice("NVIDIA GeForce RTX 3090", 24576, baseline_mib=260),),
        ),
        HwProfile(
            "rtx4090-24g",
            "RTX 4090 24 GB with a desktop session",
            (SimDevice("NVIDIA GeForce RTX 4090", 24564, baseline_mib=480),),
        ),
        HwProfile(
            "2xv100-16g",
            "Two Tesla V100-SXM2 16 GB",
            (
                SimDevice("Tesla V100-SXM2-16GB", 16384, baseline_mib=300),
                SimDevice("Tesla V100-SXM2-16GB", 16384, baseline_mib=300),
            ),
        ),
        HwProfile(
            "h200-141g",
            "One H200 141 GB",
            (SimDevice("NVIDIA H200", 143771, baseline_mib=540),),
        ),
    )
}

_SIZE = re.compile(r"^\s*(?:(\d+)\s*x\s*)?(\d+(?:\.\d+)?)\s*(GiB|GB|G|MiB|MB|M)\s*$", re.IGNORECASE)


def parse_gpus_spec(spec: str) -> HwProfile | None:
    """`cpu` -> None (host only); a profile name; or a list like `2x16GiB` / `6GiB,24GiB`.

    Raises ValueError naming the bad part.
    """
    s = spec.strip()
    if s.lower() == "cpu":
        return None
    if s in PROFILES:
        return PROFILES[s]
    devices: list[SimDevice] = []
    parts = s.split(",")
    if len(parts) > MAX_GPUS:
        raise ValueError(_too_many(s))
    for part in parts:
        m = _SIZE.match(part)
        if not m:
            raise ValueError(
                f"--gpus: {_shown(part)} is not a size like 16GiB or 2x16GiB, nor a profile "
                f"({', '.join(PROFILES)}), nor 'cpu'"
            )
        # counted before anything is built: `99999999999x1GiB` once allocated until killed
        count_text = (m.group(1) or "1").lstrip("0") or "0"
        if len(count_text) > 3 or len(devices) + int(count_text) > MAX_GPUS:
            raise ValueError(_too_many(s))
        count = int(count_text)
        value = float(m.group(2))
        unit = m.group(3).lower()
        mib_f = value * 1024 if unit.startswith("g") else value
        if not math.isfinite(mib_f) or mib_f > MAX_DEVICE_MIB:
            raise ValueError(f"--gpus: {_shown(part)} is larger than {MAX_DEVICE_MIB // (1024 * 1024)} TiB, "
                             "more than any device; give its size in GiB or MiB")
        mib = int(mib_f)
        if count < 1 or mib < 1:
            raise ValueError(f"--gpus: {_shown(part)} must have a positive count and size")
        first = len(devices)
        devices.extend(SimDevice(f"Simulated GPU {first + i}", mib) for i in range(count))
    return HwProfile(s, f"custom: {s}", tuple(devices))


def _shown(text: str) -> str:
    """A part of the spec as a message quotes it: at most 40 characters (a hostile one may be megabytes)."""
    text = text.strip()
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _too_many(spec: str) -> str:
    return (f"--gpus: {_shown(spec)} asks for more than {MAX_GPUS} GPUs; llama.cpp's CUDA build sees at most "
            f"{MAX_GPUS} (GGML_CUDA_MAX_DEVICES)")
