"""MTP's own quality, verified rather than assumed: greedy outputs with MTP on and off, token for token.

Speculative decoding must not change what a greedy model writes: the main model checks every drafted
token and keeps only what it would have picked itself. So with temperature 0 (top_k 1, one seed, no
prompt cache) the MTP-on output should equal the MTP-off output token for token. Verification decodes
several tokens in one batch, though, and a batch may round differently than one-token decoding (the
CPU backend included), so a near-tie between two tokens can flip. That is a finding to show, with the
first diverging position and both tokens, never something to hide or average away.

How: the lab's one trial launcher (`lab.launcher.equipped`: nothing goes to the launch history) starts
llama-server with the settings' MTP on and every prompt is generated, then the same with it off (on
first: a model without MTP layers fails before the off side costs anything). Token ids come from
`/completion` with `"return_tokens": true` (b11434's server-schema.cpp; /v1/chat/completions returns
none), so a chat prompt is templated by the server's own `/apply-template`, which is what the chat
endpoint does before the same tokenization. After the first divergence the two outputs continue from
different texts, so agreement counts the common prefix only: agreed / compared, where compared is the
longer output's length.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from tui.core.lab.ab import with_mtp
from tui.core.lab.events import EventFn, LabError, Progress, new_cancel
from tui.core.lab.launcher import DEFAULT_READY_TIMEOUT, Launcher, aim_first_decode, equipped
from tui.core.options.settings import Settings, settings_json
from tui.core.probes.suites import ProbePrompt, Suite, SuiteError, get_suite
from tui.core.probes.transport import Cancelled, cancellable
from tui.core.server.client import LlamaClient, sync_client
from tui.core.server.client_errors import ClientError, http_error
from tui.core.server.replies import CompletionResult

#: Greedy and repeatable: the same request on both sides, no reuse of an earlier request's cache.
GREEDY: dict[str, Any] = {"temperature": 0.0, "top_k": 1, "cache_prompt": False, "return_tokens": True}
DEFAULT_SEED = 42
#: Seconds one generation may take; /apply-template and /detokenize get `SMALL_REQUEST_S`.
DEFAULT_REQUEST_TIMEOUT = 600.0
SMALL_REQUEST_S = 30.0
MAX_N_PREDICT = 16384
SIDES = ("on", "off")


@dataclass(frozen=True)
class Divergence:
    """Where the MTP-on and MTP-off outputs first differ. A token is None where that side's output had
    already ended (one side stopped earlier); a text is None until the server detokenized it."""

    index: int
    on_token: int | None
    off_token: int | None
    on_text: str | None = None
    off_text: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "on": {"token": self.on_token, "text": self.on_text},
                "off": {"token": self.off_token, "text": self.off_text}}

    def describe(self) -> str:
        return f"first divergence at token {self.index}: MTP on {_tok(self.on_token, self.on_text)}, " \
               f"off {_tok(self.off_token, self.off_text)}"


def _tok(token: int | None, text: str | None) -> str:
    if token is None:
        return "ended"
    return f"{token}" if text is None else f"{token} {text!r}"


def first_divergence(on: Sequence[int], off: Sequence[int]) -> Divergence | None:
    """The first position where the two token sequences differ (a length difference counts: the shorter
    side's token is None there), or None when they are identical."""
    for i, (a, b) in enumerate(zip(on, off)):
        if a != b:
            return Divergence(i, a, b)
    if len(on) == len(off):
        return None
    n = min(len(on), len(off))
    return Divergence(n, on[n] if n < len(on) else None, off[n] if n < len(off) else None)


@dataclass(frozen=True)
class PromptAgreement:
    """One prompt's two outputs. `draft_n`/`draft_accepted`: the MTP-on request's drafts (0 when none)."""

    name: str
    on_tokens: tuple[int, ...]
    off_tokens: tuple[int, ...]
    divergence: Divergence | None
    draft_n: int = 0
    draft_accepted: int = 0

    @classmethod
    def of(cls, name: str, on: Sequence[int], off: Sequence[int], draft_n: int = 0,
           draft_accepted: int = 0) -> PromptAgreement:
        return cls(name, tuple(on), tuple(off), first_divergence(on, off), draft_n, draft_accepted)

    @property
    def identical(self) -> bool:
        return self.divergence is None

    @property
    def compared(self) -> int:
        """Positions the two outputs span (the longer one's length)."""
        return max(len(self.on_tokens), len(self.off_tokens))

    @property
    def agreed(self) -> int:
        """Tokens equal before the first divergence."""
        return self.compared if self.divergence is None else self.divergence.index

    def line(self, width: int = 0) -> str:
        acc = f"; drafts accepted {self.draft_accepted}/{self.draft_n}" if self.draft_n else ""
        if self.divergence is None:
            what = f"identical ({self.compared} tokens)"
        else:
            what = f"DIFFERENT: {self.agreed}/{self.compared} tokens agree, {self.divergence.describe()}"
        return f"{self.name.ljust(width)}  {what}{acc}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "identical": self.identical, "compared": self.compared, "agreed": self.agreed,
                "on_tokens": len(self.on_tokens), "off_tokens": len(self.off_tokens),
                "divergence": self.divergence.to_json() if self.divergence else None,
                "draft_n": self.draft_n, "draft_accepted": self.draft_accepted}


