"""The workload a tune optimises for: the mean request shape (the objective) and the longest request
(what the context must hold); and `--workload`, what is probed and its shape in tokens, counted by
the server.

Why the mean is exact: a request costs `in / PP + out / TG` seconds (`probes.compare.e2e_seconds`),
which is linear in the token counts, so a suite of requests costs `len * (mean_in / PP + mean_out /
TG)`; the mean shape ranks configurations exactly as the whole suite does. The context is sized from
the longest single request instead, so no request of the workload is ever cut.

`--workload` is one of two kinds:

* a request shape `IN:OUT` (`12k:800`): probed with one raw prompt of IN tokens cut from the bundled
  long document and exactly OUT generated tokens (`ignore_eos`), so PP is measured at the length
  that matters (a micro-batch only pays off on prompts longer than itself) and the objective is the
  shape's own end-to-end time;
* a suite (`tasks`, `long-prompt`, `full` or a .toml/.jsonl file): probed as `mtp-tune probe` probes
  it; its shape (mean prompt and output tokens, the longest request) is counted by the model's own
  tokenizer through llama-server's `/apply-template` and `/tokenize` on one sizing launch, because
  a tokenizer differs by model by a factor of four (the tiny test models: ~0.75 tokens per byte; a
  Qwen-class model: ~0.25) and the context must hold the longest request without guessing.

`--concurrency N` makes the workload N such requests at once: every candidate launches with `-np N`
and N times the context (each slot holds the longest request), and is probed with N requests in
flight, so the objective is a request's end-to-end time under that load.

Why the server and not a guess: both `IN:OUT` prompts and suite counts come from the tokenizer the
candidates run, so the context every candidate gets holds every request of the workload exactly.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from tui.core.options.settings import Settings
from tui.core.planning.gguf_meta import GGUFMeta
from tui.core.planning.largest_ctx import CTX_STEP
from tui.core.planning.plan import plan
from tui.core.probes.concurrency import slots_memory_text
from tui.core.probes.compare import e2e_seconds
from tui.core.probes.run_types import RunConfig
from tui.core.probes.suites import BUILTIN, ProbePrompt, Suite, SuiteError, get_suite, long_document
from tui.core.sweep.axes import Objective, SweepDefinitionError, parse_objective


@dataclass(frozen=True)
class Workload:
    """Mean prompt and output tokens per request, the longest request (prompt + output), and how many
    requests run at once."""

    label: str
    in_tokens: float
    out_tokens: float
    longest: int
    concurrency: int = 1

    def seconds(self, pp_tps: float | None, tg_tps: float | None) -> float | None:
        """End-to-end seconds of one mean request at these speeds (None when a needed speed is missing)."""
        return e2e_seconds(self.in_tokens, self.out_tokens, pp_tps, tg_tps)  # type: ignore[arg-type]

    @property
    def objective(self) -> Objective:
        """The same objective as a sweep's `workload:IN,OUT` (rounded to whole tokens)."""
        return Objective("workload", round(self.in_tokens), max(1, round(self.out_tokens)))

    def ctx_needed(self, min_ctx: int = 0) -> int:
        """The context that holds the longest request (and `min_ctx`) in each of the `concurrency` slots,
        each up to a whole 256-cell block."""
        need = max(int(min_ctx), int(self.longest), 1)
        return -(-need // CTX_STEP) * CTX_STEP * self.concurrency

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"label": self.label, "in_tokens": self.in_tokens, "out_tokens": self.out_tokens,
                             "longest": self.longest}
        return {**d, "concurrency": self.concurrency} if self.concurrency > 1 else d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Workload:
        return cls(str(d["label"]), float(d["in_tokens"]), float(d["out_tokens"]), int(d["longest"]),
                   int(d.get("concurrency") or 1))


def shape(in_tokens: int, out_tokens: int, label: str | None = None) -> Workload:
    """Every request the same: `in_tokens` in, `out_tokens` out."""
    if in_tokens < 0 or out_tokens < 1:
        raise ValueError(f"--workload {in_tokens}:{out_tokens}: give a prompt of 0 or more tokens and an output of 1 or more.")
    return Workload(label or f"{in_tokens}:{out_tokens}", float(in_tokens), float(out_tokens), in_tokens + out_tokens)


def from_requests(label: str, requests: Sequence[tuple[int, int]]) -> Workload:
    """A suite as (prompt tokens, output tokens) per request: its mean shape and its longest request."""
    if not requests:
        raise ValueError(f"workload {label}: no requests to size it from.")
    n = len(requests)
    return Workload(label, sum(i for i, _ in requests) / n, sum(o for _, o in requests) / n,
                    max(i + o for i, o in requests))


