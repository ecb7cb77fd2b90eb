"""What one probe request recorded, and how a run's requests are aggregated.

Aggregation works per *pass*: pass r is the r-th repeat of every prompt in the suite. A pass's TG is
its total generated tokens (minus each request's first, which comes from the prompt's logits, as the
server counts it) over its total generation time; its PP is total prompt tokens over total prompt time
(over the `pp` prompts when the suite has some, else over all). The run's numbers are the median and
range over passes, so the spread is repeat-to-repeat noise, not the difference between a code prompt
and a story prompt. Per prompt, the median and range over its repeats are kept as well.

The /metrics figures (verification steps, mean acceptance length, acceptance by draft position) come
from counter deltas: one per request at concurrency 1, one per pass at N > 1, where the server-wide
counters are bracketed around the pass's whole concurrent phase (`phase_deltas`, by pass) and the
requests have none of their own (`metric_deltas` picks whichever covers each pass).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any

from tui.core.probes.draft_advice import advise
from tui.core.probes.positions import DraftPositions, total
from tui.core.probes.stats import Summary, summarize

#: /metrics counters whose per-request delta is recorded (names without the `llamacpp:` prefix).
METRIC_COUNTERS = (
    "prompt_tokens_total",
    "prompt_tokens_cached_total",
    "tokens_predicted_total",
    "n_decode_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_drafts_total",
)
STEPS, ACCEPTED = "spec_decode_num_drafts_total", "spec_decode_num_accepted_tokens_total"

#: Per pass (its `repeat`), the /metrics delta over its whole concurrent phase (concurrency N > 1).
PhaseDeltas = Mapping[int, Mapping[str, float]]


@dataclass
class RequestRecord:
    """One request of a probe run: the server's `timings` untouched, plus what the client measured."""

    seq: int  # order in the run, from 0
    prompt: str  # prompt name
    kind: str  # "tg" | "pp"
    repeat: int  # pass index, from 0
    n_predict: int
    timings: dict[str, Any] | None = None  # the server's object, verbatim
    ttft_ms: float | None = None  # client side: request sent -> first content token
    wall_ms: float | None = None  # client side: request sent -> response complete
    metrics_delta: dict[str, float] | None = None  # /metrics counter deltas over this request
    finish_reason: str | None = None
    error: str | None = None
    started_at: float | None = None  # time.time()
    content_chars: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.timings is not None

    def _t(self, key: str) -> float | None:
        if not self.timings:
            return None
        v = self.timings.get(key)
        return float(v) if isinstance(v, (int, float)) else None

    @property
    def prompt_n(self) -> int | None:
        v = self._t("prompt_n")
        return None if v is None else int(v)

    @property
    def cache_n(self) -> int | None:
        v = self._t("cache_n")
        return None if v is None else int(v)

    @property
    def predicted_n(self) -> int | None:
        v = self._t("predicted_n")
        return None if v is None else int(v)

    @property
    def pp_tps(self) -> float | None:
        return self._t("prompt_per_second")

    @property
    def tg_tps(self) -> float | None:
        return self._t("predicted_per_second")

    @property
    def draft_n(self) -> int:
        """Draft tokens proposed; the server omits the key when there were none."""
        return int(self._t("draft_n") or 0)

    @property
    def draft_n_accepted(self) -> int:
        return int(self._t("draft_n_accepted") or 0)

    @property
    def acceptance(self) -> float | None:
        return self.draft_n_accepted / self.draft_n if self.draft_n else None

    @property
    def verify_steps(self) -> int | None:
        """Verification steps (drafts verified), from the /metrics delta; the timings don't carry it."""
        if not self.metrics_delta or STEPS not in self.metrics_delta:
            return None
        return int(self.metrics_delta[STEPS])

    @property
    def mean_accept_len(self) -> float | None:
        """1 + accepted / drafts, as the server log's `mean len` (None without drafts or metrics)."""
        steps = self.verify_steps
        if not steps or not self.metrics_delta:
            return None
        return 1.0 + float(self.metrics_delta.get(ACCEPTED, 0.0)) / steps

    @property
    def positions(self) -> DraftPositions | None:
        """Accepted tokens per draft position over this request, from the /metrics delta."""
        return DraftPositions.from_delta(self.metrics_delta)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RequestRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class PromptStats:
    name: str
    kind: str
    n: int
    tg_tps: Summary | None
    pp_tps: Summary | None
    ttft_ms: Summary | None
    acceptance: float | None
    prompt_n: int | None
    predicted_n: int | None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("tg_tps", "pp_tps", "ttft_ms"):
            s = getattr(self, k)
            d[k] = s.to_json() if s else None
        return d


