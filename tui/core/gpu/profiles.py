"""Named simulated GPU setups, for planning and demos on machines that are not the one at hand.

Totals are what NVML reports on those cards (slightly under the marketing size); the baseline is
memory already in use before llama-server starts (a desktop compositor, the CUDA context).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MiB = 1024 * 1024
GiB = 1024 * MiB


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
    for part in s.split(","):
        m = _SIZE.match(part)
        if not m:
            raise ValueError(
                f"--gpus: {part.strip()!r} is not a size like 16GiB or 2x16GiB, nor a profile "
                f"({', '.join(PROFILES)}), nor 'cpu'"
            )
        count = int(m.group(1) or 1)
        value = float(m.group(2))
        unit = m.group(3).lower()
        mib = int(value * 1024) if unit.startswith("g") else int(value)
        if count < 1 or mib < 1:
            raise ValueError(f"--gpus: {part.strip()!r} must have a positive count and size")
        first = len(devices)
        devices.extend(SimDevice(f"Simulated GPU {first + i}", mib) for i in range(count))
    return HwProfile(s, f"custom: {s}", tuple(devices))