def parse_shape(text: str) -> Workload:
    """`IN:OUT` (token counts, `12k` allowed), read with the sweep's own `workload:IN,OUT` parser."""
    t = text.strip()
    if ":" not in t:
        raise ValueError(f"--workload {text!r}: write IN:OUT, e.g. 12k:800 for a 12000-token prompt and an 800-token answer.")
    try:
        obj = parse_objective("workload:" + t.replace(":", ",", 1))
    except SweepDefinitionError:
        raise ValueError(f"--workload {text!r}: write IN:OUT with whole token counts, e.g. 2000:500 or 12k:800.") from None
    return shape(obj.in_tokens, obj.out_tokens, t)


def beyond_training(n_ctx_train: int, requests: Sequence[tuple[str, int]]) -> str | None:
    """The refusal of the first request (what gave it, its tokens) longer than the model's training
    context, or None. Why refuse: llama-server runs such a context with a warning only, and past
    what the model was trained on its answers (and so speed and acceptance) no longer mean anything;
    the sweep and the tune would measure and recommend it. `n_ctx_train` 0 (unknown) checks nothing."""
    if n_ctx_train <= 0:
        return None
    for what, tokens in requests:
        if tokens > n_ctx_train:
            return (f"{what}: {tokens} tokens is longer than the model's training context ({n_ctx_train} tokens); "
                    "shorten it to fit.")
    return None


#: Generation length of a suite prompt that does not set its own (the probe's default).
DEFAULT_N_PREDICT = RunConfig().n_predict
#: The prompt of a generation-only shape (`0:OUT`): a few tokens, so PP does not matter.
GEN_ONLY_PROMPT = "Once upon a time"
_TIMEOUT = httpx.Timeout(60.0, connect=5.0)


class WorkloadError(ValueError):
    """A --workload that cannot be read or sized; the message says what to write instead."""


@dataclass(frozen=True)
class WorkloadSpec:
    """What `--workload` named: a shape (`shape` set) or a suite (`suite` set), and `--concurrency`."""

    text: str
    shape: Workload | None = None
    suite: Suite | None = None
    concurrency: int = 1

    @property
    def exact_output(self) -> bool:
        """A shape generates exactly OUT tokens (ignore_eos); a suite stops where the model stops."""
        return self.shape is not None

    def identity(self) -> dict[str, Any]:
        """What a tune id hashes: the shape, or the suite's prompts (a file edited is a new tune), and
        the concurrency when above 1 (so a tune at concurrency 1 keeps the id it always had)."""
        load = {"concurrency": self.concurrency} if self.concurrency > 1 else {}
        if self.shape is not None:
            return {"shape": self.shape.to_json(), **load}
        assert self.suite is not None
        body = [[p.name, p.kind, p.n_predict, list(p.messages or ()), p.raw] for p in self.suite.prompts]
        digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]
        return {"suite": self.suite.name, "prompts": digest, **load}

    def sized(self, w: Workload) -> Workload:
        """`w` (a suite counted, or the shape) at this spec's concurrency."""
        return replace(w, concurrency=self.concurrency)

    def first_decode(self) -> ProbePrompt | None:
        """The suite's longest prompt: what the launch's first-decode check sends (OOMs at the first
        decode come with the longest prompt); a shape's prompt is known once the server can cut it."""
        if self.suite is None:
            return None
        return max(self.suite.prompts, key=lambda p: p.text_chars)


def parse_workload(text: str, concurrency: int = 1) -> WorkloadSpec:
    """`tasks`, `long-prompt`, `full`, a suite file, or `IN:OUT`, with `concurrency` requests at once;
    WorkloadError naming the problem."""
    if concurrency < 1:
        raise WorkloadError(f"--concurrency {concurrency}: give 1 or more requests at once.")
    spec = _parse_workload(text)
    shape = None if spec.shape is None else replace(spec.shape, concurrency=concurrency)
    return replace(spec, concurrency=concurrency, shape=shape)


def _parse_workload(text: str) -> WorkloadSpec:
    t = (text or "").strip()
    if not t:
        raise WorkloadError("--workload: give tasks, long-prompt, full, a suite file (.toml/.jsonl) or IN:OUT (e.g. 2000:500).")
    path = Path(t).expanduser()
    if t in BUILTIN or path.suffix in (".toml", ".jsonl") or path.is_file():
        try:
            return WorkloadSpec(t, suite=get_suite(t))
        except SuiteError as e:
            raise WorkloadError(f"--workload {t}: {e}") from None
    if ":" in t:
        try:
            return WorkloadSpec(t, shape=parse_shape(t))
        except ValueError as e:
            raise WorkloadError(str(e)) from None
    raise WorkloadError(f"--workload {t!r}: not a suite (tasks, long-prompt, full, or a .toml/.jsonl file) nor a "
                        "request shape IN:OUT (e.g. 2000:500 or 12k:800).")


