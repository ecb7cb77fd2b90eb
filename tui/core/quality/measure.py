"""One quality measurement: a reference pass (or its cached logits), then one pass per K/V setting.

The reference is the measured file with f16 K/V, or `--ref` (a higher quant of the same model)
with f16 K/V; each setting is one `--kl-divergence` pass of the measured file against it. The
reference pass runs at most once per question: its logits are cached (`cache`), each setting's
figures too, so asking again runs nothing and a new setting costs one pass. `passes` counts what
ran, so the promise is checked, not assumed.
"""

from __future__ import annotations

import shutil
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tui.core.quality import budget as budgets
from tui.core.quality import cache, index
from tui.core.quality.models import ModelId, check_reference, model_id
from tui.core.quality.oracle import OracleError, OracleInfo, PassOutput, run_pass
from tui.core.quality.parse import (
    KldFigures, ParseError, chunk_done, cut_short, last_error, parse_base, parse_kld, scored_tokens,
)
from tui.core.quality.request import REFERENCE_TYPE, KvPair, PassArgs, perplexity_args
from tui.core.quality.text import QualityText, with_fallback

#: a reference pass or a setting's pass that takes longer than this is stopped (a big model on a CPU
#: can need many minutes per chunk: `--pass-timeout`)
DEFAULT_PASS_TIMEOUT_S = 1800.0
#: free disk kept beyond the reference's own size
DISK_MARGIN_BYTES = 256 * 2**20

Progress = Callable[[str], None]
#: tries of a setting's pass whose output stopped before its statistics (see CUT_NOTE)
KLD_TRIES = 3
CUT_NOTE = ("llama-perplexity ended before its statistics reached its output (llama.cpp writes its log from a "
            "thread that exit can cut short, ggml-org/llama.cpp#22142), so that pass was run again")


class QualityError(RuntimeError):
    """A measurement that could not be made; one sentence naming the file, flag or pass."""


@dataclass(frozen=True)
class QualityRequest:
    """What to measure: a model file with the user's llama-server flags, the K/V settings, the reference
    file (None: the model itself), the text, the context and chunks asked for, the disk cap."""

    model: Path
    server_args: tuple[str, ...]
    kv: tuple[KvPair, ...]
    text: QualityText
    ref_model: Path | None = None
    ctx: int | None = None
    chunks: int | None = None
    cap_bytes: int = int(budgets.DEFAULT_CAP_GIB * 2**30)
    pass_timeout: float = DEFAULT_PASS_TIMEOUT_S


@dataclass(frozen=True)
class SettingResult:
    """One K/V setting's figures as llama-perplexity printed them, its pass's seconds, and whether
    they came from the cache (then `seconds` is the original pass's)."""

    kv: KvPair
    figures: KldFigures
    seconds: float
    cached: bool

    def to_json(self) -> dict[str, Any]:
        return {"kv": self.kv.label, "k": self.kv.k, "v": self.kv.v, "seconds": self.seconds, "cached": self.cached,
                **self.figures.to_json()}


@dataclass
class QualityReport:
    """Everything `mtp-tune quality` prints: what was measured against what, on which text, at which
    context, the reference's size and cost, each setting's figures, and the passes that ran."""

    model: ModelId
    reference: ModelId
    text: QualityText
    budget: budgets.Budget
    pass_args: PassArgs
    oracle: OracleInfo
    results: list[SettingResult] = field(default_factory=list)
    ref_path: Path | None = None
    ref_bytes: int = 0
    ref_seconds: float | None = None
    ref_cached: bool = False
    passes: dict[str, int] = field(default_factory=lambda: {"reference": 0, "settings": 0, "repeated": 0})
    notes: list[str] = field(default_factory=list)

    @property
    def ctx(self) -> int:
        return self.results[0].figures.ctx if self.results else self.budget.ctx

    @property
    def chunks(self) -> int:
        return self.results[0].figures.chunks if self.results else self.budget.chunks

    @property
    def tokens(self) -> int:
        """Tokens scored per setting (the second half of each chunk)."""
        return scored_tokens(self.ctx, self.chunks)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": str(self.model.path), "model_digest": self.model.digest,
            "reference": {"model": str(self.reference.path), "kv": f"{REFERENCE_TYPE}/{REFERENCE_TYPE}",
                          "logits": str(self.ref_path) if self.ref_path else None, "bytes": self.ref_bytes,
                          "seconds": self.ref_seconds, "cached": self.ref_cached},
            "text": {"source": self.text.label, "bytes": self.text.n_bytes, "digest": self.text.digest},
            "ctx": self.ctx, "chunks": self.chunks, "tokens": self.tokens,
            "flags": list(self.pass_args.args), "dropped_flags": list(self.pass_args.dropped),
            "perplexity": {"path": str(self.oracle.path), "version": self.oracle.version_string},
            "passes": dict(self.passes), "notes": list(self.notes),
            "results": [r.to_json() for r in self.results],
        }


def _say(progress: Progress | None, msg: str) -> None:
    if progress is not None:
        progress(msg)


