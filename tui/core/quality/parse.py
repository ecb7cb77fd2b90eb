"""Reading llama-perplexity's printed figures: the product parses them, it never recomputes them.

`--kl-divergence` ends with three blocks (tools/perplexity/perplexity.cpp, `kl_divergence`):

    ====== Perplexity statistics ======
    Mean PPL(Q)                   :  12.345678 ±   0.123456
    ...
    ====== KL divergence statistics ======
    Mean    KLD:   0.007300 ±   0.000200
    Maximum KLD:   0.412345
    99.9%   KLD: ...          (then 99.0, 95.0, 90.0, Median, 10.0, 5.0, 1.0, 0.1, Minimum)
    ====== Token probability statistics ======
    Mean    Δp: -0.123 ± 0.010 %
    ...
    RMS Δp    :  1.234 ± 0.012 %
    Same top p: 94.800 ±  0.300 %

Each is `LABEL: VALUE [± UNCERTAINTY] [%]`; the label is kept with its inner spaces collapsed
(`99.0% KLD`, `Mean Δp`). With fewer than 100 scored tokens llama-perplexity prints no statistics.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_NUM = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|-?inf)"
_FIGURE = re.compile(rf"^\s*(?P<label>[^:=\[]+?)\s*:\s*(?P<v>{_NUM})\s*%?\s*(?:±\s*(?P<u>{_NUM})\s*%?)?\s*$")
_COMPUTING = re.compile(r"(?:computing|calculating perplexity) over (\d+) chunks, n_ctx=(\d+)")
_SHORT = re.compile(r"tokenizes to only (\d+) tokens")
_NEED = re.compile(r"you need at least (\d+) tokens")
_FINAL = re.compile(rf"Final estimate: PPL = ({_NUM}) \+/- ({_NUM})")
_ERROR = re.compile(r"error|failed|unable|invalid|cannot|not enough|exceeds", re.I)
_CHUNK_ROW = re.compile(r"^\s*(\d+)\s+" + _NUM + r"\s+±")


class ParseError(ValueError):
    """llama-perplexity's output lacks the figures asked for; the message quotes its last error line."""


@dataclass(frozen=True)
class Figure:
    value: float
    uncertainty: float | None = None


