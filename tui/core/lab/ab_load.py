"""An A/B's verdict (MTP on/off above all) at one request at a time and at N at once, side by side.

Why both: speculative decoding spends spare compute on drafts. One request leaves a GPU mostly idle,
so MTP tends to win there; N requests batched together use that compute themselves, so the same
setting can lose under load. A verdict at N = 1 alone would mislead a server that serves N users,
and one at N alone would hide what a single user sees.

How: one interleaved A/B (`ab.run_ab`, any two sides) per concurrency, each the deployment for that load: the server
launched with `-np N` and each slot keeping the context one request had (`probes.concurrency.with_slots`),
the suite probed with N requests in flight (`lab.runner.default_prober(concurrency=N)`). Each
level's verdict is `ranking.decide` over its own passes, the lab's one noise rule: a request's
end-to-end time at that load (its PP and TG as the server timed them while N ran together).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tui.core.lab.ab import AbSide, run_ab
from tui.core.lab.ranking import AbVerdict
from tui.core.lab.runner import default_prober
from tui.core.probes.concurrency import with_slots
from tui.core.probes.stats import fmt_rel, fmt_summary
from tui.core.probes.suites import Suite


def levels_for(concurrency: int) -> list[int]:
    """The concurrencies a verdict reports: 1, and `concurrency` when it is more."""
    return [1] if concurrency <= 1 else [1, int(concurrency)]


@dataclass
class LoadVerdict:
    """B against A (MTP on against off) at each concurrency, in the order run."""

    levels: list[tuple[int, AbVerdict]]

    @property
    def status(self) -> str:
        """`complete` when every level completed, else the first level's that did not."""
        return next((v.status for _, v in self.levels if v.status != "complete"), "complete")

    def at(self, concurrency: int) -> AbVerdict | None:
        return next((v for n, v in self.levels if n == concurrency), None)

    @property
    def concurrency(self) -> int:
        """The highest concurrency run (the load asked for, unless a level before it stopped)."""
        return max((n for n, _ in self.levels), default=1)

    @property
    def workload(self) -> tuple[int, int]:
        """The request shape every level is judged for."""
        return self.levels[0][1].workload if self.levels else (0, 0)

    @property
    def settings(self) -> dict[str, Any] | None:
        """The settings at one request at a time (each level launches them with its slots)."""
        return self.levels[0][1].settings if self.levels else None

    def for_workload(self, prompt_tokens: int, output_tokens: int) -> LoadVerdict:
        """The same passes judged for another request shape (nothing is run)."""
        return LoadVerdict([(n, v.for_workload(prompt_tokens, output_tokens)) for n, v in self.levels])

    def table(self) -> list[str]:
        """One line per concurrency: the headline, each side's seconds per request, the TG change, B's acceptance."""
        out = []
        for n, v in self.levels:
            out.append(f"concurrency {n:>2}: {v.headline}: {v.a.name} {fmt_summary(v.a.e2e_s, 2)} s, {v.b.name} "
                       f"{fmt_summary(v.b.e2e_s, 2)} s per request ({fmt_rel(v.e2e.rel_change)} time); TG per request "
                       f"{fmt_summary(v.a.tg_tps)} -> {fmt_summary(v.b.tg_tps)} t/s; acceptance "
                       f"{fmt_summary(v.b.acceptance, 2)}")
        return out

    def answer(self) -> str:
        """Each concurrency's verdict in words, one after the other."""
        return " ".join(f"At concurrency {n}: {v.answer}" for n, v in self.levels)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "levels": [{"concurrency": n, **v.to_json()} for n, v in self.levels]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LoadVerdict:
        return cls([(int(x.get("concurrency", 1)), AbVerdict.from_json(x)) for x in d.get("levels") or []])


def _at(side: AbSide, n: int) -> AbSide:
    return AbSide(with_slots(side.settings, n), side.server_bin)


def run_ab_levels(a: AbSide, b: AbSide, suite: Suite | str, workload: tuple[int, int], passes: int,
                  levels: Sequence[int], *, ignore_eos: bool = False, **kw: Any) -> LoadVerdict:
    """`run_ab` at each concurrency of `levels` (the sides' settings made for one request at a time;
    each level launches them with its slots). Stops after a level that did not complete (the user
    cancelled, or a side could not launch); the other keyword arguments (`pair`, ...) go to `run_ab`."""
    out: list[tuple[int, AbVerdict]] = []
    for n in levels:
        v = run_ab(_at(a, n), _at(b, n), suite, workload, passes, prober=default_prober(ignore_eos, n), **kw)
        out.append((n, v))
        if v.status != "complete":
            break
    return LoadVerdict(out)