@dataclass
class Agreement:
    """MTP on against off, greedy, per prompt. `status`: complete | cancelled | failed (`error` says why);
    a run that stopped early compares the prompts both sides finished."""

    prompts: list[PromptAgreement]
    n_predict: int
    seed: int = DEFAULT_SEED
    status: str = "complete"
    error: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # redacted, as `settings_json` writes them
    seconds: float = 0.0

    @property
    def compared(self) -> int:
        return sum(p.compared for p in self.prompts)

    @property
    def agreed(self) -> int:
        return sum(p.agreed for p in self.prompts)

    @property
    def percent(self) -> float | None:
        """Agreed tokens as a percentage of those compared (None when nothing was compared)."""
        return 100.0 * self.agreed / self.compared if self.compared else None

    @property
    def identical(self) -> bool:
        """Every compared prompt came out the same (and at least one was compared)."""
        return bool(self.prompts) and all(p.identical for p in self.prompts)

    @property
    def findings(self) -> list[PromptAgreement]:
        return [p for p in self.prompts if not p.identical]

    @property
    def draft_n(self) -> int:
        return sum(p.draft_n for p in self.prompts)

    @property
    def draft_accepted(self) -> int:
        return sum(p.draft_accepted for p in self.prompts)

    @property
    def acceptance(self) -> float | None:
        """The MTP-on run's accepted / drafted tokens (None when it drafted nothing)."""
        return self.draft_accepted / self.draft_n if self.draft_n else None

    def summary(self) -> str:
        if not self.prompts:
            return f"MTP on vs off: nothing compared ({self.status}{': ' + self.error if self.error else ''})."
        n, same = len(self.prompts), len(self.prompts) - len(self.findings)
        pct = f"{self.percent:.1f} %" if self.percent is not None else "n/a"
        out = (f"MTP on vs off, greedy (seed {self.seed}, n_predict {self.n_predict}): {same}/{n} prompts "
               f"identical, {self.agreed}/{self.compared} tokens agree ({pct}).")
        if self.acceptance is not None:
            out += f" MTP drafted {self.draft_n} tokens, accepted {self.draft_accepted} ({self.acceptance:.0%})."
        else:
            out += " MTP drafted nothing, so speculative decoding was not exercised."
        if self.findings:
            out += (f" Finding: speculative decoding changed the greedy output of {len(self.findings)} prompt(s). "
                    "The usual cause: batched verification rounds differently from one-token decoding, which "
                    "flips a near-tie between two tokens; everything after it follows a different text.")
        if self.status != "complete":
            out += f" The run {self.status}{': ' + self.error if self.error else ''}; only finished prompts compared."
        return out

    def text(self) -> str:
        """One line per prompt, then the summary."""
        width = max((len(p.name) for p in self.prompts), default=0)
        return "\n".join([*(p.line(width) for p in self.prompts), self.summary()])

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "error": self.error, "n_predict": self.n_predict, "seed": self.seed,
                "identical": self.identical, "compared": self.compared, "agreed": self.agreed,
                "percent": None if self.percent is None else round(self.percent, 3),
                "draft_n": self.draft_n, "draft_accepted": self.draft_accepted,
                "acceptance": None if self.acceptance is None else round(self.acceptance, 4),
                "prompts": [p.to_json() for p in self.prompts], "settings": self.settings,
                "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class _Output:
    """One side's answer to one prompt."""

    tokens: tuple[int, ...]
    draft_n: int
    draft_accepted: int