@dataclass
class PassStats:
    repeat: int
    complete: bool
    tg_tps: float | None
    pp_tps: float | None
    acceptance: float | None
    mean_accept_len: float | None = None
    ttft_ms: float | None = None  # mean over the pass's requests

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _rate(tokens: float, ms: float) -> float | None:
    return 1000.0 * tokens / ms if ms > 0 and tokens > 0 else None


def records_from_json(items: list[dict[str, Any]]) -> list[RequestRecord]:
    return [RequestRecord.from_json(d) for d in items]


def metric_deltas(requests: Sequence[RequestRecord], phase_deltas: PhaseDeltas | None = None) -> list[Mapping[str, float]]:
    """The /metrics deltas that cover `requests`: a pass's own bracket where it has one (concurrency
    N > 1), else each successful request's."""
    phases = phase_deltas or {}
    out = [phases[rep] for rep in sorted({r.repeat for r in requests} & set(phases))]
    return out + [r.metrics_delta for r in requests
                  if r.ok and r.repeat not in phases and r.metrics_delta is not None]


def _steps_accepted(deltas: Sequence[Mapping[str, float]]) -> tuple[int | None, float]:
    """Verification steps (None when no delta counts them) and accepted tokens, over `deltas`."""
    counted = [d for d in deltas if STEPS in d]
    return (int(sum(d[STEPS] for d in counted)) if counted else None), sum(float(d.get(ACCEPTED, 0.0)) for d in counted)


def pass_stats(requests: list[RequestRecord], prompt_names: list[str],
               phase_deltas: PhaseDeltas | None = None) -> list[PassStats]:
    """Per-pass TG, PP and acceptance (see the module docstring)."""
    by_pass: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in requests:
        by_pass[r.repeat].append(r)
    has_pp = any(r.kind == "pp" for r in requests)
    has_tg = any(r.kind == "tg" for r in requests)
    out = []
    for rep in sorted(by_pass):
        reqs = [r for r in by_pass[rep] if r.ok]
        done = {r.prompt for r in reqs}
        complete = all(n in done for n in prompt_names)
        tg_reqs = [r for r in reqs if r.kind == "tg"] if has_tg else reqs
        pp_reqs = [r for r in reqs if r.kind == "pp"] if has_pp else reqs
        tg_tok = sum(max(0, (r.predicted_n or 0) - 1) for r in tg_reqs)
        tg_ms = sum(r._t("predicted_ms") or 0.0 for r in tg_reqs)
        pp_tok = sum(r.prompt_n or 0 for r in pp_reqs)
        pp_ms = sum(r._t("prompt_ms") or 0.0 for r in pp_reqs)
        drafted = sum(r.draft_n for r in reqs)
        accepted = sum(r.draft_n_accepted for r in reqs)
        steps, acc_m = _steps_accepted(metric_deltas(by_pass[rep], phase_deltas))
        ttfts = [r.ttft_ms for r in reqs if r.ttft_ms is not None]
        out.append(
            PassStats(
                repeat=rep,
                complete=complete,
                tg_tps=_rate(tg_tok, tg_ms),
                pp_tps=_rate(pp_tok, pp_ms),
                acceptance=accepted / drafted if drafted else None,
                mean_accept_len=1.0 + acc_m / steps if steps else None,
                ttft_ms=sum(ttfts) / len(ttfts) if ttfts else None,
            )
        )
    return out


