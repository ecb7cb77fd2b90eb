"""What the widgets draw: small frozen view models, filled by the adapters from core objects.

Widgets depend on these and not on the core's classes, so a change in a core API touches one
adapter, and snapshot tests can build fixed screens without a server, a GPU or a model file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tui.ui.format import mib
from tui.ui.shared_views import ProbePoint

#: Plan components drawn as stacked segments, in drawing order: (key, label, glyph).
SEGMENTS: tuple[tuple[str, str, str], ...] = (
    ("weights", "weights", "█"),
    ("kv", "KV", "▓"),
    ("draft_kv", "draft KV", "▒"),
    ("recurrent", "recurrent", "░"),
    ("compute", "compute", "▚"),
    ("output", "output", "▪"),
)
RISKS: tuple[str, ...] = ("ok", "tight", "oom")
#: Where a device's figures come from (the words shown beside each device's plan).
EXACT_LABEL = "exact (llama.cpp)"
ESTIMATE_LABEL = "estimate"
#: The estimate once llama.cpp has measured this model (its compute terms fitted: planning.calibration).
CALIBRATED_LABEL = "estimate (calibrated on this model)"


@dataclass(frozen=True)
class DevicePlan:
    """The planner's verdict for one device (all MiB), as in `mtp-tune plan --json`."""

    name: str
    total_mib: float
    free_mib: float
    weights_mib: float = 0.0
    kv_mib: float = 0.0
    draft_kv_mib: float = 0.0
    recurrent_mib: float = 0.0
    compute_mib: float = 0.0
    draft_compute_mib: float = 0.0
    output_mib: float = 0.0
    margin_mib: float = 1024.0
    needed_mib: float = 0.0
    headroom_mib: float = 0.0
    risk: str = "ok"
    #: EXACT_LABEL when llama.cpp's dry run measured this device, else ESTIMATE_LABEL (CALIBRATED_LABEL
    #: when the estimate's compute terms are the model's own, fitted on llama.cpp's measurements).
    source: str = ESTIMATE_LABEL
    #: The estimate's measured error band, (component, %) on the held-out matrix; () for exact figures.
    error_band: tuple[tuple[str, float], ...] = ()
    #: llama.cpp's buffer name: CUDA0.., RPC0[host:port], or "Host" (a CPU-only plan: host RAM at risk).
    key: str = ""
    #: Where an RPC device's size comes from ("read from the server 3 s ago", "memory unknown (...)").
    note: str = ""

    @property
    def kind(self) -> str:
        """"gpu", "rpc" (a remote ggml-rpc-server) or "host" (host RAM)."""
        return "host" if self.key == "Host" else "rpc" if self.key.startswith("RPC") else "gpu"

    def segment_mib(self, key: str) -> float:
        """Compute includes the draft context's compute buffer: both are freed and re-made together."""
        if key == "compute":
            return self.compute_mib + self.draft_compute_mib
        return float(getattr(self, f"{key}_mib"))

    def band_pct(self, segment: str) -> float | None:
        """The error band of one drawn segment, or None; the compute segment's is its two buffers'
        bands weighted by their sizes."""
        bands = dict(self.error_band)
        keys = ("compute", "draft_compute") if segment == "compute" else (segment,)
        parts = [(bands[k], float(getattr(self, f"{k}_mib"))) for k in keys if k in bands]
        if not parts:
            return None
        total = sum(size for _, size in parts)
        return sum(b * size for b, size in parts) / total if total > 0 else max(b for b, _ in parts)

    @property
    def in_use_mib(self) -> float:
        """Memory already taken by others before the server's own allocations."""
        return max(0.0, self.total_mib - self.free_mib)


