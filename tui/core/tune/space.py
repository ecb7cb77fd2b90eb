"""What `mtp-tune tune` may change: the search space from the user's fixed flags, the quality floors
and the model, as candidate `Settings`.

Every flag the user gave is fixed; the rest of the named space is searched: MTP on/off (only when
the GGUF has NextN layers), draft n-max, micro-batch, batch, main and draft KV types (never below
their floors), flash attention, MoE experts on the CPU (MoE models), threads (when asked), and the
model file among quants of one model (`model`, when given several). The context is not searched: a
larger one is never faster, so it is the smallest that holds the workload's longest request (or
`--min-ctx`).

A KV value is a type (`q8_0`: K and V alike) or a pair `K/V` (`q8_0/q4_0`: an asymmetric cache).
With a KLD budget (`Floors.max_kld`) the main KV types have no floor: what llama-perplexity measured
decides (`tune.kld`), and a model file with a main K/V pair over the budget is `refused`, so that
candidate is invalid (never launched) with the measured figure as its reason.

Each candidate (`lab.candidate.Candidate`: its `values` start with `("mtp", bool)`, `invalid` says why
the one validator refuses it) has two keys:

* the launch key (`sweep.definition.settings_key` of the normalised settings): candidates with
  equal keys are one launch. Nothing searched here varies per request in b11434: the server's
  per-request `speculative.n_max/n_min/p_min/type` fields are compiled out (`#if 0` in
  tools/server/server-schema.cpp), so every axis needs a restart (`PER_REQUEST_FIELDS` is empty);
* the memory key: the launch key without the fields that change no allocation (threads, draft
  n-max/n-min/p-min: n-max only sizes the per-sequence output rows, a few MiB, well under one
  64 MiB fit-target step). Candidates sharing it share a fit-target answer and a memory failure.

Memory is also ordered: `needs_at_least(a, b)` says `a` allocates at least what `b` does (same
memory-relevant settings off the axes, and every axis at least as large), so one out-of-memory
failure prunes every candidate above it without a launch.

Draft p-min joins the axes only where it pays (`Space.add_p_min`): `--spec-draft-p-min P` stops a
draft at the first token the MTP head gives less than P, so it saves drafting and verifying the tokens
least likely to be accepted, and lets a longer draft run where the head is sure. That is worth launches
when the MTP side's leader shows late positions rarely accepted (its last draft position accepted in
under `LATE_SHARE` of drafts: a fixed n-max spends a token there that mostly goes to waste); when late
positions are accepted most of the time, stopping drafts early would only lose accepted tokens.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tui.core.lab.candidate import Axis, Candidate, values_label
from tui.core.lab.trial import Trial
from tui.core.options.problems import errors
from tui.core.options.rules import CACHE_TYPES
from tui.core.options.settings import Settings, settings_from_json
from tui.core.options.validate import validate
from tui.core.probes.positions import DraftPositions
from tui.core.sweep.definition import DRAFT_ONLY_FIELDS, normalize, settings_key
from tui.core.tune import DEFAULT_DRAFT_KV_FLOOR, DEFAULT_KV_FLOOR
from tui.core.tune.workload import Workload, beyond_training

#: Fields a request can set without a restart, for the searched axes (none in b11434; see above).
PER_REQUEST_FIELDS: frozenset[str] = frozenset()
#: Fields that change no allocation: candidates differing only here share one memory key.
NON_MEMORY_FIELDS = ("threads", "threads_batch", "spec_draft_n_max", "spec_draft_n_min", "spec_draft_p_min",
                     "fit_target", "host", "port", "api_key", "metrics")
#: KV types by quality (higher keeps more precision); a floor admits types at or above its rank.
KV_QUALITY: dict[str, int] = {"f32": 9, "f16": 8, "bf16": 8, "q8_0": 7, "q5_1": 6, "q5_0": 5, "q4_1": 4,
                              "iq4_nl": 3, "q4_0": 2}
#: Bytes per element of each KV type: the memory order of the KV axes.
KV_BYTES: dict[str, float] = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 1.0625, "q5_1": 0.75, "q5_0": 0.6875,
                              "q4_1": 0.625, "iq4_nl": 0.5625, "q4_0": 0.5625}
#: Values searched when the caller gives none (the first is where a walk starts: the server default).
DEFAULT_VALUES: dict[str, tuple[Any, ...]] = {
    "draft-n-max": (3, 1, 2, 4, 5, 6),
    "ubatch": (512, 256, 1024, 2048),
    "batch": (2048, 4096),
    "kv": ("f16", "q8_0", "q8_0/q4_0", "q5_0", "q4_0"),
    "draft-kv": ("f16", "q8_0", "q4_0"),
    "flash-attn": ("auto", "off"),
}


#: The p-min values tried once late positions are rarely accepted (None: the server's 0.0, every draft
#: runs to n-max; the walk starts there, so the candidates measured before stay the same launches).
P_MIN_VALUES: tuple[float | None, ...] = (None, 0.5, 0.75, 0.9)
#: "Rarely accepted": the leader's last draft position accepted in under this share of drafts.
LATE_SHARE = 0.25


def late_positions_rare(rec: Trial | None) -> bool:
    """The trial's last draft position was accepted in under `LATE_SHARE` of its drafts (per-position
    figures counted by the probe; False without them)."""
    pos = DraftPositions.from_json(rec.samples.positions) if rec is not None and rec.samples is not None else None
    return pos is not None and pos.shares[-1] < LATE_SHARE


class SpaceError(ValueError):
    """The fixed flags and the workload cannot make a single candidate; the message says what to change."""


@dataclass(frozen=True)
class Floors:
    """The lowest quality a tune may choose, and the smallest context it may leave.

    `kv` None: no floor for the main KV types, which `max_kld` (a mean KL divergence, measured)
    bounds instead; the draft's types change acceptance, never the output, so they keep a floor."""

    kv: str | None = DEFAULT_KV_FLOOR
    draft_kv: str = DEFAULT_DRAFT_KV_FLOOR
    min_ctx: int = 0
    max_kld: float | None = None

    def __post_init__(self) -> None:
        for name, t in (("--kv-floor", self.kv), ("--draft-kv-floor", self.draft_kv)):
            if t is not None and t not in KV_QUALITY:
                raise SpaceError(f"{name} {t}: not a KV cache type; use one of {', '.join(CACHE_TYPES)}.")
        if self.max_kld is not None:
            if not (math.isfinite(self.max_kld) and self.max_kld > 0):
                raise SpaceError(f"--max-kld {self.max_kld:g}: give a mean KL divergence above 0, e.g. 0.05.")
            if self.kv is not None:
                raise SpaceError("a KLD budget (--max-kld) measures the main KV types instead of a floor "
                                 "(--kv-floor): give one of them, not both.")


