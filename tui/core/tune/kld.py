"""What the tune's choices cost in output quality, measured before the trials, and the KLD budget.

Why measured and not a guessed floor: how much a quantized KV cache or a lower weight quant changes
the output differs by model (and by text), so `--max-kld X` asks llama.cpp itself
(`tui.core.quality.measure`: llama-perplexity's mean KL divergence from a reference) and searches
only what is within X. The draft's K/V types are free of the budget: they change how many drafted
tokens are accepted, never the output, which the main model alone decides.

What is measured: the reference is `--ref`, else the largest model file, with f16 K/V. Each other
file first with f16 K/V (its weights' own cost); a file over the budget is not tried. Then each main
K/V setting the space would search (or the fixed one) of each kept file, against the same reference,
so the figure of a trial is its file and its K/V together. quality caches the reference's logits and
every result: a second run of the same tune measures nothing.

The seam is `Measurer` (a QualityRequest -> its settings' results): the real one runs llama-perplexity
(`find_measurer`); the tests inject figures.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.core.options.argv import settings_to_argv
from tui.core.options.settings import Settings, settings_from_json
from tui.core.quality.measure import QualityError, QualityRequest, SettingResult, measure
from tui.core.quality.oracle import OracleError, oracle_info
from tui.core.quality.parse import KldFigures
from tui.core.quality.request import REFERENCE_TYPE, KvPair
from tui.core.quality.text import QualityText
from tui.core.server.provision import ProvisionError, ensure_perplexity
from tui.core.tune.space import Space, kv_pair, quality_key

F16 = KvPair(REFERENCE_TYPE, REFERENCE_TYPE)
#: quality's progress line for one chunk of a pass (`measure._setting`: `q8_0: chunk 3/8`)
_CHUNK = re.compile(r": chunk \d+/\d+$")
#: the seam: one quality request -> the figures of its K/V settings, in its order
Measurer = Callable[[QualityRequest], Sequence[SettingResult]]
Say = Callable[[str], None]


class KldError(ValueError):
    """Nothing is left within the budget; the sentence gives the figures and what to change."""


def fmt_kld(x: float | None) -> str:
    """A KL divergence with three significant digits (`0.116`, `0.00213`, `3.2e-05`, `0`)."""
    return "-" if x is None else f"{x + 0.0:.3g}"


@dataclass(frozen=True)
class QualityAsk:
    """What a tune asks of quality: the budget (None: the figures only), the model files (the largest
    first), `--ref` (None: the largest file), the text scored (the workload's suite, else quality's)."""

    max_kld: float | None
    files: tuple[Path, ...]
    text: QualityText
    ref: Path | None = None

    @property
    def reference(self) -> Path:
        return self.ref or self.files[0]


@dataclass(frozen=True)
class Cost:
    """One model file with one main K/V setting, against the reference: llama-perplexity's figures."""

    model: str
    kv: KvPair
    figures: KldFigures
    cached: bool = False

    @property
    def kld(self) -> float:
        return self.figures.kld_mean.value + 0.0  # llama.cpp may print -0.000000

    def text(self) -> str:
        """`KLD 0.00213 ± 0.00011, same top 98.9 %`."""
        f = self.figures
        return f"KLD {fmt_kld(self.kld)}{_unc(f.kld_mean.uncertainty)}, same top {f.same_top_pct.value:.1f} %"

    def to_json(self) -> dict[str, Any]:
        f = self.figures
        return {"model": self.model, "kv": self.kv.label, "kld_mean": self.kld, "kld_uncertainty": f.kld_mean.uncertainty,
                "kld_p99": f.kld_p99, "same_top_pct": f.same_top_pct.value,
                "same_top_uncertainty_pct": f.same_top_pct.uncertainty, "ctx": f.ctx, "chunks": f.chunks,
                "cached": self.cached}


