"""Concurrency: N requests in flight at once, the slots that takes, and what a run at N reports.

How a run at concurrency N sends: N streams, each sending every prompt of a pass in turn, stream k
starting at prompt k (`stream_order`), so the server always has N requests to batch and a
one-prompt suite (a tune's `IN:OUT` shape) becomes N copies of that request at once. A pass ends when
every stream has sent its prompts; the next pass starts only then, so each pass is one concurrent
phase.

What it reports (`concurrency_summary`, stored in the run's summary under `concurrency`):

* aggregate TG: every token generated in a pass over the wall time of that pass's concurrent phase
  (the first request sent to the last answer complete, on the client's clock), the throughput the
  server gives N users together; median and range over the passes;
* per request: the server's own TG of each request (`predicted_per_second`: the speed one user saw
  under that load) and its draft acceptance, median and range over the run's requests.

The /metrics counters are server-wide, so a bracket around one request would count its neighbours'
drafts too: at N > 1 the runner scrapes them before a pass's N streams start and after all of them
end instead. That delta is exact for the pass as a whole (every request of it has ended before the
second scrape, as one request has at N = 1, and nothing else runs between); it is kept as the pass's
(`passes[i].metrics_delta`, read back by `stored_phase_deltas`), and the verification steps, the mean
acceptance length and the acceptance by draft position come from it (`records.summarize_run`).
Per-request acceptance comes from each request's own `timings`.

The slots (`with_slots`): N concurrent requests need `-np N`; each slot keeps the context one
request had (llama-server splits `-c` over the slots unless the KV cache is unified), so the
context, and with it the planned KV cache, grows N-fold, and a hybrid model's recurrent state too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from tui.core.options import reader
from tui.core.options.settings import Settings
from tui.core.probes.records import PhaseDeltas, RequestRecord, summarize_run
from tui.core.probes.stats import summarize

T = TypeVar("T")


def stream_order(prompts: Sequence[T], stream: int) -> list[T]:
    """The prompts stream `stream` sends in one pass: all of them, starting at prompt `stream`."""
    k = stream % len(prompts) if prompts else 0
    return list(prompts[k:]) + list(prompts[:k])


def phase_wall_s(records: Sequence[RequestRecord]) -> float | None:
    """Seconds from the first request sent to the last answer complete (None without timed requests)."""
    timed = [r for r in records if r.started_at is not None and r.wall_ms is not None]
    if not timed:
        return None
    start = min(float(r.started_at or 0.0) for r in timed)
    end = max(float(r.started_at or 0.0) + float(r.wall_ms or 0.0) / 1000.0 for r in timed)
    return end - start if end > start else None


def pass_aggregate(records: Sequence[RequestRecord], repeat: int) -> dict[str, Any]:
    """One pass's concurrent phase: its requests, generated tokens, wall seconds and aggregate TG."""
    mine = [r for r in records if r.repeat == repeat and r.ok]
    tokens = sum(r.predicted_n or 0 for r in mine)
    wall = phase_wall_s(mine)
    return {"repeat": repeat, "requests": len(mine), "tokens": tokens, "wall_s": wall,
            "aggregate_tg_tps": tokens / wall if wall and tokens else None}


def concurrency_summary(records: Sequence[RequestRecord], concurrency: int,
                        phase_deltas: PhaseDeltas | None = None) -> dict[str, Any]:
    """The `concurrency` block of a run's summary (see the module docstring): `n`, `aggregate_tg_tps`
    (Summary over passes), `request_tg_tps` and `request_acceptance` (Summary over requests), `passes`
    (each with its /metrics `metrics_delta` from `phase_deltas` when it has one)."""
    ok = [r for r in records if r.ok]
    passes = [pass_aggregate(records, rep) for rep in sorted({r.repeat for r in ok})]
    for p in passes:
        if (delta := (phase_deltas or {}).get(p["repeat"])) is not None:
            p["metrics_delta"] = dict(delta)
    agg = summarize([p["aggregate_tg_tps"] for p in passes])
    tg = summarize([r.tg_tps for r in ok])
    acc = summarize([r.acceptance for r in ok])
    return {
        "n": int(concurrency),
        "aggregate_tg_tps": agg.to_json() if agg else None,
        "request_tg_tps": tg.to_json() if tg else None,
        "request_acceptance": acc.to_json() if acc else None,
        "passes": passes,
    }