@dataclass(frozen=True)
class PlanView:
    """One plan for the settings on screen; `error` replaces the devices when planning failed.

    `exact` says where llama.cpp's exact figures stand: "off" (not asked for), "pending" (the
    instant estimate is shown, the dry run is on its way), "exact" (the devices carry llama.cpp's
    figures) or "unavailable" (`exact_reason` is the one sentence why; the estimate stays).
    `calibrated`: the estimate's compute terms are this model's own (planning.calibration)."""

    devices: tuple[DevicePlan, ...] = ()
    host: DevicePlan | None = None
    warnings: tuple[str, ...] = ()
    fit_note: str = ""
    error: str | None = None
    seq: int = 0
    exact: str = "off"
    exact_reason: str = ""
    calibrated: bool = False
    #: llama-server caps each slot at the training context (the sentence why; "" when it does not).
    context_note: str = ""
    #: The fields in error ("ctx-size"), "" when none: no plan is made for invalid settings, so the plan
    #: shown is the last valid settings' and must not read as the plan for what is on screen.
    stale: str = ""

    def launch_doubts(self) -> tuple[str, ...]:
        """Why launching with this plan deserves a question first (one sentence each; () when none):
        a device the plan says runs out of memory, or a context past the model's training context."""
        out = [f"{d.name}: the plan runs out of memory, short by {mib(-d.headroom_mib)} ({d.source})."
               for d in (*self.devices, *((self.host,) if self.host else ())) if d.risk == "oom"]
        if self.context_note:
            out.append(self.context_note[:1].upper() + self.context_note[1:] + ".")
        return tuple(out)

    @property
    def estimate_label(self) -> str:
        return CALIBRATED_LABEL if self.calibrated else ESTIMATE_LABEL

    @property
    def exact_note(self) -> str:
        """The sentence under the bars when exact figures cannot be had ("" otherwise)."""
        if self.exact == "unavailable":
            return f"exact unavailable: {self.exact_reason}" if self.exact_reason else "exact unavailable"
        return ""

    @property
    def notes(self) -> str:
        """The lines under the bars: the planner's error; else the stale mark, why exact figures are
        missing, the warnings and fit's note."""
        if self.error:
            return f"plan: {self.error}"
        stale = f"✖ stale plan: {self.stale} invalid; the plan shown is for the last valid settings"
        lines = [stale if self.stale else "", self.exact_note, *(f"⚠ {w}" for w in (*self.warnings, self.fit_note) if w)]
        return "\n".join(line for line in lines if line)

    @property
    def exact_status(self) -> str:
        """A few words on where the figures come from (the panel's subtitle: it never moves the layout)."""
        if self.stale:
            return f"plan: STALE ({self.stale} invalid)"
        est = self.estimate_label
        return {"pending": f"plan: {est} · llama.cpp measuring…", "exact": f"plan: {EXACT_LABEL}",
                "unavailable": f"plan: {est} (exact unavailable)"}.get(self.exact, f"plan: {est}")

    @property
    def worst_risk(self) -> str:
        risks = [d.risk for d in self.devices] or ["ok"]
        return max(risks, key=lambda r: RISKS.index(r) if r in RISKS else 0)


@dataclass(frozen=True)
class ReconcileRow:
    """Predicted (the estimate) vs reported memory for one device and component, after a launch;
    `exact_mib` is llama.cpp's dry-run figure for the same settings when exact mode had one."""

    device: str
    component: str
    predicted_mib: float | None
    reported_mib: float | None
    exact_mib: float | None = None

    @property
    def error_percent(self) -> float | None:
        if self.predicted_mib is None or not self.reported_mib:
            return None
        return 100.0 * (self.predicted_mib - self.reported_mib) / self.reported_mib


@dataclass(frozen=True)
class ServerStatus:
    """The server panel's content. `state` is the supervisor's state name."""

    state: str = "stopped"
    url: str | None = None
    pid: int | None = None
    attached: bool = False
    failure: str | None = None
    log_tail: tuple[str, ...] = ()
    log_path: str | None = None
    reconcile: tuple[ReconcileRow, ...] = ()
    running_argv: tuple[str, ...] = ()
    #: Why the reconciliation has no exact column ("" when it has one, or no launch yet).
    reconcile_exact_reason: str = ""
    #: What an attached server says it runs ("" when mtp-tune launched it: the form is what runs).
    running: str = ""
    #: The launch's download (`-hf`, `-mu`) in one line: "downloading FILE 42% (1.9 of 4.6 GiB, 35 MiB/s,
    #: ETA 1 min)" while it runs, "downloaded FILE (4.6 GiB)" after; "" for a model on disk.
    download: str = ""
    #: How far it got (0..1), None when the total is unknown; `downloading` while bytes still arrive.
    download_fraction: float | None = None
    downloading: bool = False

    @property
    def alive(self) -> bool:
        return self.state in ("starting", "loading", "ready")


@dataclass(frozen=True)
class ProbeSummary:
    """One configuration's aggregate: medians with min-max spread (t/s; acceptance 0..1)."""

    config: str
    n: int
    tg_median: float | None
    tg_min: float | None
    tg_max: float | None
    pp_median: float | None
    pp_min: float | None
    pp_max: float | None
    acceptance: float | None
    run_id: int | str | None = None
    #: Acceptance by draft position (share of drafts whose first i tokens were accepted), the advised
    #: n-max, the advice in one line and with its evidence (`core.probes.draft_advice`); empty without
    #: MTP or /metrics.
    positions: tuple[float, ...] = ()
    advised_n_max: int | None = None
    advice_headline: str = ""
    advice: str = ""
    #: Requests at once (`core.probes.concurrency`); at N > 1 the aggregate TG over each pass's
    #: concurrent phase and each request's own TG, as (median, min, max) t/s.
    concurrency: int = 1
    aggregate_tg: tuple[float, float, float] | None = None
    request_tg: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class ProbeState:
    """The probe panel's content."""

    suites: tuple[str, ...] = ("tasks", "long-prompt")
    running: bool = False
    done: int = 0
    total: int = 0
    message: str = ""
    points: tuple[ProbePoint, ...] = ()
    summaries: tuple[ProbeSummary, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    verdict: str = ""
    #: The core's run summaries per configuration (spreads for the verdict); not compared.
    raw_summaries: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, hash=False)