def identify(req: QualityRequest) -> tuple[ModelId, ModelId]:
    """The measured model and its reference from their headers, the reference checked (ModelError):
    before any binary is found or built, so a wrong file is said at once."""
    model = model_id(req.model)
    ref = model_id(req.ref_model, "--ref") if req.ref_model else model
    check_reference(model, ref)
    return model, ref


def measure(req: QualityRequest, oracle: OracleInfo, *, progress: Progress | None = None,
            cancel: threading.Event | None = None) -> QualityReport:
    """Measure every setting of `req` (see the module docstring); QualityError on any failure."""
    model, ref = identify(req)
    pargs = perplexity_args(req.server_args, oracle.options)
    text = with_fallback(req.text, budgets.estimate_tokens(req.text.n_bytes), 2 * budgets.MIN_CTX)
    tokens, exact = budgets.estimate_tokens(text.n_bytes), False
    # every pass that ran: a retried reference included; `repeated`: setting passes run again (`_setting`)
    passes = {"reference": 0, "settings": 0, "repeated": 0}
    for _attempt in range(3):
        plan = budgets.choose(n_vocab=model.n_vocab, tokens=tokens, cap_bytes=req.cap_bytes, ctx=req.ctx,
                              chunks=req.chunks, n_ctx_train=model.n_ctx_train, tokens_exact=exact)
        report = QualityReport(model, ref, text, plan, pargs, oracle, passes=passes,
                               notes=[n for n in (text.note,) if n] + list(plan.notes))
        if pargs.dropped:
            report.notes.append(f"not passed to llama-perplexity (they change no logit): {', '.join(pargs.dropped)}")
        ref_key = cache.key("ref", ref.digest, cache.binary_id(oracle.path), text.digest, plan.ctx, plan.chunks,
                            pargs.key_args)
        todo = _from_cache(report, req.kv, ref_key)
        if not todo:  # every figure asked for is known: the reference is not even needed
            meta = cache.read_ref_meta(ref_key) or {}
            report.ref_cached, report.ref_bytes, report.ref_seconds = True, int(meta.get("bytes", 0)), meta.get("seconds")
            report.ref_path = cache.cached_ref(ref_key)
            return report
        short = _ensure_reference(report, req, ref_key, progress, cancel)
        if short is None:
            break
        # The tokenizer counted fewer than estimated: plan again on the real count (or on the corpus).
        longer = with_fallback(text, short, 2 * budgets.MIN_CTX)
        text, tokens, exact = (longer, budgets.estimate_tokens(longer.n_bytes), False) if longer is not text \
            else (text, short, True)
    else:  # pragma: no cover - each retry lowers the context, which `choose` bounds below
        raise QualityError("the reference pass kept finding the text too short; give a longer --text.")
    assert report.ref_path is not None
    for kv in todo:
        report.results.append(_setting(report, req, kv, ref_key, progress, cancel))
    report.results.sort(key=lambda r: req.kv.index(r.kv))
    return report


def _result_key(report: QualityReport, ref_key: str, kv: KvPair) -> str:
    return cache.key("result", ref_key, report.model.digest, kv.k, kv.v)


def _from_cache(report: QualityReport, kvs: Sequence[KvPair], ref_key: str) -> list[KvPair]:
    """Fill `report.results` with the cached settings; return the ones still to measure."""
    todo = []
    for kv in kvs:
        hit = cache.read_result(_result_key(report, ref_key, kv))
        if hit is None:
            todo.append(kv)
            continue
        report.results.append(SettingResult(kv, KldFigures.from_json(hit["figures"]), float(hit["seconds"]), True))
    return todo


def _ensure_reference(report: QualityReport, req: QualityRequest, ref_key: str, progress: Progress | None,
                      cancel: threading.Event | None) -> int | None:
    """The reference's logits, cached or computed now (`report.ref_*` set). Returns the text's real token
    count when the tokenizer found it shorter than two contexts (nothing written then), else None."""
    try:
        with cache.locked(ref_key):
            return _reference_locked(report, req, ref_key, progress, cancel)
    except TimeoutError as exc:
        raise QualityError(f"{exc}: another mtp-tune is computing the same reference; try again when it is done.") \
            from None