def kv_pair(value: str) -> tuple[str, str]:
    """A KV axis value as (K type, V type): `q8_0` is both, `q8_0/q4_0` is K q8_0 with V q4_0."""
    k, _, v = str(value).partition("/")
    return k, v or k


def kv_quality(value: str) -> int:
    """A KV value's rank in `KV_QUALITY`: a pair is as good as its lower half (0: unknown)."""
    return min(KV_QUALITY.get(t, 0) for t in kv_pair(value))


def quality_key(settings: Settings) -> tuple[str, str, str]:
    """What a quality figure is about: the model file and the main K/V types (unset: f16, the server's)."""
    model = str(Path(settings.model).expanduser()) if settings.model else ""
    return model, settings.cache_type_k or "f16", settings.cache_type_v or "f16"


def given_fields(settings: Settings) -> frozenset[str]:
    """The fields the user set (different from an empty Settings): fixed for the whole tune."""
    d = Settings()
    return frozenset(f.name for f in fields(Settings) if getattr(settings, f.name) != getattr(d, f.name)) - {"model"}


def memory_key(settings: Settings) -> str:
    """The launch key without the fields that change no allocation (`NON_MEMORY_FIELDS`)."""
    blank = Settings()
    return settings_key(replace(normalize(settings), **{f: getattr(blank, f) for f in NON_MEMORY_FIELDS}))