def placeholder(spec: WorkloadSpec) -> Workload:
    """The workload before a suite is counted: for checking the fixed flags, not for sizing."""
    if spec.shape is not None:
        return spec.shape
    return Workload(spec.text, 0.0, 1.0, 1, spec.concurrency)


def concurrency_note(ctx: int, n: int, settings: Settings | None, meta: GGUFMeta, devices: Any) -> str:
    """What serving `n` at once costs, for the tune's notes: the slots, the context, and the planned KV
    and recurrent state of `settings` (a candidate: the last of the grid, MTP on when searched) over
    one slot, by the planner's estimate on `devices` (a DeviceSet; exact mode plans every launch)."""

    def plan_of(s: Settings) -> Any:
        try:
            return plan(meta, s, list(getattr(devices, "devices", ())), getattr(devices, "host_total_mib", None),
                        getattr(devices, "host_free_mib", None))
        except Exception:  # a note must not stop the tune
            return None

    mem = slots_memory_text(settings, plan_of) if settings is not None else None
    per = f"context {ctx} ({ctx // n} per slot)" if ctx else "the model's training context per slot"
    return (f"--concurrency {n}: every candidate launches with -np {n} and {per} and is probed with {n} requests "
            "at once" + (f"; {mem}" if mem else "") + ".")


def sizing_settings(base: Settings) -> Settings:
    """The lightest launch of the model that can answer `/tokenize`: no MTP, a small context, nothing
    offloaded (so it cannot run out of device memory), no fit search."""
    return replace(base, spec_type=[], ctx_size=512, n_gpu_layers="0", fit=False, fit_target=[],
                   cache_type_k_draft=None, cache_type_v_draft=None, spec_draft_n_max=None)


# --------------------------------------------------------------------------- the server's tokenizer


def _post(client: httpx.Client, url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        r = client.post(f"{url}{path}", json=body)
    except httpx.HTTPError as e:
        raise WorkloadError(f"the server did not answer {path}: {type(e).__name__}: {e}") from None
    if r.status_code != 200:
        raise WorkloadError(f"{path} answered HTTP {r.status_code}: {r.text[:200]}")
    return dict(r.json())


def _client(api_key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(timeout=_TIMEOUT, trust_env=False, headers=headers)


def _count(client: httpx.Client, url: str, text: str) -> int:
    """Tokens of `text` as a completion prompt is tokenized (special tokens added and parsed)."""
    return len(_post(client, url, "/tokenize", {"content": text, "add_special": True, "parse_special": True})["tokens"])


def prompt_tokens(client: httpx.Client, url: str, p: ProbePrompt) -> int:
    """The prompt tokens one suite request costs: chat prompts through the model's template."""
    if p.messages is not None:
        text = _post(client, url, "/apply-template", {"messages": [dict(m) for m in p.messages]})["prompt"]
        return _count(client, url, str(text))
    return _count(client, url, p.raw or "")


def count_suite(url: str, suite: Suite, *, api_key: str | None = None) -> Workload:
    """The suite's shape in this model's tokens: (prompt, output budget) per request."""
    with _client(api_key) as c:
        reqs = [(prompt_tokens(c, url, p), int(p.n_predict or DEFAULT_N_PREDICT)) for p in suite.prompts]
    return from_requests(suite.name, reqs)


def cut_prompt(url: str, n_tokens: int, *, api_key: str | None = None) -> str:
    """Raw prompt text of at most `n_tokens` tokens (as close as the tokenizer allows), cut from the
    bundled long document (repeated when the shape is longer than it)."""
    if n_tokens <= 0:
        return GEN_ONLY_PROMPT
    doc = long_document()
    with _client(api_key) as c:
        toks: list[Any] = []
        while len(toks) < n_tokens:
            toks += _post(c, url, "/tokenize", {"content": doc, "add_special": False, "parse_special": False})["tokens"]
        take = n_tokens
        text = ""
        for _ in range(4):  # detokenized text can re-tokenize a token or two longer: trim until it fits
            text = str(_post(c, url, "/detokenize", {"tokens": toks[:take]})["content"])
            over = _count(c, url, text) - n_tokens
            if over <= 0:
                break
            take -= over
        return text


def shape_suite(shape: Workload, text: str) -> Suite:
    """The one-request suite that probes a shape: `text` (IN tokens, raw) and OUT tokens generated."""
    kind = "pp" if shape.in_tokens > 0 else "tg"
    p = ProbePrompt(name="workload", raw=text, kind=kind, n_predict=max(1, round(shape.out_tokens)))
    return Suite(f"workload {shape.label}", (p,), f"{round(shape.in_tokens)} prompt tokens, "
                 f"{round(shape.out_tokens)} generated", source="tune")