@dataclass
class QualityBook:
    """What was measured for one tune: each file's own cost (None: the reference itself), each
    (file, K/V)'s, the notes on what the budget left out, and what the space must refuse."""

    max_kld: float | None
    reference: Path
    files: dict[str, Cost | None] = field(default_factory=dict)
    costs: dict[tuple[str, str, str], Cost] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: (file, K, V) over the budget on a searched axis -> why (`space.Space.refused`: never launched)
    refused: dict[tuple[str, str, str], str] = field(default_factory=dict)
    text: str = ""

    def over(self, c: Cost | None) -> bool:
        return c is not None and self.max_kld is not None and c.kld > self.max_kld

    def cost(self, settings: Settings) -> Cost | None:
        return self.costs.get(quality_key(settings))

    def of_trial(self, rec: Any) -> Cost | None:
        """A trial's cost, read from the settings it launched (`lab.trial.Trial.settings`)."""
        return self.cost(settings_from_json(rec.settings)) if rec.settings else None

    def trial_text(self, rec: Any) -> str:
        c = self.of_trial(rec)
        return c.text() if c is not None else "not measured"

    def trial_json(self, rec: Any) -> dict[str, Any] | None:
        c = self.of_trial(rec)
        return c.to_json() if c is not None else None

    def answer(self, rec: Any) -> str:
        """The sentence the answer ends with: what the chosen configuration costs in quality."""
        c = self.of_trial(rec)
        if c is None:
            return f"Its quality cost was not measured (#{rec.number})."
        within = f", within --max-kld {self.max_kld:g}" if self.max_kld is not None else ""
        return (f"Its quality cost: {c.text()} ({c.kv.label} K/V on {Path(c.model).name}, against "
                f"{self.reference.name} with f16 K/V{within}).")

    def to_json(self) -> dict[str, Any]:
        return {"max_kld": self.max_kld, "reference": str(self.reference), "text": self.text,
                "files": {f: (c.to_json() if c else None) for f, c in self.files.items()},
                "settings": [c.to_json() for c in self.costs.values()], "notes": list(self.notes)}

    def section(self) -> list[str]:
        """The report's quality section: against what, the budget, every figure (what the budget left out
        is in the run's notes)."""
        budget = f"budget: mean KLD at most {self.max_kld:g} (--max-kld)" if self.max_kld is not None else \
            "no budget (--max-kld): the figures only"
        out = [f"Measured by llama-perplexity --kl-divergence against {self.reference.name} with f16 K/V on "
               f"{self.text or 'the text'}; {budget}. The draft's K/V types are free of it: they change acceptance, "
               "never the output.", "", "| model file | main K/V | mean KLD | same top % | |", "|---|---|---|---|---|"]
        order = list(self.files)
        for c in sorted(self.costs.values(), key=lambda c: order.index(c.model) if c.model in order else len(order)):
            f = c.figures
            top = f"{f.same_top_pct.value:.1f}" + (f" ± {f.same_top_pct.uncertainty:.1f}"
                                                   if f.same_top_pct.uncertainty is not None else "")
            said = "over the budget" if self.over(c) else ""
            out.append(f"| {Path(c.model).name} | {c.kv.label} | {fmt_kld(c.kld)}{_unc(f.kld_mean.uncertainty)} | {top} | {said} |")
        return out + [""]


def _unc(u: float | None) -> str:
    return f" ± {u + 0.0:.2g}" if u is not None else ""


def _key(f: Path, kv: KvPair) -> tuple[str, str, str]:
    return quality_key(Settings(model=str(f), cache_type_k=kv.k, cache_type_v=kv.v))


def measure_book(ask: QualityAsk, pairs: Sequence[KvPair], base: Settings, measurer: Measurer,
                 say: Say = lambda _m: None) -> QualityBook:
    """Measure what `ask` needs (see the module docstring) through `measurer`; KldError when no file is
    within the budget. `pairs`: the main K/V settings the tune may search (or the fixed one)."""
    ref = ask.reference
    book = QualityBook(ask.max_kld, ref, text=ask.text.label)
    args = tuple(settings_to_argv(base, redact=True))

    def request(f: Path, kvs: Sequence[KvPair]) -> QualityRequest:
        same = f.resolve() == ref.resolve()
        return QualityRequest(model=f, server_args=args, kv=tuple(kvs), text=ask.text, ref_model=None if same else ref,
                              ctx=base.ctx_size or None)

    kept: list[Path] = []
    for f in ask.files:
        if f.resolve() == ref.resolve():
            book.files[str(f)] = None
            kept.append(f)
            continue
        say(f"{f.name}: its weights with f16 K/V against {ref.name}")
        got = measurer(request(f, [F16]))[0]
        own = Cost(str(f), F16, got.figures, got.cached)
        book.files[str(f)] = own
        book.costs[_key(f, F16)] = own
        if book.over(own):
            book.notes.append(f"{f.name}: KLD {fmt_kld(own.kld)} > {ask.max_kld:g} with f16 K/V against {ref.name}, "
                              "not tried.")
        else:
            kept.append(f)
    if not kept:
        raise KldError(f"every model file is over --max-kld {ask.max_kld:g} with f16 K/V against {ref.name} ("
                       + "; ".join(f"{Path(f).name} {fmt_kld(c.kld)}" for f, c in book.files.items() if c) + "); raise it.")
    for f in kept:
        todo = [p for p in pairs if _key(f, p) not in book.costs]
        if todo:
            say(f"{f.name}: main K/V {', '.join(p.label for p in todo)} against {ref.name} with f16 K/V")
            for r in measurer(request(f, todo)):
                book.costs[_key(f, r.kv)] = Cost(str(f), r.kv, r.figures, r.cached)
    cached = sum(c.cached for c in book.costs.values())
    say(f"{len(book.costs) - cached} figure{'s' if len(book.costs) - cached != 1 else ''} measured, {cached} from the cache")
    return book