def _rank(axis: str, v: Any) -> float:
    """Where a value sits in memory order (larger allocates more)."""
    if axis in ("kv", "draft-kv"):
        return sum(KV_BYTES.get(t, 0.0) for t in kv_pair(v)) / 2 if v is not None else 0.0
    if axis == "model":
        return float(_file_bytes(str(v)))  # quants of one model: the larger file holds more weights
    if axis == "mtp":
        return 1.0 if v else 0.0
    if axis == "flash-attn":
        return 1.0 if v == "off" else 0.0  # without flash attention the KQ matrix is materialised
    if axis == "n-cpu-moe":
        return -float(v or 0)  # more experts on the CPU: less on the GPU
    if axis in ("ubatch", "batch"):
        return float(v or 0)
    return 0.0


def _file_bytes(path: str) -> int:
    try:
        return Path(path).expanduser().stat().st_size
    except OSError:
        return 0


MEMORY_AXES = frozenset({"mtp", "ubatch", "batch", "kv", "draft-kv", "flash-attn", "n-cpu-moe", "model"})
#: Axes whose values are K/V pairs (`kv_pair`), each half setting its own field.
PAIR_AXES = frozenset({"kv", "draft-kv"})


@dataclass
class Space:
    """The candidates of one tune. `point(values)` makes (and caches) one; `grid()` lists them all.
    A candidate's `key` is its launch key."""

    base: Settings
    axes: tuple[Axis, ...]
    branches: tuple[bool, ...]  # MTP off/on sides searched (False first)
    ctx: int  # the context every candidate gets (0: the model's training context, when fixed so)
    floors: Floors
    notes: list[str] = field(default_factory=list)
    fit_fixed: bool = False  # the user gave --fit-target or --fit off: no fit-target search
    #: (model, K, V) (`quality_key`) -> why it is over the KLD budget: such a candidate is invalid
    refused: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    _cache: dict[tuple[tuple[str, Any], ...], Candidate] = field(default_factory=dict, repr=False)

    def add_p_min(self, leader: Trial | None) -> bool:
        """Add the draft p-min axis when the MTP side's `leader` rarely accepts its late positions (the
        rule is in the module docstring); True when added, so the search walks it. Never with MTP not
        searched, p-min fixed by the user, or the axis already there."""
        if (True not in self.branches or "spec_draft_p_min" in given_fields(self.base)
                or any(a.name == "draft-p-min" for a in self.axes) or not late_positions_rare(leader)):
            return False
        self.axes = (*self.axes, Axis("draft-p-min", ("spec_draft_p_min",), P_MIN_VALUES, start=None, ordered=True,
                                      mtp_only=True))
        assert leader is not None and leader.samples is not None  # late_positions_rare said so
        pos = DraftPositions.from_json(leader.samples.positions)
        share = 100.0 * pos.shares[-1] if pos else 0.0
        self.notes.append(f"draft p-min searched: #{leader.number} accepted its last draft position in "
                          f"{share:.0f} % of drafts.")
        return True

    def axes_for(self, mtp: bool) -> tuple[Axis, ...]:
        return tuple(a for a in self.axes if mtp or not a.mtp_only)

    def start(self, mtp: bool) -> dict[str, Any]:
        """The first point of a branch: every axis at its start value."""
        return {a.name: a.start for a in self.axes_for(mtp)}

    def point(self, values: Mapping[str, Any], mtp: bool) -> Candidate:
        """The candidate with these axis values on the given side (missing axes take their start)."""
        full = tuple((a.name, values.get(a.name, a.start)) for a in self.axes_for(mtp))
        key = (("mtp", mtp), *full)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._make(mtp, full)
        return hit

    def _make(self, mtp: bool, full: tuple[tuple[str, Any], ...]) -> Candidate:
        s = replace(self.base, spec_type=list(self.base.spec_type), extra_args=list(self.base.extra_args),
                    fit_target=list(self.base.fit_target),
                    ctx_size=self.ctx if self.base.ctx_size is None else self.base.ctx_size)
        if len(self.branches) > 1:
            s.spec_type = ["draft-mtp"] if mtp else []
        by_name = {a.name: a for a in self.axes}
        for name, v in full:
            fs = by_name[name].fields
            parts = kv_pair(v) if name in PAIR_AXES and len(fs) == 2 else (v,) * len(fs)
            for f, part in zip(fs, parts):
                setattr(s, f, None if (name == "n-cpu-moe" and not v) else part)
        eff = normalize(s)
        why = [p.message for p in errors(validate(eff, require_model=False))]
        over = self.refused.get(quality_key(eff))
        invalid = "; ".join(why + ([over] if over else [])) or None
        values = (("mtp", mtp), *full)
        ranks = tuple((n, _rank(n, v)) for n, v in values if n in MEMORY_AXES)
        blank = {f: getattr(Settings(), f) for a in self.axes for f in a.fields} | {"spec_type": []}
        for f in DRAFT_ONLY_FIELDS:
            blank[f] = None
        lkey = settings_key(eff)
        shown = tuple((n, Path(v).name if n == "model" else v) for n, v in values)
        return Candidate(eff, lkey, lkey, values_label(shown), values, invalid=invalid, memory_key=memory_key(eff),
                         memory_base=memory_key(replace(eff, **blank)), memory_ranks=ranks)

    def of(self, rec: Trial) -> Candidate | None:
        """The candidate a record was made of, or None when this space no longer makes it."""
        c = self.point({k: v for k, v in rec.values.items() if k != "mtp"}, bool(rec.values.get("mtp", rec.mtp)))
        return c if c.key == rec.key else None

    def grid(self, *, valid_only: bool = True) -> list[Candidate]:
        """Every candidate once per launch key, MTP off first, in axis order (first axis slowest)."""
        out: list[Candidate] = []
        seen: set[str] = set()
        for mtp in self.branches:
            axes = self.axes_for(mtp)
            for combo in itertools.product(*(a.values for a in axes)):
                c = self.point(dict(zip((a.name for a in axes), combo)), mtp)
                if c.key in seen or (valid_only and c.invalid):
                    continue
                seen.add(c.key)
                out.append(c)
        return out

    def near(self, values: Mapping[str, Any], mtp: bool) -> Iterator[Candidate]:
        """The branch's valid candidates, fewest axes changed from `values` first, then least memory:
        where to look when the start point cannot run."""
        axes = self.axes_for(mtp)

        def order(c: Candidate) -> tuple[int, float]:
            changed = sum(1 for a in axes if c.value(a.name) != values.get(a.name, a.start))
            return changed, sum(r for _, r in c.memory_ranks)

        yield from sorted((c for c in self.grid() if c.mtp == mtp), key=order)