def run_summary(records: list[RequestRecord], prompt_names: list[str], concurrency: int,
                phase_deltas: PhaseDeltas | None = None) -> dict[str, Any]:
    """A run's whole summary, as stored: `records.summarize_run` with its `concurrency` block (what
    the runner stores at the end, and a UI computes while the run goes)."""
    summary = summarize_run(records, prompt_names, phase_deltas)
    summary["concurrency"] = concurrency_summary(records, concurrency, phase_deltas)
    return summary


def stored_phase_deltas(summary: Mapping[str, Any] | None) -> dict[int, dict[str, float]]:
    """The per-pass /metrics deltas a stored summary keeps (`concurrency_summary`); {} for a run at
    concurrency 1, one stored before passes were bracketed, or a malformed block."""
    block = (summary or {}).get("concurrency")
    passes = block.get("passes") if isinstance(block, Mapping) else None
    out: dict[int, dict[str, float]] = {}
    for p in passes if isinstance(passes, list) else ():
        delta = p.get("metrics_delta") if isinstance(p, Mapping) else None
        if isinstance(delta, Mapping) and isinstance(p.get("repeat"), int):
            out[p["repeat"]] = {str(k): float(v) for k, v in delta.items() if isinstance(v, (int, float))}
    return out


# --------------------------------------------------------------------------- the slots it takes


def kv_unified(settings: Settings) -> bool:
    """True when the slots share one KV cache (`--kv-unified`): then `-c` is not split over them."""
    return reader.present(list(settings.extra_args), "--kv-unified") is True


def parse_concurrency(text: str, field: str = "at once") -> int:
    """Requests at once from a form's field ("" is 1); ValueError naming `field` for anything else
    than a whole number of 1 or more."""
    value = text.strip() or "1"
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{field}: a whole number of requests (1 or more), not {value!r}.")
    return int(value)


def slots_problem(parallel: int | None, concurrency: int, fix: str | None = None) -> str | None:
    """Why a server launched with `-np parallel` cannot take `concurrency` requests at once, or None;
    `fix`: what to do about it, in the caller's terms (default: the command line's)."""
    if parallel is None or concurrency <= 1:
        return None
    if parallel == -1:  # auto: llama-server opens 4 slots
        parallel = 4
    if parallel < concurrency:
        fix = fix or f"drop -np (mtp-tune then launches -np {concurrency}) or give -np {concurrency}"
        return (f"-np {parallel} gives {parallel} slot{'s' if parallel != 1 else ''}, fewer than the concurrency "
                f"{concurrency}: {fix}.")
    return None


def with_slots(settings: Settings, concurrency: int) -> Settings:
    """`settings` launched for `concurrency` requests at once: `-np N`, and each slot keeps the context
    one request had (`-c` times N unless the KV cache is unified; `-c 0`, the model's own, is per slot
    already). Settings that already give `-np` are the user's choice and are kept as they are."""
    if concurrency <= 1 or settings.parallel not in (None, 1):
        return settings
    return rescale_slots(settings, 1, concurrency)


def rescale_slots(settings: Settings, slots: int, to: int) -> Settings:
    """`settings` made for `slots` slots, remade for `to` (the context per slot kept): how a tune run
    for N users gives its answer at one user too."""
    ctx = settings.ctx_size
    if ctx and not kv_unified(settings):
        ctx = max(1, int(ctx) * to // max(1, slots))
    return replace(settings, parallel=to, ctx_size=ctx)


def slots_memory_text(settings: Settings, plan_of: Callable[[Settings], Any]) -> str | None:
    """`planned KV + recurrent state at -np 4: 460 MiB (+345 MiB over -np 1: KV +300, ...)`: what the
    slots of `settings` cost over one slot with the same context per slot, from two of the planner's
    predictions (`plan_of(settings)` gives a `Plan` or None); None when either is missing."""
    slots = settings.parallel or 1
    if slots <= 1:
        return None
    one_plan, n_plan = plan_of(rescale_slots(settings, slots, 1)), plan_of(settings)
    if one_plan is None or n_plan is None:
        return None
    keys = (("KV", "kv_mib"), ("draft KV", "draft_kv_mib"), ("recurrent", "recurrent_mib"))
    one, n = (p.to_dict()["totals"] for p in (one_plan, n_plan))
    diff = {k: float(n.get(k) or 0.0) - float(one.get(k) or 0.0) for _, k in keys}
    total = sum(float(n.get(k) or 0.0) for _, k in keys)
    parts = [f"{name} {diff[k]:+.0f}" for name, k in keys if round(diff[k])]
    return (f"planned KV + recurrent state at -np {slots}: {total:.0f} MiB ({sum(diff.values()):+.0f} MiB over -np 1"
            + (f": {', '.join(parts)} MiB" if parts else "") + ")")
