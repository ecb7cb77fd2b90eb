"""A memory plan as data: per-device components, the risk verdict and the expected --fit outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tui.core.planning.devices import HOST
from tui.core.planning.errorband import error_band
from tui.core.planning.gguf_meta import GGUFMeta
from tui.core.planning.resolve import Resolved
from tui.core.options.settings import Settings

MiB = 1024 * 1024
COMPONENT_KEYS: tuple[str, ...] = ("weights", "kv", "draft_kv", "recurrent", "compute", "draft_compute", "output")


@dataclass
class DevicePlan:
    key: str
    name: str
    total_mib: float | None
    free_mib: float | None
    margin_mib: float
    components: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in COMPONENT_KEYS})
    layers: list[int] = field(default_factory=list)
    remote: bool = False

    @property
    def needed_mib(self) -> float:
        return sum(self.components.values())

    @property
    def headroom_mib(self) -> float | None:
        return None if self.free_mib is None else self.free_mib - self.needed_mib

    @property
    def risk(self) -> str:
        """`oom` when it does not fit, `tight` when it fits but inside the margin, else `ok`."""
        h = self.headroom_mib
        if h is None:
            return "ok"
        if h < 0:
            return "oom"
        if h < self.margin_mib:
            return "tight"
        return "ok"

    def to_dict(self) -> dict[str, Any]:
        r2 = lambda v: None if v is None else round(v, 2)  # noqa: E731
        c = self.components
        return {
            "name": self.key if self.key == HOST else f"{self.key} ({self.name})" if self.name and self.name != self.key else self.key,
            "total_mib": r2(self.total_mib), "free_mib": r2(self.free_mib),
            "weights_mib": r2(c["weights"]), "kv_mib": r2(c["kv"]), "draft_kv_mib": r2(c["draft_kv"]),
            "recurrent_mib": r2(c["recurrent"]), "compute_mib": r2(c["compute"]),
            "draft_compute_mib": r2(c["draft_compute"]), "output_mib": r2(c["output"]),
            "margin_mib": r2(self.margin_mib), "needed_mib": r2(self.needed_mib),
            "headroom_mib": r2(self.headroom_mib), "risk": self.risk,
        }


def layers_on_devices(ngl: int, total: int, n_devices: int) -> str:
    """Where `-ngl ngl` puts a model's `total` layers, worded by direction: "offloads 2 layers" read
    backwards to users (it sounds like 2 layers leave the GPU, when 2 are all that stay on it)."""
    where = "the GPU" if n_devices <= 1 else f"the {n_devices} devices"
    if ngl >= total:
        return f"keeps all {total} layers on {where}"
    if ngl <= 0:
        return "keeps every layer in host RAM"
    return f"keeps {ngl} of {total} layers on {where}, the rest in host RAM"


@dataclass
class FitOutcome:
    """What `--fit on` is expected to do with these settings."""

    active: bool
    action: str  # "off", "none", "reduce-ctx", "move-layers", "give-up"
    message: str
    n_ctx: int | None = None
    n_gpu_layers: int | None = None
    n_cpu_moe: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Plan:
    model: GGUFMeta
    settings: Settings
    resolved: Resolved
    devices: list[DevicePlan]  # GPUs/RPC first (llama.cpp order), the host last
    fit: FitOutcome
    warnings: list[str] = field(default_factory=list)
    layer_device: list[str] = field(default_factory=list)  # device key per block, + output at [n_layer_all]
    pipeline_parallel: bool = False
    calibrated: bool = False  # compute figures from the model's calibration (planning.calibration)

    @property
    def error_band(self) -> dict[str, float]:
        """Component -> measured error band of the estimate (%, held-out; see planning.errorband): the
        calibrated estimate's once the model carries llama.cpp's calibration."""
        return error_band(calibrated=self.calibrated)

    def device(self, key: str) -> DevicePlan | None:
        return next((d for d in self.devices if d.key == key), None)

    @property
    def n_ctx_slot(self) -> int:
        """The tokens one slot can hold, as llama-server counts them (server-context.cpp n_ctx_slot):
        the per-slot context, capped at the model's training context. The KV is still allocated for
        the whole per-slot context, so a cap is memory spent on tokens no request can use."""
        train = self.model.hparams.n_ctx_train
        return min(self.resolved.n_ctx_seq, train) if train > 0 else self.resolved.n_ctx_seq

    @property
    def context_note(self) -> str:
        """One sentence when llama-server will cap the slot at the training context, else ""."""
        r, train = self.resolved, self.model.hparams.n_ctx_train
        if train <= 0 or r.n_ctx_seq <= train:
            return ""
        per = f" ({r.n_ctx} over {r.n_seq_max} slots)" if r.n_stream > 1 else ""
        return (f"the slot context {r.n_ctx_seq}{per} exceeds the model's training context {train}: llama-server "
                f"caps each slot at {train} tokens, yet allocates the KV for {r.n_ctx_seq}")

    def totals(self) -> dict[str, float]:
        tot = {k: 0.0 for k in COMPONENT_KEYS}
        for d in self.devices:
            for k, v in d.components.items():
                tot[k] += v
        return tot

    @property
    def worst_risk(self) -> str:
        order = {"ok": 0, "tight": 1, "oom": 2}
        return max((d.risk for d in self.devices), key=lambda r: order[r], default="ok")

    def to_dict(self) -> dict[str, Any]:
        """The `mtp-tune plan --json` object: model, devices, totals (extras live under model)."""
        devs = [d.to_dict() for d in self.devices]
        keys = ("weights_mib", "kv_mib", "draft_kv_mib", "recurrent_mib", "compute_mib", "draft_compute_mib",
                "output_mib", "margin_mib", "needed_mib")
        totals: dict[str, Any] = {k: round(sum(d[k] or 0 for d in devs), 2) for k in keys}
        totals["total_mib"] = round(sum(d["total_mib"] or 0 for d in devs), 2)
        totals["free_mib"] = round(sum(d["free_mib"] or 0 for d in devs), 2)
        totals["headroom_mib"] = round(totals["free_mib"] - totals["needed_mib"], 2)
        totals["risk"] = self.worst_risk
        r = self.resolved
        model = self.model.summary()
        model["context"] = {
            "n_ctx": r.n_ctx, "n_ctx_seq": r.n_ctx_seq, "n_ctx_slot": self.n_ctx_slot, "n_seq_max": r.n_seq_max, "kv_unified": r.kv_unified,
            "n_batch": r.n_batch, "n_ubatch": r.n_ubatch, "flash_attn": r.flash_attn,
            "cache_type_k": r.type_k, "cache_type_v": r.type_v, "mtp": r.mtp,
            "cache_type_k_draft": r.type_k_draft, "cache_type_v_draft": r.type_v_draft,
            "n_rs_seq": r.n_rs_seq, "n_outputs_max": r.n_outputs_max, "n_gpu_layers": r.n_gpu_layers,
            "pipeline_parallel": self.pipeline_parallel,
        }
        model["fit"] = self.fit.to_dict()
        model["error_band_pct"] = self.error_band  # the estimate's measured band per component (held-out)
        model["estimate"] = "calibrated" if self.calibrated else "structural"
        model["warnings"] = list(self.model.warnings) + list(self.warnings)
        return {"model": model, "devices": devs, "totals": totals}
