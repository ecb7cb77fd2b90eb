"""What `--fit` chose, rebuilt from its trace as the flags that pin it: -c, -ngl, -ts, -ot.

common/fit.cpp never prints its result as arguments; it prints a reduced context ("context size
reduced from X to Y") and, after moving layers, one summary line per device ("N layers (M
overflowing)"), plus the overflow type of a device's first partial layer ("set ngl_per_device[i]
.(n_layer, n_part, overflow_type)=(.., .., UP)"). `set_ngl_tensor_split_tbo` turns those into
n_gpu_layers, tensor_split and tensor-buffer overrides; `choice_from_trace` does the same here, so a
second dry run can measure exactly that configuration and `mtp-tune plan --exact` can show it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tui.core.options.settings import Settings
from tui.core.planning.breakdown import DryRunLog
from tui.core.planning.gguf_meta import HParams
from tui.core.planning.result import layers_on_devices

#: fit.cpp get_overflow_pattern, by overflow type
_PATTERNS = {
    "ATTN": r"blk\.{il}\.ffn_(gate|up|gate_up|down).*",
    "UP": r"blk\.{il}\.ffn_(gate|gate_up|down).*",
    "GATE": r"blk\.{il}\.ffn_down.*",
    "MOE": r"blk\.{il}\.ffn_(up|down|gate_up|gate)_(ch|)exps",
}


@dataclass
class FitChoice:
    """fit's decision: `changed` when it differs from the settings as given."""

    action: str  # "off" | "none" | "reduce-ctx" | "move-layers" | "give-up"
    message: str
    changed: bool = False
    n_ctx: int | None = None
    n_gpu_layers: int | None = None
    tensor_split: list[float] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)  # -ot entries, pattern=BUFFER_TYPE

    def apply(self, s: Settings) -> Settings:
        """The settings with fit's choice pinned (what the plan is built for)."""
        out = s
        if self.n_ctx:
            out = replace(out, ctx_size=self.n_ctx)
        if self.n_gpu_layers is not None:
            out = replace(out, n_gpu_layers=str(self.n_gpu_layers))
        if self.tensor_split:
            out = replace(out, tensor_split=list(self.tensor_split))
        if self.overrides:
            out = replace(out, extra_args=[*out.extra_args, "-ot", ",".join(self.overrides)])
        return out

    def renamed(self, names: dict[str, str]) -> "FitChoice":
        """The same choice with overflow buffer types renamed (a stand-in's RPC name -> the device it plays)."""
        def one(o: str) -> str:
            pat, _, buft = o.rpartition("=")
            return f"{pat}={names.get(buft, buft)}"
        return replace(self, overrides=[one(o) for o in self.overrides])

    def flags(self) -> list[str]:
        """The chosen values as llama-server flags (for display and copy-paste)."""
        out: list[str] = []
        if self.n_ctx:
            out += ["-c", str(self.n_ctx)]
        if self.n_gpu_layers is not None:
            out += ["-ngl", str(self.n_gpu_layers)]
        if self.tensor_split:
            out += ["-ts", ",".join(f"{v:g}" for v in self.tensor_split)]
        if self.overrides:
            out += ["-ot", ",".join(self.overrides)]
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "FitChoice":
        d = d or {}
        return cls(str(d.get("action", "none")), str(d.get("message", "")), bool(d.get("changed", False)),
                   d.get("n_ctx"), d.get("n_gpu_layers"), [float(v) for v in d.get("tensor_split", [])],
                   [str(v) for v in d.get("overrides", [])])


def _device_layers(log: DryRunLog) -> list[tuple[int, int]]:
    """(n_layer, n_part) per offload device, in llama.cpp's device order."""
    target, _ = log.step1()
    rows = target.devices() if target else []
    out = []
    for r in rows:
        label = f"{r.name} ({r.description})"
        hit = log.fit.layers.get(label) or next((v for k, v in log.fit.layers.items() if k.startswith(r.name + " ")), None)
        out.append((hit.n_layer, hit.n_part) if hit else (0, 0))
    return out


def choice_from_trace(log: DryRunLog, settings: Settings, hp: HParams, n_devices: int, buft_names: Sequence[str]) -> FitChoice:
    """Rebuild fit's choice; `buft_names` are the dry run's device buffer types (overflow targets)."""
    fit = log.fit
    if settings.fit is False:
        return FitChoice("off", "--fit off: llama-server loads exactly what is given.")
    if fit.status == "none":
        return FitChoice("none", fit.message)
    if fit.status in ("failed", "error"):
        return FitChoice("give-up", f"--fit could not make this fit ({fit.message}); llama-server loads as given.")
    if fit.ctx_only or not fit.layers:
        if fit.reduced_ctx:
            return FitChoice("reduce-ctx", f"--fit reduces the context to {fit.reduced_ctx} tokens.", True, n_ctx=fit.reduced_ctx)
        return FitChoice("none", "--fit reported no change.")
    per = _device_layers(log)
    ngl = sum(n for n, _ in per)
    hp_ngl = hp.n_layer + (hp.n_nextn if settings.mtp_enabled else 0)
    overrides: list[str] = []
    il0 = hp_ngl + 1 - ngl
    for i, (n_layer, n_part) in enumerate(per):
        il0 += n_layer - n_part
        for il in range(il0, il0 + n_part):
            kind = fit.overflow.get(i, "MOE") if il == il0 else "MOE"
            buft = "CPU"
            if il == il0 and kind != "MOE" and i + 1 < len(per) and i + 1 < len(buft_names):
                buft = buft_names[i + 1]
            overrides.append(_PATTERNS[kind].format(il=il) + "=" + buft)
        il0 += n_part
    ts = [float(n) for n, _ in per] if n_devices > 1 else []
    msg = f"--fit sets -ngl {ngl}: it {layers_on_devices(ngl, hp_ngl + 1, max(1, n_devices))}"
    n_host = sum(o.endswith("=CPU") for o in overrides)
    if n_host:
        msg += f", with {n_host} layers' FFN/expert tensors in host memory"
    if len(overrides) > n_host:
        msg += f", {len(overrides) - n_host} partial layer(s) overflowing to the next device"
    if fit.reduced_ctx:
        msg += f", at a context of {fit.reduced_ctx} tokens"
    return FitChoice("move-layers", msg + ".", True, n_ctx=fit.reduced_ctx, n_gpu_layers=ngl, tensor_split=ts,
                     overrides=overrides)