def as_prompts(prompts: Suite | str | Sequence[ProbePrompt | str]) -> list[ProbePrompt]:
    """The prompts to compare: a suite, a suite spec (`tasks`, a file: `get_suite`), or prompts (a plain
    string is a raw prompt). LabError when there are none or the suite cannot be read."""
    if isinstance(prompts, str):
        try:
            prompts = get_suite(prompts)
        except SuiteError as e:
            raise LabError(str(e)) from None
    items = list(prompts.prompts if isinstance(prompts, Suite) else prompts)
    out = [p if isinstance(p, ProbePrompt) else ProbePrompt(f"prompt {i + 1}", raw=str(p)) for i, p in enumerate(items)]
    if not out:
        raise LabError("no prompts to compare MTP on and off with.")
    return out


def mtp_agreement(settings: Settings, prompts: Suite | str | Sequence[ProbePrompt | str], *,
                  server_bin: str | Path | None, n_predict: int, cancel: threading.Event | None,
                  on_event: EventFn | None = None, launcher: Launcher | None = None,
                  env: Mapping[str, str] | None = None, ready_timeout: float = DEFAULT_READY_TIMEOUT,
                  request_timeout: float = DEFAULT_REQUEST_TIMEOUT, seed: int = DEFAULT_SEED) -> Agreement:
    """Generate every prompt greedily with the settings' MTP on, then off, and compare the token ids.

    `n_predict`: tokens per prompt for prompts that do not set their own (as the probes do). Blocks; set
    `cancel` from any thread to stop within about 0.2 s (the server is stopped). A side that cannot
    start or a request that fails ends the run `failed` with one sentence; LabError for bad arguments."""
    items = as_prompts(prompts)
    if not 1 <= n_predict <= MAX_N_PREDICT:
        raise LabError(f"n_predict must be between 1 and {MAX_N_PREDICT}, not {n_predict}.")
    cancel = new_cancel(cancel)
    prog = Progress(len(SIDES) * len(items), on_event)
    t0 = time.monotonic()
    outputs: dict[str, list[_Output]] = {side: [] for side in SIDES}
    status, error, names = "complete", None, {}
    with equipped(launcher, server_bin, None, env=env, ready_timeout=ready_timeout) as (launcher, _):
        aim_first_decode(launcher, items[0])
        prog.emit("started", f"MTP on vs off, greedy: {len(items)} prompts, 2 launches")
        url = ""
        for side in SIDES:
            prog.emit("launching", f"MTP {side}: starting llama-server", side=side)
            out = launcher.launch(with_mtp(settings, side == "on"), cancel)
            if not out.ok or not out.url:
                status = "cancelled" if out.cancelled else "failed"
                error = None if out.cancelled else f"MTP {side} did not start: {out.reason}"
                if error:
                    prog.emit("launch_failed", error, side=side)
                break
            url = out.url
            prog.emit("ready", f"MTP {side}: ready", side=side)
            try:
                jobs = [(p.name, _text(url, settings.api_key, p, cancel), p.n_predict or n_predict) for p in items]
                asyncio.run(_generate(url, settings.api_key, jobs, seed, request_timeout, cancel,
                                      lambda o, s=side: _done(o, s, outputs, prog, len(items))))
            except Cancelled:
                status = "cancelled"
                break
            except (ClientError, LabError) as e:
                status, error = "failed", f"MTP {side}: {e}"
                break
        result = [PromptAgreement.of(p.name, on.tokens, off.tokens, on.draft_n, on.draft_accepted)
                  for p, on, off in zip(items, outputs["on"], outputs["off"])]
        if any(r.divergence for r in result) and url and not cancel.is_set():
            result = _with_texts(result, url, settings.api_key)
    agreement = Agreement(result, n_predict, seed, status, error, settings_json(settings.redacted()),
                          time.monotonic() - t0)
    prog.emit("cancelled" if status == "cancelled" else "finished", agreement.summary())
    return agreement


