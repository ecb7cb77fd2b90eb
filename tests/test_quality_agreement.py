"""MTP on vs off, token for token (fast tier): the comparison on synthetic token lists, and the whole run
against a scripted loopback llama-server stand-in, so a divergence (which the tiny models never show)
is seen as a finding with its position and both tokens, and every request is checked to be greedy and
the same on both sides."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tui.core.lab.events import LabError, LabEvent
from tui.core.lab.launcher import LaunchOutcome
from tui.core.options.settings import Settings
from tui.core.probes.suites import ProbePrompt
from tui.core.quality.agreement import (
    Agreement,
    Divergence,
    PromptAgreement,
    first_divergence,
    mtp_agreement,
    token_ids,
)
from tui.core.server.failures import Failure, FailureKind
from tui.core.server.replies import CompletionResult

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("on", "off", "want"), [
    ([1, 2, 3], [1, 2, 3], None),
    ([], [], None),
    ([5, 2, 3], [7, 2, 3], Divergence(0, 5, 7)),
    ([1, 2, 3, 4], [1, 2, 9, 4], Divergence(2, 3, 9)),
    ([1, 2], [1, 2, 3], Divergence(2, None, 3)),  # MTP on stopped first
    ([1, 2, 3, 4], [1, 2], Divergence(2, 3, None)),  # MTP off stopped first
])
def test_first_divergence(on: list[int], off: list[int], want: Divergence | None) -> None:
    assert first_divergence(on, off) == want


def test_agreement_counts_the_common_prefix_of_the_longer_output() -> None:
    same = PromptAgreement.of("a", [1, 2, 3, 4], [1, 2, 3, 4], draft_n=3, draft_accepted=3)
    diff = PromptAgreement.of("b", [1, 2, 3, 4], [1, 2, 9, 4], draft_n=3, draft_accepted=1)
    short = PromptAgreement.of("c", [1, 2], [1, 2, 3, 4, 5, 6])
    assert (same.identical, same.agreed, same.compared) == (True, 4, 4)
    assert (diff.identical, diff.agreed, diff.compared) == (False, 2, 4)
    assert (short.identical, short.agreed, short.compared) == (False, 2, 6)
    a = Agreement([same, diff, short], n_predict=4)
    assert (a.agreed, a.compared) == (8, 14) and a.percent == pytest.approx(800 / 14)
    assert not a.identical and [p.name for p in a.findings] == ["b", "c"]
    assert a.acceptance == pytest.approx(4 / 6)
    assert Agreement([same], 4).identical and Agreement([same], 4).percent == 100.0
    empty = Agreement([], 4, status="failed", error="MTP on did not start: no MTP layers")
    assert not empty.identical and empty.percent is None
    assert "nothing compared" in empty.text() and "no MTP layers" in empty.text()
    undrafted = Agreement([PromptAgreement.of("a", [1], [1])], 4)
    assert undrafted.acceptance is None and "drafted nothing" in undrafted.summary()


def test_token_ids_are_read_from_the_answer_or_refused_in_one_sentence() -> None:
    def res(response: dict[str, Any], text: str = "x") -> CompletionResult:
        return CompletionResult(text, {}, None, 0.0, response, False)

    assert token_ids(res({"tokens": [3, 4]}), "p") == (3, 4)
    assert token_ids(res({"tokens": []}, text=""), "p") == ()  # nothing generated (an immediate EOS)
    with pytest.raises(LabError, match="'p'.*does not support `return_tokens`"):
        token_ids(res({"tokens": []}), "p")
    for bad in ({}, {"tokens": "12"}, {"tokens": [1, True]}, {"tokens": [1.5]}):
        with pytest.raises(LabError, match="'p'.*no list of token ids"):
            token_ids(res(bad), "p")


# ---- the whole run against a scripted stand-in ---------------------------------------------------


@dataclass
class Script:
    """What the stand-in answers: token ids per side and prompt text, the side now "running"."""

    tokens: dict[str, dict[str, list[int]]]
    side: str = ""
    seen: list[tuple[str, str, dict[str, Any], str]] = field(default_factory=list)  # side, path, body, auth
    fail: Callable[[str, str], int | None] = lambda side, path: None  # an HTTP error status to answer with


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        script: Script = self.server.script  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        script.seen.append((script.side, self.path, body, self.headers.get("Authorization", "")))
        status = script.fail(script.side, self.path)
        if status is not None:
            return self._answer(status, {"error": {"code": status, "message": "scripted failure"}})
        if self.path == "/apply-template":
            return self._answer(200, {"prompt": "<chat>" + body["messages"][-1]["content"]})
        if self.path == "/detokenize":
            return self._answer(200, {"content": "".join(f"t{t}" for t in body["tokens"])})
        if self.path == "/completion":
            toks = script.tokens[script.side][body["prompt"]]
            timings = {"draft_n": 4, "draft_n_accepted": 3} if script.side == "on" else {}
            return self._answer(200, {"content": " ".join(map(str, toks)), "tokens": toks, "timings": timings})
        self._answer(404, {"error": {"code": 404, "message": "no such route"}})

    def _answer(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def stand_in() -> Iterator[tuple[Script, str]]:
    script = Script({"on": {}, "off": {}})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.script = script  # type: ignore[attr-defined]
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield script, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


class ScriptedLauncher:
    """"Launches" by pointing the stand-in at the side the settings ask for; `refuse`: sides that fail."""

    def __init__(self, script: Script, url: str, refuse: tuple[str, ...] = ()) -> None:
        self.script, self.url, self.refuse = script, url, refuse
        self.launched: list[Settings] = []
        self.first_decode_messages: list[dict[str, str]] | None = None
        self.first_decode_prompt: str | None = None

    def launch(self, settings: Settings, cancel: threading.Event) -> LaunchOutcome:
        self.launched.append(settings)
        side = "on" if settings.mtp_enabled else "off"
        if side in self.refuse:
            return LaunchOutcome(False, failure=Failure(FailureKind.UNKNOWN, "the model has no MTP layers.", None, ""))
        self.script.side = side
        return LaunchOutcome(True, url=self.url)

    def stop(self) -> None:
        self.script.side = ""

    def close(self) -> None:
        self.stop()

    def failure(self) -> Failure | None:
        return None


SETTINGS = Settings(model="m.gguf", ctx_size=2048, spec_draft_n_max=3, api_key="s3cret-key")
PROMPTS = [ProbePrompt("same", raw="alpha"), ProbePrompt("differs", raw="beta"),
           ProbePrompt("chat", messages=({"role": "user", "content": "gamma"},), n_predict=8)]


def _script(script: Script) -> None:
    script.tokens["on"] = {"alpha": [1, 2, 3, 4], "beta": [5, 6, 7, 8], "<chat>gamma": [9, 9]}
    script.tokens["off"] = {"alpha": [1, 2, 3, 4], "beta": [5, 6, 70, 8], "<chat>gamma": [9, 9]}


def test_a_divergence_is_a_finding_with_its_position_and_both_tokens(stand_in: tuple[Script, str]) -> None:
    script, url = stand_in
    _script(script)
    launcher = ScriptedLauncher(script, url)
    events: list[LabEvent] = []
    a = mtp_agreement(SETTINGS, PROMPTS, server_bin=None, n_predict=4, cancel=threading.Event(),
                      on_event=events.append, launcher=launcher)
    assert a.status == "complete" and a.error is None
    assert [p.name for p in a.findings] == ["differs"] and not a.identical
    d = a.findings[0].divergence
    assert d == Divergence(2, 7, 70, "t7", "t70")  # the texts from the server's own /detokenize
    assert (a.agreed, a.compared) == (4 + 2 + 2, 10) and a.percent == pytest.approx(80.0)
    assert (a.draft_n, a.draft_accepted) == (12, 9)  # the MTP-on side's drafts only
    lines = a.text().splitlines()
    assert len(lines) == 4 and "identical (4 tokens)" in lines[0]
    assert "DIFFERENT: 2/4 tokens agree, first divergence at token 2: MTP on 7 't7', off 70 't70'" in lines[1]
    assert "2/3 prompts identical, 8/10 tokens agree (80.0 %)" in lines[3] and "Finding" in lines[3]
    j = a.to_json()
    assert j["prompts"][1]["divergence"] == {"index": 2, "on": {"token": 7, "text": "t7"},
                                             "off": {"token": 70, "text": "t70"}}
    assert j["percent"] == 80.0 and j["identical"] is False and j["acceptance"] == 0.75
    # MTP on first, then off, the settings otherwise the same; nothing secret in the result.
    assert [s.mtp_enabled for s in launcher.launched] == [True, False]
    on, off = launcher.launched
    assert {**on.__dict__, "spec_type": None} == {**off.__dict__, "spec_type": None}
    assert "s3cret" not in json.dumps(j) + a.text() and j["settings"]["model"] == "m.gguf"
    # Every generation greedy, uncached, with token ids, and the same request on both sides.
    gens = [(side, body) for side, path, body, _ in script.seen if path == "/completion"]
    assert len(gens) == 6
    for _, body in gens:
        assert body["temperature"] == 0 and body["top_k"] == 1 and body["seed"] == 42
        assert body["cache_prompt"] is False and body["return_tokens"] is True and body["stream"] is False
    by_side = {side: [b for s, b in gens if s == side] for side in ("on", "off")}
    assert by_side["on"] == by_side["off"]
    assert [b["n_predict"] for b in by_side["on"]] == [4, 4, 8]  # a prompt's own n_predict wins
    assert by_side["on"][2]["prompt"] == "<chat>gamma"  # a chat prompt, templated by the server
    assert all(auth == "Bearer s3cret-key" for _, _, _, auth in script.seen)
    assert launcher.first_decode_prompt == "alpha"  # the first-decode check sends the first prompt
    kinds = [e.kind for e in events]
    assert kinds[0] == "started" and kinds[-1] == "finished" and kinds.count("probe") == 6
    assert events[-1].done == 6 and events[-1].total == 6


def test_identical_outputs_agree_fully(stand_in: tuple[Script, str]) -> None:
    script, url = stand_in
    _script(script)
    script.tokens["off"]["beta"] = [5, 6, 7, 8]
    a = mtp_agreement(SETTINGS, PROMPTS, server_bin=None, n_predict=4, cancel=None,
                      launcher=ScriptedLauncher(script, url))
    assert a.identical and a.percent == 100.0 and not a.findings
    assert not [s for s in script.seen if s[1] == "/detokenize"]  # texts are fetched for findings only
    assert "3/3 prompts identical, 10/10 tokens agree (100.0 %)" in a.summary()


def test_a_side_that_cannot_start_ends_the_run_before_the_other(stand_in: tuple[Script, str]) -> None:
    script, url = stand_in
    _script(script)
    launcher = ScriptedLauncher(script, url, refuse=("on",))
    a = mtp_agreement(SETTINGS, PROMPTS, server_bin=None, n_predict=4, cancel=None, launcher=launcher)
    assert a.status == "failed" and a.error == "MTP on did not start: the model has no MTP layers."
    assert len(launcher.launched) == 1 and a.prompts == [] and not script.seen
    assert a.to_json()["percent"] is None and "nothing compared" in a.text()


def test_a_failed_request_names_the_side_and_the_prompt(stand_in: tuple[Script, str]) -> None:
    script, url = stand_in
    _script(script)
    script.fail = lambda side, path: 500 if side == "off" and path == "/completion" else None
    a = mtp_agreement(SETTINGS, PROMPTS, server_bin=None, n_predict=4, cancel=None,
                      launcher=ScriptedLauncher(script, url))
    assert a.status == "failed" and a.error == "MTP off: prompt 'same': HTTP 500: scripted failure"
    assert a.prompts == []  # the off side finished none, so nothing is compared


def test_a_chat_template_failure_is_one_sentence(stand_in: tuple[Script, str]) -> None:
    script, url = stand_in
    _script(script)
    script.fail = lambda side, path: 500 if path == "/apply-template" else None
    a = mtp_agreement(SETTINGS, PROMPTS, server_bin=None, n_predict=4, cancel=None,
                      launcher=ScriptedLauncher(script, url))
    assert a.status == "failed" and a.error == "MTP on: prompt 'chat': /apply-template: HTTP 500: scripted failure"


def test_cancel_stops_between_requests_and_keeps_what_both_sides_finished(stand_in: tuple[Script, str]) -> None:
    script, url = stand_in
    _script(script)
    cancel = threading.Event()

    def on_event(e: LabEvent) -> None:  # once the off side has its second output
        if e.kind == "probe" and e.message.startswith("MTP off: 2/3"):
            cancel.set()

    a = mtp_agreement(SETTINGS, PROMPTS, server_bin=None, n_predict=4, cancel=cancel, on_event=on_event,
                      launcher=ScriptedLauncher(script, url))
    assert a.status == "cancelled" and a.error is None
    assert [p.name for p in a.prompts] == ["same", "differs"]  # the two prompts both sides generated
    assert a.findings[0].divergence == Divergence(2, 7, 70)  # cancelled: no more requests, not even texts
    assert sum(1 for s in script.seen if s[1] == "/completion") == 5
    assert "The run cancelled" in a.summary()


def test_bad_arguments_are_refused_in_one_sentence() -> None:
    with pytest.raises(LabError, match="no prompts"):
        mtp_agreement(SETTINGS, [], server_bin=None, n_predict=4, cancel=None)
    with pytest.raises(LabError, match="n_predict must be between 1 and"):
        mtp_agreement(SETTINGS, ["x"], server_bin=None, n_predict=0, cancel=None)
    with pytest.raises(LabError, match="no llama-server binary"):
        mtp_agreement(SETTINGS, ["x"], server_bin=None, n_predict=4, cancel=None)
    with pytest.raises(LabError, match="nope.toml"):
        mtp_agreement(SETTINGS, "nope.toml", server_bin=None, n_predict=4, cancel=None)