@dataclass(frozen=True)
class KldFigures:
    """One `--kl-divergence` pass's figures, as printed (KLD in nats, probabilities in %)."""

    kld_mean: Figure
    kld_max: float
    kld_p99: float
    same_top_pct: Figure
    dp_mean_pct: Figure
    chunks: int
    ctx: int
    ppl: Figure | None = None
    ppl_base: Figure | None = None
    #: every `LABEL: VALUE` line of the statistics blocks, by collapsed label
    all: dict[str, Figure] = field(default_factory=dict, compare=False)

    @property
    def tokens(self) -> int:
        """Tokens scored: llama-perplexity scores the second half of each chunk (positions n_ctx/2 .. n_ctx-2)."""
        return scored_tokens(self.ctx, self.chunks)

    def to_json(self) -> dict[str, Any]:
        return {
            "kld_mean": self.kld_mean.value, "kld_uncertainty": self.kld_mean.uncertainty,
            "kld_p99": self.kld_p99, "kld_max": self.kld_max,
            "same_top_pct": self.same_top_pct.value, "same_top_uncertainty_pct": self.same_top_pct.uncertainty,
            "dp_mean_pct": self.dp_mean_pct.value, "dp_uncertainty_pct": self.dp_mean_pct.uncertainty,
            "ppl": self.ppl.value if self.ppl else None, "ppl_base": self.ppl_base.value if self.ppl_base else None,
            "ctx": self.ctx, "chunks": self.chunks, "tokens": self.tokens,
            "printed": {k: [f.value, f.uncertainty] for k, f in self.all.items()},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KldFigures:
        printed = {k: Figure(float(v[0]), None if v[1] is None else float(v[1])) for k, v in d["printed"].items()}
        return cls(Figure(d["kld_mean"], d["kld_uncertainty"]), d["kld_max"], d["kld_p99"],
                   Figure(d["same_top_pct"], d["same_top_uncertainty_pct"]),
                   Figure(d["dp_mean_pct"], d["dp_uncertainty_pct"]), int(d["chunks"]), int(d["ctx"]),
                   printed.get("Mean PPL(Q)"), printed.get("Mean PPL(base)"), printed)


def scored_tokens(ctx: int, chunks: int) -> int:
    """Tokens llama-perplexity scores per pass: `n_ctx - 1 - n_ctx/2` per chunk (perplexity.cpp)."""
    return chunks * (ctx - 1 - ctx // 2)


def _collapse(label: str) -> str:
    return " ".join(label.split())


def figures(lines: Iterable[str]) -> dict[str, Figure]:
    """Every `LABEL: VALUE [± UNC] [%]` line after the first `======` header, by collapsed label."""
    out: dict[str, Figure] = {}
    in_stats = False
    for line in lines:
        if line.startswith("======"):
            in_stats = True
            continue
        m = _FIGURE.match(line) if in_stats else None
        if m:
            u = m.group("u")
            out[_collapse(m.group("label"))] = Figure(float(m.group("v")), float(u) if u is not None else None)
    return out


def computing(lines: Iterable[str]) -> tuple[int, int] | None:
    """(chunks, n_ctx) from the pass's `computing over N chunks, n_ctx=C` line."""
    found = None
    for line in lines:
        m = _COMPUTING.search(line)
        if m:
            found = (int(m.group(1)), int(m.group(2)))
    return found


def chunk_done(line: str) -> int | None:
    """The chunk number of a `--kl-divergence` progress row (`   3    12.3 ± 0.4 ...`), else None."""
    m = _CHUNK_ROW.match(line)
    return int(m.group(1)) if m else None


def cut_short(lines: Iterable[str]) -> bool:
    """True when a pass's output says nothing went wrong, yet lacks its statistics: llama.cpp's logger
    thread lost the end of the output at exit (it can stop after any line, even before the chunk table)."""
    return not any(_ERROR.search(ln) for ln in lines)


def last_error(lines: Iterable[str]) -> str:
    """The last line that reads like an error (what to quote in a one-sentence failure), else the last line."""
    lines = [ln.strip() for ln in lines if ln.strip()]
    for ln in reversed(lines):
        if _ERROR.search(ln):
            return ln
    return lines[-1] if lines else "no output"


def parse_kld(lines: Iterable[str]) -> KldFigures:
    """The figures of a `--kl-divergence` pass; ParseError quoting the last error when they are missing."""
    lines = list(lines)
    got = figures(lines)
    shape = computing(lines)
    need = ("Mean KLD", "Maximum KLD", "99.0% KLD", "Same top p", "Mean Δp")
    missing = [k for k in need if k not in got]
    if missing or shape is None:
        raise ParseError(f"llama-perplexity printed no {missing[0] if missing else 'chunk count'}: "
                         f"{last_error(lines)}")
    return KldFigures(
        kld_mean=got["Mean KLD"], kld_max=got["Maximum KLD"].value, kld_p99=got["99.0% KLD"].value,
        same_top_pct=got["Same top p"], dp_mean_pct=got["Mean Δp"], chunks=shape[0], ctx=shape[1],
        ppl=got.get("Mean PPL(Q)"), ppl_base=got.get("Mean PPL(base)"), all=got)


@dataclass(frozen=True)
class BaseRun:
    """What the reference pass (`--kl-divergence-base`) said: its chunks and context, its perplexity,
    or how many tokens the text had when they were fewer than two contexts."""

    chunks: int | None
    ctx: int | None
    ppl: Figure | None
    short_tokens: int | None = None
    needed_tokens: int | None = None


def parse_base(lines: Iterable[str]) -> BaseRun:
    lines = list(lines)
    shape = computing(lines)
    ppl = short = need = None
    for line in lines:
        if m := _FINAL.search(line):
            ppl = Figure(float(m.group(1)), float(m.group(2)))
        if m := _SHORT.search(line):
            short = int(m.group(1))
        if m := _NEED.search(line):
            need = int(m.group(1))
    return BaseRun(shape[0] if shape else None, shape[1] if shape else None, ppl, short, need)