def prompt_stats(requests: list[RequestRecord]) -> list[PromptStats]:
    """Median and range per prompt over its repeats (successful requests only), in suite order."""
    order: list[str] = []
    groups: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in requests:
        if r.prompt not in groups:
            order.append(r.prompt)
        groups[r.prompt].append(r)
    out = []
    for name in order:
        reqs = [r for r in groups[name] if r.ok]
        drafted = sum(r.draft_n for r in reqs)
        pn = [r.prompt_n for r in reqs if r.prompt_n is not None]
        gn = [r.predicted_n for r in reqs if r.predicted_n is not None]
        out.append(
            PromptStats(
                name=name,
                kind=groups[name][0].kind,
                n=len(reqs),
                tg_tps=summarize([r.tg_tps for r in reqs]),
                pp_tps=summarize([r.pp_tps for r in reqs]),
                ttft_ms=summarize([r.ttft_ms for r in reqs]),
                acceptance=sum(r.draft_n_accepted for r in reqs) / drafted if drafted else None,
                prompt_n=int(median(pn)) if pn else None,
                predicted_n=int(median(gn)) if gn else None,
            )
        )
    return out


def summarize_run(requests: list[RequestRecord], prompt_names: list[str] | None = None,
                  phase_deltas: PhaseDeltas | None = None) -> dict[str, Any]:
    """The run summary stored with the run and printed by `probe --json`; `phase_deltas`: the /metrics
    delta of each pass run at concurrency N > 1 (see the module docstring).

    Keys: n_requests, n_ok, n_failed, tg_tps_median, pp_tps_median, acceptance (accepted/drafted over
    the run), mean_accept_len (1 + accepted/verification steps, from /metrics), tg_tps / pp_tps /
    acceptance_by_pass (Summary over complete passes), ttft_ms, pp_source, passes, prompts;
    positions (`DraftPositions` over the successful requests, None without /metrics or drafts) and
    draft_advice (`draft_advice.advise` of it at the assumed draft cost).
    """
    if prompt_names is None:
        prompt_names = list(dict.fromkeys(r.prompt for r in requests))
    passes = pass_stats(requests, prompt_names, phase_deltas)
    use = [p for p in passes if p.complete] or passes
    ok = [r for r in requests if r.ok]
    drafted = sum(r.draft_n for r in ok)
    accepted = sum(r.draft_n_accepted for r in ok)
    deltas = metric_deltas(requests, phase_deltas)
    steps, acc_metric = _steps_accepted(deltas)
    tg = summarize([p.tg_tps for p in use])
    pp = summarize([p.pp_tps for p in use])
    positions = total(DraftPositions.from_delta(d) for d in deltas)
    advice = advise(positions)
    return {
        "n_requests": len(requests),
        "n_ok": len(ok),
        "n_failed": len(requests) - len(ok),
        "n_passes": len(use),
        "partial_passes_only": bool(passes) and not any(p.complete for p in passes),
        "tg_tps_median": tg.median if tg else None,
        "pp_tps_median": pp.median if pp else None,
        "acceptance": accepted / drafted if drafted else None,
        "draft_n": drafted,
        "draft_n_accepted": accepted,
        "verify_steps": steps,
        "mean_accept_len": 1.0 + acc_metric / steps if steps else None,
        "tg_tps": tg.to_json() if tg else None,
        "pp_tps": pp.to_json() if pp else None,
        "acceptance_by_pass": _j(summarize([p.acceptance for p in use])),
        "mean_accept_len_by_pass": _j(summarize([p.mean_accept_len for p in use])),
        "ttft_ms": _j(summarize([r.ttft_ms for r in ok])),
        "predicted_n_median": median([r.predicted_n for r in ok if r.predicted_n is not None] or [0]) or None,
        "pp_source": "pp" if any(r.kind == "pp" for r in requests) else "all",
        "passes": [p.to_json() for p in passes],
        "prompts": [s.to_json() for s in prompt_stats(requests)],
        "positions": positions.to_json() if positions else None,
        "draft_advice": advice.to_json() if advice else None,
    }


def _j(s: Summary | None) -> dict[str, Any] | None:
    return s.to_json() if s else None
