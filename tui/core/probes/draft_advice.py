"""Where drafting stops paying: what another draft n-max would do, from the per-position counts.

The arithmetic (`DraftPositions` says what the server counts):

* with r_i the share of drafts whose first i tokens were all accepted, a verification step yields
  L_m = 1 + r_1 + ... + r_m tokens with draft n-max m (the target's own token plus the accepted
  prefix: the mean acceptance length). Cutting the drafts at m < n changes nothing at positions up to
  m (greedy verification keeps the agreeing prefix), so L_m needs no guess, provided the shares hold
  when the steps start elsewhere in the text. Beyond the measured n-max nothing is known;
* a step drafts D_m = d_1 + ... + d_m tokens, d_i the share of drafts that reached position i (1 when
  every draft was full). For the same output, drafted tokens scale with D_m / L_m and verification
  steps with 1 / L_m;
* a step costs one plain decode step plus c per drafted token (drafting it with the MTP head and
  verifying it in the batch), so a generated token costs t_m = (1 + c D_m) / L_m plain decode steps.
  Position i pays while c is under c*_i, where t_i = t_(i-1):
  c*_i = r_i / (d_i L_(i-1) - D_(i-1) r_i);
* c is measured when MTP off ran beside it (same server otherwise): TG_on / TG_off = L_n / (1 + c D_n),
  so c = (L_n TG_off / TG_on - 1) / D_n. Without that it is assumed (`DEFAULT_DRAFT_COST`).

The advice is the n-max with the smallest t_m, recommended only when it is `MIN_GAIN` faster than
what ran; the evidence (shares, c*_i, drafted and step changes) is kept beside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from tui.core.probes.positions import DraftPositions

#: The cost of one drafted token, in plain decode steps, when no MTP-off measurement gives it. On a
#: GPU decode is bound by memory traffic: verifying a few more tokens in the batch is nearly free and
#: the MTP head is one block plus the output layer, and the speed-ups reported for n-max 3 at about
#: 70 % acceptance (L about 2.6, 2x faster) imply 1 + 3c = 1.3. A CPU pays far more per token:
#: measure MTP off beside MTP on, and the measured cost replaces this.
DEFAULT_DRAFT_COST = 0.10
#: A shorter n-max is recommended only when predicted at least this much faster (smaller gains are
#: within what the shares' own noise moves).
MIN_GAIN = 0.02


def measured_cost(pos: DraftPositions, tg_off: float | None, tg_on: float | None) -> float | None:
    """c from generation speeds with MTP off and on (see the module docstring); None when unknown."""
    if not pos.steps or not pos.drafted or not tg_off or not tg_on:
        return None
    length = 1.0 + sum(pos.accepted) / pos.steps
    return max(0.0, (length * tg_off / tg_on - 1.0) / (pos.drafted / pos.steps))


@dataclass(frozen=True)
class DraftAdvice:
    """The figures per n-max m = 1..n (index m-1) and the recommendation."""

    n_max: int
    best: int  # the recommended n-max (n_max: keep it)
    cost: float  # c, plain decode steps per drafted token
    cost_measured: bool
    shares: tuple[float, ...]  # r_i
    length: tuple[float, ...]  # L_m
    drafted: tuple[float, ...]  # D_m
    pays_below: tuple[float | None, ...]  # c*_i (None: pays at any cost)
    drafted_exact: bool
    text: str

    def step_cost(self, m: int) -> float:
        """t_m: plain decode steps per generated token with n-max m."""
        return (1.0 + self.cost * self.drafted[m - 1]) / self.length[m - 1]

    def change(self, m: int) -> dict[str, float]:
        """n-max m against what ran: relative change of drafted tokens and verification steps for
        the same output, of tokens accepted per step, and the predicted generation speed."""
        n = self.n_max
        ln, lm = self.length[n - 1], self.length[m - 1]
        return {
            "drafted": (self.drafted[m - 1] / lm) / (self.drafted[n - 1] / ln) - 1.0,
            "steps": ln / lm - 1.0,
            "accepted_per_step": (lm - 1.0) / (ln - 1.0) - 1.0 if ln > 1.0 else 0.0,
            "speed": self.step_cost(n) / self.step_cost(m) - 1.0,
        }

    @property
    def headline(self) -> str:
        """The advice in one short line (a panel's folded title); `text` has the evidence."""
        n, m = self.n_max, self.best
        if m < n:
            ch = self.change(m)
            return f"n-max {m}: {_pct(-ch['drafted'])} fewer drafted tokens, about {_pct(ch['speed'])} faster"
        if self.step_cost(n) >= 1.0:
            return f"n-max {n}, but drafting does not pay at a {_cost_pct(self.cost)} draft cost"
        pays = self.pays_below[n - 1]
        more = pays is None or pays > 2.0 * self.cost
        return f"keep n-max {n}" + (f"; n-max {n + 1} may pay too" if more else
                                    f": position {n} pays below a {_cost_pct(pays or 0.0)} draft cost")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["change"] = self.change(self.best) if self.best != self.n_max else None
        d["headline"] = self.headline
        return d


def advise(pos: DraftPositions | None, cost: float | None = None) -> DraftAdvice | None:
    """The advice for these counts; `cost`: the measured c (None: `DEFAULT_DRAFT_COST`)."""
    if pos is None or not pos.steps or not pos.n_max:
        return None
    c = DEFAULT_DRAFT_COST if cost is None else max(0.0, cost)
    r = pos.shares
    d = tuple(x / pos.steps for x in pos.drafted_by_position)
    length, drafted, pays = [], [], []
    l_prev, d_prev = 1.0, 0.0
    for ri, di in zip(r, d):
        denom = di * l_prev - d_prev * ri
        pays.append(ri / denom if denom > 0 else None)
        l_prev, d_prev = l_prev + ri, d_prev + di
        length.append(l_prev)
        drafted.append(d_prev)
    adv = DraftAdvice(pos.n_max, pos.n_max, c, cost is not None, r, tuple(length), tuple(drafted), tuple(pays),
                      pos.drafted_exact, "")
    fastest = min(range(1, pos.n_max + 1), key=lambda m: (adv.step_cost(m), m))
    best = fastest if adv.step_cost(pos.n_max) >= adv.step_cost(fastest) * (1.0 + MIN_GAIN) else pos.n_max
    adv = replace(adv, best=best)
    return replace(adv, text=_text(adv))


def _pct(x: float) -> str:
    return f"{100.0 * x:.0f} %"


def _cost_pct(x: float) -> str:
    return f"{100.0 * x:.1f} %" if x < 0.1 else _pct(x)


def _list(xs: list[str]) -> str:
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


def _still_slower(a: DraftAdvice, m: int) -> str:
    t = a.step_cost(m)
    return "." if t < 1.0 else f", and still slower than MTP off ({t:.2f} decode steps per token)."


def _text(a: DraftAdvice) -> str:
    src = "measured against MTP off" if a.cost_measured else "assumed; measure MTP off beside it for the real cost"
    cost = f"a drafted token costs about {_cost_pct(a.cost)} of a decode step ({src})"
    n, m = a.n_max, a.best
    if m < n:
        late = list(range(m + 1, n + 1))
        which = f"position {late[0]} accepts" if len(late) == 1 else f"positions {late[0]}-{late[-1]} accept"
        ch = a.change(m)
        pays = a.pays_below[m]
        why = "is never accepted" if not a.shares[m] else \
            f"pays only while a drafted token costs under {_cost_pct(pays or 0.0)} of a decode step"
        return (f"{which} {_list([_pct(a.shares[i - 1]) for i in late])} of drafts: n-max {m} would draft "
                f"{_pct(-ch['drafted'])} fewer tokens for the same output and accept {_pct(-ch['accepted_per_step'])} "
                f"fewer per step (mean length {a.length[n - 1]:.2f} -> {a.length[m - 1]:.2f}, "
                f"{_pct(ch['steps'])} more verification steps). Position {m + 1} {why}; {cost}: "
                f"n-max {m} is about {_pct(ch['speed'])} faster" + _still_slower(a, m))
    last, pays = a.shares[n - 1], a.pays_below[n - 1]
    out = f"keep n-max {n}: position {n} accepts {_pct(last)} of drafts and pays while a drafted token costs " + \
        (f"under {_cost_pct(pays)}" if pays is not None else "anything") + f" of a decode step; {cost}."
    if a.step_cost(n) >= 1.0:
        out += f" At that cost drafting does not pay at all ({a.step_cost(n):.2f} decode steps per token, 1.00 without MTP)."
    elif pays is None or pays > 2.0 * a.cost:
        out += f" The last position still pays well: n-max {n + 1} may pay too."
    return out
