"""What the tune screen (`T`) draws: its setup fields and the live view of a tune, as frozen data.

Filled by `tune_ops` from the core's trial records (`core.lab.trial.Trial`), the
answer (`TuneResult`) and the final A/B, so the widgets never import the core and snapshot tests
build fixed screens from plain data.
"""

from __future__ import annotations

from dataclasses import dataclass

from tui.ui.lab.views import clock

#: The axes the tune screen offers: (axis name as `mtp-tune tune --axis` spells it, label, the
#: Settings fields the axis sets, the values searched when the field is left as it starts).
TUNE_AXES: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("mtp", "MTP", ("spec_type",), "on,off"),
    ("draft-n-max", "draft n-max", ("spec_draft_n_max",), "3,1,2,4,5,6"),
    ("ubatch", "ubatch", ("ubatch_size",), "512,256,1024,2048"),
    ("batch", "batch", ("batch_size",), "2048,4096"),
    ("kv", "main KV", ("cache_type_k", "cache_type_v"), "f16,q8_0,q5_0,q4_0"),
    ("draft-kv", "draft KV", ("cache_type_k_draft", "cache_type_v_draft"), "f16,q8_0,q4_0"),
    ("flash-attn", "flash-attn", ("flash_attn",), "auto,off"),
)


@dataclass(frozen=True)
class TuneSetup:
    """What the tune screen's fields say. An axis with values is searched over them (the form's
    value of that setting is not fixed); an empty one keeps the form's value, fixed."""

    workload: str = "tasks"  # tasks | long-prompt | full | a suite file | IN:OUT
    concurrency: str = ""  # requests at once (`--concurrency`); "": one
    budget: str = "30m"
    min_ctx: str = ""  # "": the smallest context that holds the workload
    kv_floor: str = ""  # "": the core's default floor (tune.space.Floors, as the CLI's)
    draft_kv_floor: str = ""
    max_kld: str = ""  # "": no KLD budget; a mean KLD bounds the main KV types instead of kv_floor (measured)
    axes: tuple[tuple[str, str], ...] = tuple((a, d) for a, _l, _f, d in TUNE_AXES)
    fit: bool = True  # search the smallest --fit-target where it means something (real GPUs, RPC)
    stand_ins: bool = False  # simulated GPUs: launch on stand-ins capped at their memory (`--stand-ins`)
    ab_passes: int = 3
    save_as: str = "tune-best"

    def axis(self, name: str) -> str:
        return dict(self.axes).get(name, "")


@dataclass(frozen=True)
class TuneRowView:
    """One trial: what differs from the fixed flags, its plan, what happened, and its figures."""

    number: int
    mtp: bool
    differs: str  # `ub=512 dkv=q4_0` (MTP apart), fit-target included
    stage: str = ""
    plan: str = ""  # the plan's risk (ok | tight | oom | invalid | unknown), "" when not planned
    plan_source: str = ""  # exact (llama.cpp's dry run) | estimate | ""
    planned_mib: float | None = None  # the planner's device total
    status: str = "ok"  # ok | eliminated | predicted_oom | invalid | dominated | failed
    failure: str = ""  # oom_load | oom_decode | other
    pp: float | None = None
    pp_spread: float | None = None
    tg: float | None = None
    tg_spread: float | None = None
    acceptance: float | None = None
    e2e: float | None = None  # seconds per mean request (median)
    e2e_spread: float | None = None
    passes: int = 0
    launches: int = 0
    resumed: bool = False
    mark: str = ""  # BEST | best off | best on | ~best
    reason: str = ""
    front: bool = False  # on the Pareto front (no other trial is faster at both)
    quality: str = ""  # its measured cost (`KLD 0.00213 ± 0.0001, same top 98.9 %`), "" when none was asked

    @property
    def best(self) -> bool:
        return self.mark == "BEST"


@dataclass(frozen=True)
class TuneView:
    """The whole tune screen: the counts and the best so far, every trial, the plot, the answer."""

    running: bool = False
    stopped: str = ""  # converged | complete | budget | cancelled | failed ("" while it runs)
    rows: tuple[TuneRowView, ...] = ()
    points: tuple[TuneRowView, ...] = ()  # the measured trials: the PP-vs-TG plot
    measured: int = 0
    pruned: int = 0
    failed: int = 0
    launches: int = 0
    grid_size: int = 0
    best: int | None = None
    best_off: int | None = None
    best_text: str = ""  # `#3 0.512 [0.50-0.53] s/request (spread 2.1%)`
    elapsed_s: float = 0.0
    eta_s: float | None = None
    budget_s: float | None = None
    message: str = ""  # the newest event, or how it ended
    workload: str = ""  # `tasks: 61 prompt tokens, 40 generated per request, the longest 101`
    ab: str = ""  # the A/B verdict line
    break_even: str = ""
    answer: str = ""  # the result's paragraph
    notes: tuple[str, ...] = ()
    error: str | None = None

    @property
    def trials(self) -> int:
        return len(self.rows)

    def status_text(self, since_s: float = 0.0) -> str:
        """`7 trials: 4 measured, 2 pruned, 1 failed · 5 launches · best #3 … · 1:02 elapsed · ETA 3:10`
        (`since_s`: seconds since this view arrived, so the clock moves between the tune's events)."""
        parts = [f"{self.trials} trials: {self.measured} measured, {self.pruned} pruned, {self.failed} failed",
                 f"{self.launches} launches"]
        if self.grid_size:
            parts[0] += f" (grid {self.grid_size})"
        parts.append(f"best {self.best_text}" if self.best_text else "best: none yet")
        elapsed = self.elapsed_s + (since_s if self.running else 0.0)
        if elapsed:
            parts.append(f"{clock(elapsed)} elapsed")
        if self.running and self.eta_s is not None:
            parts.append(f"ETA ~{clock(max(0.0, self.eta_s - since_s))}")
        if self.running and self.budget_s is not None:
            parts.append(f"budget left {clock(max(0.0, self.budget_s - elapsed))}")
        return " · ".join(parts)