def _done(o: _Output, side: str, outputs: dict[str, list[_Output]], prog: Progress, n: int) -> None:
    outputs[side].append(o)
    prog.step()
    prog.emit("probe", f"MTP {side}: {len(outputs[side])}/{n} prompts generated", side=side)


async def _generate(url: str, api_key: str | None, jobs: Sequence[tuple[str, str, int]], seed: int, timeout: float,
                    cancel: threading.Event, done: Callable[[_Output], None]) -> None:
    """Each (name, prompt text, n_predict) generated greedily with its token ids; `done` gets each output
    in order."""
    async with LlamaClient(url, api_key=api_key, timeout=httpx.Timeout(timeout, connect=5.0)) as client:
        for name, text, n in jobs:
            try:
                res = await cancellable(client.complete(text, n_predict=n, stream=False, seed=seed, **GREEDY), cancel)
            except ClientError as e:
                raise ClientError(f"prompt {name!r}: {e}") from None
            done(_Output(token_ids(res, name), res.draft_n, res.draft_n_accepted))


def token_ids(res: CompletionResult, name: str) -> tuple[int, ...]:
    """The generated token ids of a `/completion` answer; LabError when the server sent none for a
    non-empty text (a build without `return_tokens`) or something that is not a list of ids."""
    tokens = res.response.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise LabError(f"prompt {name!r}: the server's /completion answer has no list of token ids in `tokens`.")
    if not tokens and res.text:
        raise LabError(f"prompt {name!r}: the server returned text but no token ids; this llama-server does not "
                       "support `return_tokens`.")
    return tuple(tokens)


def _post(url: str, api_key: str | None, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A short POST (templating, detokenizing) with the client's headers and proxy rule; ClientError
    with one sentence when it fails (an error status read as the async client reads it)."""
    try:
        with sync_client(url, api_key, SMALL_REQUEST_S) as c:
            r = c.post(path, json=body)
            if r.status_code >= 400:
                raise http_error(r.status_code, r.content)
            data = r.json()
    except ClientError as e:
        raise ClientError(f"{path}: {e}") from None
    except (httpx.HTTPError, ValueError) as e:
        first_line = (str(e).splitlines() or [""])[0][:200]
        raise ClientError(f"{path} failed: {type(e).__name__}: {first_line}") from None
    if not isinstance(data, dict):
        raise ClientError(f"{path} returned {type(data).__name__}, expected a JSON object")
    return data


def _text(url: str, api_key: str | None, p: ProbePrompt, cancel: threading.Event) -> str:
    """The prompt as /completion gets it: a chat prompt rendered by the server's chat template (what
    /v1/chat/completions tokenizes), a raw one as it is."""
    if cancel.is_set():
        raise Cancelled()
    if p.messages is None:
        return p.raw or ""
    try:
        prompt = _post(url, api_key, "/apply-template", {"messages": [dict(m) for m in p.messages]}).get("prompt")
    except ClientError as e:
        raise ClientError(f"prompt {p.name!r}: {e}") from None
    if not isinstance(prompt, str):
        raise LabError(f"prompt {p.name!r}: /apply-template returned no prompt text.")
    return prompt


def _with_texts(result: list[PromptAgreement], url: str, api_key: str | None) -> list[PromptAgreement]:
    """Each divergence's two tokens with their text, from the running server (both sides share the model's
    vocabulary). Texts stay None when the server cannot say: the ids are the finding."""
    out = []
    for r in result:
        d = r.divergence
        if d is not None:
            try:
                d = replace(d, on_text=_piece(url, api_key, d.on_token), off_text=_piece(url, api_key, d.off_token))
            except ClientError:
                pass
        out.append(replace(r, divergence=d))
    return out


def _piece(url: str, api_key: str | None, token: int | None) -> str | None:
    if token is None:
        return None
    content = _post(url, api_key, "/detokenize", {"tokens": [token]}).get("content")
    return content if isinstance(content, str) else None