def within_budget(book: QualityBook, kv_values: Sequence[str] | None) -> dict[str, tuple[Any, ...]]:
    """The values the tune searches within the budget: the kept model files, and the main K/V values
    within it on at least one kept file (`kv_values` None: K/V is fixed, kept whatever it costs, said).
    A value over it on some files only stays; those combinations go to `book.refused`. Notes say each
    left-out value with its figure; KldError when no main K/V value is left."""
    kept = [f for f, c in book.files.items() if not book.over(c)]
    out: dict[str, tuple[Any, ...]] = {}
    if len(book.files) > 1:
        out["model"] = tuple(kept)
    if book.max_kld is None:
        return out
    limit = f"{book.max_kld:g}"
    if kv_values is None:
        for f in kept:
            fixed = [c for c in book.costs.values() if c.model == f and c.kv != F16 and book.over(c)]
            book.notes += [f"{c.kv.label} on {Path(f).name}: KLD {fmt_kld(c.kld)} > {limit}, kept: it is a fixed flag."
                           for c in fixed]
        return out
    left: list[str] = []
    gone: list[str] = []
    for v in kv_values:
        pair = KvPair(*kv_pair(v))
        over = [(f, c) for f in kept if book.over(c := book.costs.get(_key(Path(f), pair)))]
        if len(over) == len(kept):
            figs = fmt_kld(over[0][1].kld) if len(kept) == 1 else ", ".join(f"{fmt_kld(c.kld)} on {Path(f).name}"
                                                                             for f, c in over)
            gone.append(f"{v}: KLD {figs} > {limit}, not searched.")
            continue
        left.append(v)
        for f, c in over:
            book.refused[_key(Path(f), pair)] = f"KLD {fmt_kld(c.kld)} > {limit} (--max-kld) for {v} with {Path(f).name}"
            book.notes.append(f"{v} with {Path(f).name}: KLD {fmt_kld(c.kld)} > {limit}, not tried.")
    if not left:
        raise KldError(f"every main K/V type is over --max-kld {limit} ({'; '.join(g.removesuffix(', not searched.') for g in gone)}); "
                       "raise --max-kld or give other types (--axis kv=...).")
    book.notes[:0] = gone
    out["kv"] = tuple(left)
    return out


def tune_quality(ask: QualityAsk, space: Space, base: Settings, measurer: Measurer,
                 say: Say = lambda _m: None) -> tuple[QualityBook, dict[str, tuple[Any, ...]]]:
    """Measure what a tune of `space` (built before quality) may search, then the values within the
    budget (`within_budget`): the main K/V axis' values, or the fixed K/V pair when there is no axis."""
    kv_axis = next((a for a in space.axes if a.name == "kv"), None)
    pairs = [KvPair(*kv_pair(v)) for v in kv_axis.values] if kv_axis else [KvPair(*quality_key(base)[1:])]
    book = measure_book(ask, pairs, base, measurer, say)
    return book, within_budget(book, kv_axis.values if kv_axis else None)


def find_measurer(perplexity_bin: Path | None, server_bin: Path, say: Say, cancel: threading.Event | None,
                  tick: Say | None = None) -> Measurer:
    """The measurer that runs llama-perplexity (`quality.measure`): `--perplexity-bin`, else the one
    beside the server, else mtp-tune's build (built once, said). QualityError when none can run.
    Its progress goes to `say`, each chunk done to `tick` (for a person watching, not for a log)."""
    try:
        found = ensure_perplexity(perplexity_bin, server_bin, progress=lambda ev: say(f"[build] {ev.phase}: {ev.message}"))
        oracle = oracle_info(found.path)
    except (ProvisionError, OracleError) as e:
        raise QualityError(f"no llama-perplexity to measure with: {e}") from None

    def progress(msg: str) -> None:
        if tick is not None and _CHUNK.search(msg):
            tick(msg)
        else:
            say(msg)

    def run(req: QualityRequest) -> Sequence[SettingResult]:
        return measure(req, oracle, progress=progress, cancel=cancel).results
    return run