def needs_at_least(a: Candidate, b: Candidate) -> bool:
    """True when `a` allocates at least what `b` does: the same memory-relevant settings off the
    axes, and every memory axis of `a` at or above `b`'s."""
    if a.memory_base != b.memory_base:
        return False
    ra, rb = dict(a.memory_ranks), dict(b.memory_ranks)
    return all(ra.get(n, 0.0) >= rb.get(n, 0.0) for n in {*ra, *rb})


def _allowed(floor: str | None, values: Sequence[str]) -> tuple[str, ...]:
    return tuple(v for v in values if floor is None or kv_quality(v) >= KV_QUALITY[floor])


def build_space(fixed: Settings, workload: Workload, *, has_mtp: bool, floors: Floors = Floors(),
                moe_layers: int = 0, threads: Sequence[int] = (),
                values: Mapping[str, Sequence[Any]] | None = None,
                refused: Mapping[tuple[str, str, str], str] | None = None) -> Space:
    """The space around the user's `fixed` flags. `has_mtp`: the model has NextN layers;
    `moe_layers`: its layers with experts (0: dense, no n-cpu-moe axis); `threads`: thread counts
    to try (none: the server's choice); `values`: replaces an axis' default values (floors still apply;
    `model`: the model files, quants of one model); `refused`: (model, K, V) over the KLD budget, why."""
    given = given_fields(fixed)
    vals = {**DEFAULT_VALUES, **{k: tuple(v) for k, v in (values or {}).items()}}
    unknown = set(vals) - set(DEFAULT_VALUES) - {"n-cpu-moe", "threads", "model"}
    if unknown:
        raise SpaceError(f"unknown axis {sorted(unknown)[0]!r}; known: {', '.join(sorted(DEFAULT_VALUES))}, n-cpu-moe, "
                         "threads, model.")
    notes: list[str] = []
    ctx = workload.ctx_needed(floors.min_ctx)
    if fixed.ctx_size == 0:
        notes.append("--ctx-size 0 (the model's training context) is fixed.")
        ctx = 0
    elif fixed.ctx_size is not None:
        if fixed.ctx_size < workload.longest:
            raise SpaceError(f"--ctx-size {fixed.ctx_size} cannot hold the workload's longest request "
                             f"({workload.longest} tokens); drop --ctx-size or give at least {ctx}.")
        ctx = int(fixed.ctx_size)
    for name, fs, floor in (("main", ("cache_type_k", "cache_type_v"), floors.kv),
                            ("draft", ("cache_type_k_draft", "cache_type_v_draft"), floors.draft_kv)):
        for f in fs:
            v = getattr(fixed, f)
            if f in given and floor is not None and KV_QUALITY.get(v, 99) < KV_QUALITY[floor]:
                notes.append(f"{f.replace('_', '-')} {v} is below the {name} KV floor {floor}, but it is a fixed flag: kept.")
    if "spec_type" in given:
        branches: tuple[bool, ...] = (fixed.mtp_enabled,)
    else:
        branches = (False, True) if has_mtp else (False,)
    if not has_mtp:
        notes.append("the model has no MTP (NextN) layers: only MTP off is searched.")
        if fixed.mtp_enabled:
            raise SpaceError("--spec-type draft-mtp: the model has no MTP (NextN) layers, so llama-server would refuse it.")
    axes: list[Axis] = []
    if vals.get("model"):  # the model file first: every other axis is walked under the file that leads
        axes.append(Axis("model", ("model",), tuple(vals["model"]), start=vals["model"][0]))

    def add(name: str, fs: tuple[str, ...], ordered: bool, mtp_only: bool = False,
            pool: Sequence[Any] | None = None) -> None:
        free = tuple(f for f in fs if f not in given)
        v = tuple(dict.fromkeys(vals.get(name, ()) if pool is None else pool))
        if not free or not v or (mtp_only and True not in branches):
            return
        start = v[0]
        axes.append(Axis(name, free, tuple(sorted(v, key=lambda x: float(x or 0))) if ordered else v, start=start,
                         ordered=ordered, mtp_only=mtp_only))

    add("draft-n-max", ("spec_draft_n_max",), True, mtp_only=True)
    add("ubatch", ("ubatch_size",), True)
    add("batch", ("batch_size",), True)
    add("kv", ("cache_type_k", "cache_type_v"), False, pool=_allowed(floors.kv, vals["kv"]))
    add("draft-kv", ("cache_type_k_draft", "cache_type_v_draft"), False, mtp_only=True,
        pool=_allowed(floors.draft_kv, vals["draft-kv"]))
    add("flash-attn", ("flash_attn",), False)
    if moe_layers > 0 and not fixed.cpu_moe:
        moe = vals.get("n-cpu-moe") or tuple(dict.fromkeys((0, moe_layers // 4, moe_layers // 2, moe_layers)))
        add("n-cpu-moe", ("n_cpu_moe",), True, pool=moe)
    if threads or vals.get("threads"):
        add("threads", ("threads",), False, pool=tuple(vals.get("threads") or threads))
    fit_fixed = "fit_target" in given or fixed.fit is False
    return Space(fixed, tuple(axes), branches, ctx, floors, notes, fit_fixed, dict(refused or {}))


def space_for_model(fixed: Settings, meta: Any, workload: Workload, **kw: Any) -> Space:
    """`build_space` with MTP and MoE read from the GGUF header (`planning.gguf_reader.read_gguf`)."""
    hp = meta.hparams
    if why := beyond_training(int(getattr(hp, "n_ctx_train", 0) or 0), [("--workload " + workload.label, workload.longest)]):
        raise SpaceError(why)
    moe = hp.n_layer - int(getattr(hp, "n_layer_dense_lead", 0) or 0) if getattr(hp, "n_expert", 0) else 0
    return build_space(fixed, workload, has_mtp=int(hp.n_nextn or 0) > 0, moe_layers=moe, **kw)


def launch_settings(space: Space, rec: Trial) -> Settings:
    """What a record launched: its candidate's settings (or the stored ones), with the fit-target it found."""
    c = space.of(rec)
    s = c.settings if c is not None else settings_from_json(rec.settings)
    return replace(s, fit_target=[rec.fit_target]) if rec.fit_target is not None else s


def expected_trials(space: Space) -> int:
    """About how many candidates a search considers: each side's start and one walk of every axis."""
    return sum(1 + sum(len(a.values) - 1 for a in space.axes_for(m)) for m in space.branches)