def _reference_locked(report: QualityReport, req: QualityRequest, ref_key: str, progress: Progress | None,
                      cancel: threading.Event | None) -> int | None:
    """`_ensure_reference` under its lock: the cached file, else a reference pass into a temporary file."""
    path = cache.cached_ref(ref_key)
    if path is not None:
        meta = cache.read_ref_meta(ref_key) or {}
        report.ref_path, report.ref_bytes, report.ref_cached = path, path.stat().st_size, True
        report.ref_seconds = meta.get("seconds")
        return None
    plan = report.budget
    cache.prune_refs(req.cap_bytes, keep={ref_key}, room_for=plan.ref_bytes)
    free = shutil.disk_usage(cache.root()).free
    if free < plan.ref_bytes + DISK_MARGIN_BYTES:
        raise QualityError(f"{cache.root()}: {free / 1e9:.2f} GB free, and the reference logits need "
                           f"{plan.ref_bytes / 1e9:.2f} GB; free some disk or lower --disk-cap.")
    tmp = cache.tmp_ref(ref_key)
    text_file = tmp.with_name(f"{tmp.stem}.text.tmp")  # pruned with the reference's if mtp-tune is killed
    text_file.write_text(report.text.text, encoding="utf-8")
    argv = [str(report.oracle.path), "-m", str(report.reference.path), *report.pass_args.args,
            "-c", str(plan.ctx), "--chunks", str(plan.chunks), "-f", str(text_file),
            "-ctk", REFERENCE_TYPE, "-ctv", REFERENCE_TYPE, "--kl-divergence-base", str(tmp)]
    _say(progress, f"reference: {report.reference.path.name} with {REFERENCE_TYPE} K/V at -c {plan.ctx}, "
                   f"{plan.chunks} chunk{'s' if plan.chunks != 1 else ''} ({plan.ref_bytes / 1e6:.0f} MB of logits)")
    try:
        out = _run(argv, req, cancel, None)
        report.passes["reference"] += 1
        base = parse_base(out.lines)
        if base.short_tokens is not None:
            return base.short_tokens
        size = _check_ref_file(tmp, out)
        meta = {"bytes": size, "seconds": out.seconds, "chunks": base.chunks, "ctx": base.ctx,
                "ppl": base.ppl.value if base.ppl else None, "model": str(report.reference.path)}
        report.ref_path = cache.finish_ref(ref_key, tmp, meta)
    finally:
        tmp.unlink(missing_ok=True)
        text_file.unlink(missing_ok=True)
    report.ref_bytes, report.ref_seconds = size, out.seconds
    return None


def _check_ref_file(path: Path, out: PassOutput) -> int:
    """The reference file's size, checked against its own header (a cut pass leaves a short file)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(20)
        size = path.stat().st_size
    except OSError:
        raise QualityError(f"the reference pass wrote no logits (exit {out.returncode}): {last_error(out.lines)}") from None
    if len(head) == 12 and head[:8] == b"_logits_":  # the header alone: it stopped at "need at least N tokens"
        raise QualityError(f"the text is shorter than two contexts of {struct.unpack('<I', head[8:12])[0]} tokens for "
                           "this model's tokenizer (llama-perplexity wrote no logits); give a longer --text or a smaller -c.")
    if len(head) < 20 or head[:8] != b"_logits_":
        raise QualityError(f"the reference pass wrote no logits (exit {out.returncode}): {last_error(out.lines)}")
    n_ctx, n_vocab, n_chunk = struct.unpack("<Iii", head[8:20])
    want = budgets.ref_bytes(n_vocab, n_ctx, n_chunk)
    if out.returncode != 0 or size != want:
        raise QualityError(f"the reference pass ended (exit {out.returncode}) with {size} of {want} bytes of logits: "
                           f"{last_error(out.lines)}")
    return size


def _setting(report: QualityReport, req: QualityRequest, kv: KvPair, ref_key: str, progress: Progress | None,
             cancel: threading.Event | None) -> SettingResult:
    """One `--kl-divergence` pass of the measured file with `kv` against the reference; its figures cached."""
    assert report.ref_path is not None
    argv = [str(report.oracle.path), "-m", str(report.model.path), *report.pass_args.args, "-c", str(report.budget.ctx),
            *kv.args, "--kl-divergence-base", str(report.ref_path), "--kl-divergence"]
    _say(progress, f"{kv.label}: measuring against the reference")

    def on_line(line: str) -> None:
        n = chunk_done(line)
        if n is not None:
            _say(progress, f"{kv.label}: chunk {n}/{report.budget.chunks}")

    report.passes["settings"] += 1
    for attempt in range(1, KLD_TRIES + 1):
        out = _run(argv, req, cancel, on_line)
        try:
            figures = parse_kld(out.lines)
            break
        except ParseError as exc:
            if out.returncode != 0 or not cut_short(out.lines) or attempt == KLD_TRIES:
                raise QualityError(f"-ctk {kv.k} -ctv {kv.v}: {exc} (exit {out.returncode})") from None
            report.passes["repeated"] += 1
            if CUT_NOTE not in report.notes:
                report.notes.append(CUT_NOTE)
    result_key = _result_key(report, ref_key, kv)
    entry = index.Measured(report.model.digest, str(report.model.path), kv, figures, report.text.label,
                           report.text.digest, report.reference.digest, str(report.reference.path),
                           tuple(report.pass_args.key_args), time.time(), out.seconds, result_key)
    cache.write_result(result_key, {"figures": figures.to_json(), "seconds": out.seconds,
                                    "model": str(report.model.path), "kv": kv.label, "entry": entry.to_json()})
    index.record(entry)  # what `index.lookup` finds for this model from now on, without running anything
    return SettingResult(kv, figures, out.seconds, False)


def _run(argv: list[str], req: QualityRequest, cancel: threading.Event | None,
         on_line: Callable[[str], None] | None) -> PassOutput:
    try:
        return run_pass(argv, timeout=req.pass_timeout, on_line=on_line, cancel=cancel)
    except OracleError as exc:
        raise QualityError(str(exc)) from None
