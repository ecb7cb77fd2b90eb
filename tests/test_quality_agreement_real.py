"""MTP on vs off against the real llama-server: greedy outputs token for token on the tiny MTP models.

Measured here (b11434, CPU backend, 2 cores): on tiny-mtp (every draft accepted) and tiny-mtp-a50
(about a third accepted, so verification rejects drafts all the time), with raw and chat prompts, the
MTP-on and MTP-off outputs are identical token for token; so are tiny-mtp-random, tiny-moe-mtp,
tiny-mtp-q8_0 and small-mtp-q8_0 on the nine task prompts at 64-128 tokens: their bigram logits are far
apart. A random-weight f16 variant of small-mtp-q8_0 (nearly flat logits, acceptance 0) diverged on 2
of 9 task prompts at 96 tokens (89.9 % of tokens agree; first divergences at tokens 55 and 58); at the
second the MTP-off run's top two tokens were 0.0002 nats apart, a near-tie flipped by batched
verification's rounding. That run takes minutes, so the finding's path is checked with a scripted
server (tests/test_quality_agreement.py).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tui.core.options.settings import Settings
from tui.core.presets.profiles import list_history
from tui.core.probes.suites import ProbePrompt
from tui.core.quality.agreement import mtp_agreement

pytestmark = pytest.mark.timeout(240)

PROMPTS = [
    ProbePrompt("fox", raw="The quick brown fox"),
    ProbePrompt("story", raw="Once upon a time"),
    ProbePrompt("chat", messages=({"role": "user", "content": "Write a haiku about the sea."},)),
]
N_PREDICT = 32


def base(model: Path) -> Settings:
    return Settings(model=str(model), ctx_size=2048, parallel=1, threads=1, threads_batch=1, spec_draft_n_max=3)


@pytest.mark.parametrize("name", ["tiny-mtp", "tiny-mtp-a50"])
def test_mtp_on_and_off_write_the_same_tokens(server_bin: Path, tiny_models: dict[str, Path], name: str) -> None:
    a = mtp_agreement(base(tiny_models[name]), PROMPTS, server_bin=server_bin, n_predict=N_PREDICT,
                      cancel=threading.Event(), ready_timeout=60, request_timeout=60)
    print(a.text())
    assert a.status == "complete", a.error
    assert [p.name for p in a.prompts] == ["fox", "story", "chat"]
    assert all(p.compared == N_PREDICT for p in a.prompts)  # the bigram models never stop early
    assert a.identical and a.percent == 100.0, a.text()
    assert a.draft_n > 0  # speculative decoding was exercised, not skipped
    if name == "tiny-mtp":
        assert a.acceptance == 1.0
    else:  # drafts were rejected and corrected, yet the output is the same
        assert a.acceptance is not None and 0.1 < a.acceptance < 0.9
    assert list_history() == []  # trial launches, never the user's launch history


def test_a_model_without_mtp_fails_on_its_first_side(server_bin: Path, tiny_models: dict[str, Path]) -> None:
    a = mtp_agreement(base(tiny_models["tiny-nomtp"]), PROMPTS[:1], server_bin=server_bin, n_predict=8,
                      cancel=threading.Event(), ready_timeout=60, request_timeout=60)
    print(a.text())
    assert a.status == "failed" and a.error is not None and a.error.startswith("MTP on did not start: ")
    assert a.prompts == [] and a.percent is None
