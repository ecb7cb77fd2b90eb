"""What the tuning screens draw (sweep, MTP on/off verdict, searches): frozen view models.

Filled by `experiments` from the core's sweep table, A/B verdict and search results, so the
widgets never import the core's classes and snapshot tests build fixed screens from plain data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tui.ui.shared_views import ProbePoint

if TYPE_CHECKING:  # the core's lab loads on the first action, not with the first frame
    from tui.core.lab.knob import KnobTry

#: The knobs a sweep screen offers as axes: (axis name the core parses, label on screen, hint).
SWEEP_KNOBS: tuple[tuple[str, str, str], ...] = (
    ("mtp", "MTP", "on,off"),
    ("spec-draft-n-max", "draft n-max", "2,3"),
    ("ctkd", "draft KV", "f16,q8_0"),
    ("ctk", "main KV", "f16,q8_0"),
    ("ub", "ubatch", "512,1024"),
    ("c", "ctx", "8192,16384"),
    ("fit-target", "fit-target", "512,1024"),
    ("np", "-np", "1,2"),
)


@dataclass(frozen=True)
class SweepSetup:
    """What the sweep screen's fields say: axis texts by knob, suite, repeats, objective."""

    axes: tuple[tuple[str, str], ...] = ()  # (knob, "v1,v2") for knobs with values
    suite: str = "tasks"
    repeat: int = 3
    objective: str = "tg"
    try_anyway: bool = False
    n_predict: int | None = None
    save_as: str = "sweep-best"


@dataclass(frozen=True)
class SweepRowView:
    """One configuration: its axis values, the plan before it runs, and the numbers after."""

    number: int
    values: tuple[str, ...]  # in axis order
    status: str = "pending"  # pending | running | ok | failed | invalid | duplicate | predicted_oom
    planned_mib: float | None = None
    risk: str | None = None  # ok | tight | oom | unknown | invalid | None (not planned)
    tg: float | None = None
    tg_spread: float | None = None  # relative (max-min)/median
    pp: float | None = None
    pp_spread: float | None = None
    acceptance: float | None = None
    score: float | None = None  # the objective's value (t/s or seconds)
    mark: str = ""  # BEST | ~best | = #n
    note: str = ""  # why it failed or was skipped, or its first warning


@dataclass(frozen=True)
class SweepView:
    """The whole sweep screen: rows, progress, the running row's points, the best, the summary."""

    axes: tuple[str, ...] = ()
    objective: str = "TG t/s"
    workload: bool = False
    rows: tuple[SweepRowView, ...] = ()
    running: bool = False
    done: int = 0
    total: int = 0
    elapsed_s: float = 0.0
    eta_s: float | None = None
    message: str = ""
    current: int | None = None  # number of the row being measured
    points: tuple[ProbePoint, ...] = ()  # the current row's requests (live plot)
    best: int | None = None
    summary: tuple[str, ...] = ()
    error: str | None = None

    @property
    def measured(self) -> tuple[SweepRowView, ...]:
        return tuple(r for r in self.rows if r.status == "ok" and r.tg is not None and r.pp is not None)

    def progress_text(self) -> str:
        """`3/4 rows · 0:41 elapsed · ETA 0:12`."""
        parts = [f"{self.done}/{self.total} rows"] if self.total else []
        if self.elapsed_s:
            parts.append(f"{clock(self.elapsed_s)} elapsed")
        if self.running and self.eta_s is not None:
            parts.append(f"ETA {clock(self.eta_s)}")
        return " · ".join(parts)


@dataclass(frozen=True)
class VerdictRow:
    """One metric of an A/B verdict: A and B (median with range; MTP off and on), change, verdict."""

    metric: str
    a: str
    b: str
    change: str
    verdict: str


@dataclass(frozen=True)
class Versus:
    """What the settings on screen are A/B'd against instead of themselves with MTP on: a saved profile,
    or the same settings on another llama-server binary (another llama.cpp build)."""

    profile: str | None = None
    server_bin: str | None = None

    @property
    def title(self) -> str:
        other = f"profile {self.profile}" if self.profile else f"llama-server {self.server_bin}"
        return f"the settings on screen (A) vs {other} (B)"


@dataclass(frozen=True)
class LevelRow:
    """The MTP on/off verdict at one concurrency, a row of the side-by-side table (`verdict_levels`)."""

    concurrency: int
    label: str  # b_wins | b_loses | same | inconclusive (B: MTP on)
    headline: str  # the label in words ("MTP wins")
    off_s: str  # seconds per request, MTP off (median)
    on_s: str
    change: str  # time per request, MTP on against off
    tg: str  # TG per request, off -> on (medians)
    acceptance: str


@dataclass(frozen=True)
class VerdictView:
    """The verdict screen: progress while passes run, then the answer for the workload."""

    running: bool = False
    done: float = 0.0
    total: int = 0
    eta_s: float | None = None
    message: str = ""
    workload: tuple[int, int] = (1000, 500)
    label: str = ""  # b_wins | b_loses | same | inconclusive | "" (nothing yet)
    headline: str = ""  # the label in capitals: MTP WINS, B LOSES, THE SAME WITHIN THE NOISE (the core's words)
    names: tuple[str, str] = ("MTP off", "MTP on")  # the sides, A then B (the table's columns)
    title: str = "MTP on vs off"  # what is A/B'd, for the screen's title
    rows: tuple[VerdictRow, ...] = ()
    break_even: str = ""
    answer: str = ""
    passes: tuple[str, ...] = ()  # "off 1: TG 41.2 PP 812" per finished pass, in run order
    error: str | None = None
    #: At N requests at once: the verdict at 1 and at N side by side (the rows above are N's); empty
    #: for a verdict at one request at a time.
    levels: tuple[LevelRow, ...] = ()


@dataclass(frozen=True)
class SearchView:
    """A search's progress and answer; `value` is what accepting puts in the form."""

    knob: str  # ctx_size | fit_target
    title: str
    flag: str  # how the answer is written: `--ctx-size 16384 tokens`
    unit: str
    running: bool = False
    message: str = ""
    elapsed_s: float = 0.0
    trials: tuple[KnobTry, ...] = ()  # every launch, in order
    value: int | None = None
    found: bool = False
    done: bool = False
    cancelled: bool = False
    planned: int | None = None
    measured_on: str = ""  # where its launches run (this CPU for simulated GPUs, which cannot run out)
    #: the new settings (a core Settings) to offer; not compared
    settings: Any = field(default=None, compare=False, hash=False)


def clock(seconds: float) -> str:
    """`0:41`, `12:05`, `1:02:03`."""
    s = int(round(max(0.0, seconds)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def num(x: float | None, none: str = "—") -> str:
    """A speed as the tables write it: `812`, `41.2`."""
    return none if x is None else f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"
