"""Matching NVML devices to llama.cpp's CUDA devices (CUDA0, CUDA1...), which are ordered differently.

NVML (and nvidia-smi) index devices by PCI bus id. The CUDA runtime, which llama.cpp uses, orders
them fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, then keeps and renumbers only those listed
in CUDA_VISIBLE_DEVICES. Indices therefore cannot be compared; PCI bus ids and UUIDs can. See
docs/gpu-order.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from tui.core.gpu.types import GpuDevice

_PCI = re.compile(r"^\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*$")


def pci_key(bus_id: object) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) from NVML's "00000000:01:00.0" or CUDA's "0000:01:00.0"."""
    if not isinstance(bus_id, str):
        return None
    m = _PCI.match(bus_id)
    if not m:
        return None
    domain, bus, dev, fn = m.groups()
    return int(domain or "0", 16), int(bus, 16), int(dev, 16), int(fn)


def _uuid_matches(ident: str, uuid: object) -> bool:
    """CUDA accepts a unique UUID prefix ("GPU-8932f937"); so do we."""
    if not isinstance(uuid, str) or not ident.upper().startswith("GPU-") or len(ident) < 8:
        return False
    return uuid.lower().startswith(ident.lower())


def find_device(ident: str, devices: Sequence[GpuDevice]) -> GpuDevice | None:
    """The one device with this PCI bus id or UUID (prefix); None if none or ambiguous."""
    key = pci_key(ident)
    if key is not None:
        hits = [d for d in devices if pci_key(d.pci_bus_id) == key]
    else:
        hits = [d for d in devices if _uuid_matches(ident.strip(), d.uuid)]
    return hits[0] if len(hits) == 1 else None


def match_llama_devices(llama_ids: Mapping[str, str], devices: Sequence[GpuDevice]) -> dict[str, int]:
    """{"CUDA0": "0000:41:00.0", ...} (from llama-server's `using device` lines) -> {"CUDA0": NVML index}.

    Devices whose id matches nothing (an RPC endpoint, a Vulkan device) are left out.
    """
    out: dict[str, int] = {}
    for name, ident in llama_ids.items():
        dev = find_device(ident, devices)
        if dev is not None:
            out[name] = dev.index
    return out


def cuda_order(
    devices: Sequence[GpuDevice],
    *,
    cuda_device_order: str | None = None,
    cuda_visible_devices: str | None = None,
) -> tuple[int, ...] | None:
    """NVML indices in CUDA order (position 0 = CUDA0) as a process with this environment sees them.

    None when it cannot be known without CUDA itself: FASTEST_FIRST (the default) on devices of
    different models, where only the CUDA runtime knows which it ranks fastest. Identical devices
    tie, and CUDA breaks ties by PCI bus id.
    """
    by_pci = sorted(devices, key=lambda d: pci_key(d.pci_bus_id) or (1 << 32, d.index, 0, 0))
    order_name = (cuda_device_order or "FASTEST_FIRST").strip().upper()
    base: list[GpuDevice] | None
    if order_name == "PCI_BUS_ID" or len({d.name for d in devices}) <= 1:
        base = by_pci
    else:
        base = None  # FASTEST_FIRST on mixed models
    if cuda_visible_devices is None:
        return tuple(d.index for d in base) if base is not None else None
    visible: list[GpuDevice] = []
    for raw in cuda_visible_devices.split(","):
        entry = raw.strip()
        if entry.lstrip("-").isdigit():
            n = int(entry)
            if base is None:
                return None  # an index into an order we cannot know
            if not 0 <= n < len(base) or base[n] in visible:
                break  # CUDA ignores this entry and everything after it
            visible.append(base[n])
        else:
            dev = find_device(entry, devices) if entry.upper().startswith("GPU-") else None
            if dev is None or dev in visible:
                break
            visible.append(dev)
    return tuple(d.index for d in visible)


def llama_names(order: Sequence[int], backend: str = "CUDA") -> dict[str, int]:
    """(2, 0) -> {"CUDA0": 2, "CUDA1": 0}: llama.cpp device names for a CUDA order."""
    return {f"{backend}{i}": nvml_index for i, nvml_index in enumerate(order)}
