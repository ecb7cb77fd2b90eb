"""`--workload` for `mtp-tune tune`: what is probed, and its shape in tokens, counted by the server.

Two kinds:

* a request shape `IN:OUT` (`12k:800`): probed with one raw prompt of IN tokens cut from the bundled
  long document and exactly OUT generated tokens (`ignore_eos`), so PP is measured at the length
  that matters (a micro-batch only pays off on prompts longer than itself) and the objective is the
  shape's own end-to-end time;
* a suite (`tasks`, `long-prompt`, `full` or a .toml/.jsonl file): probed as `mtp-tune probe` probes
  it; its shape (mean prompt and output tokens, the longest request) is counted by the model's own
  tokenizer through llama-server's `/apply-template` and `/tokenize` on one sizing launch, because
  a tokenizer differs by model by a factor of four (the tiny test models: ~0.75 tokens per byte; a
  Qwen-class model: ~0.25) and the context must hold the longest request without guessing.

Why the server and not a guess: both `IN:OUT` prompts and suite counts come from the tokenizer the
candidates run, so the context every candidate gets holds every request of the workload exactly.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from tui.core.options.settings import Settings
from tui.core.probes.suites import BUILTIN, ProbePrompt, Suite, SuiteError, get_suite, long_document
from tui.core.probes.run_types import RunConfig
from tui.core.tune.workload import Workload, from_requests, parse_shape

#: Generation length of a suite prompt that does not set its own (the probe's default).
DEFAULT_N_PREDICT = RunConfig().n_predict
#: The prompt of a generation-only shape (`0:OUT`): a few tokens, so PP does not matter.
GEN_ONLY_PROMPT = "Once upon a time"
_TIMEOUT = httpx.Timeout(60.0, connect=5.0)


class WorkloadError(ValueError):
    """A --workload that cannot be read or sized; the message says what to write instead."""


@dataclass(frozen=True)
class WorkloadSpec:
    """What `--workload` named: a shape (`shape` set) or a suite (`suite` set)."""

    text: str
    shape: Workload | None = None
    suite: Suite | None = None

    @property
    def exact_output(self) -> bool:
        """A shape generates exactly OUT tokens (ignore_eos); a suite stops where the model stops."""
        return self.shape is not None

    def identity(self) -> dict[str, Any]:
        """What a tune id hashes: the shape, or the suite's prompts (a file edited is a new tune)."""
        if self.shape is not None:
            return {"shape": self.shape.to_json()}
        assert self.suite is not None
        body = [[p.name, p.kind, p.n_predict, list(p.messages or ()), p.raw] for p in self.suite.prompts]
        digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]
        return {"suite": self.suite.name, "prompts": digest}

    def first_decode(self) -> ProbePrompt | None:
        """The suite's longest prompt: what the launch's first-decode check sends (OOMs at the first
        decode come with the longest prompt); a shape's prompt is known once the server can cut it."""
        if self.suite is None:
            return None
        return max(self.suite.prompts, key=lambda p: p.text_chars)


def parse_workload(text: str) -> WorkloadSpec:
    """`tasks`, `long-prompt`, `full`, a suite file, or `IN:OUT`; WorkloadError naming the problem."""
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
    return Workload(spec.text, 0.0, 1.0, 1)


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
