"""Probe runs against the real llama-server and generated tiny models.

Acceptance on the partial-acceptance model falls in the band the generator implies; the PP probe really
re-processes the prompt; a run survives the server being killed mid-suite and is stored as failed with
its requests; cancellation keeps what was done; `mtp-tune probe --json` launches, probes and records.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.llama import Running, llama_server
from tui.core.server.client import LlamaClient
from tui.core.probes import hygiene
from tui.core.probes.positions import DraftPositions
from tui.core.probes.records import records_from_json
from tui.core.probes.run_types import ProbeProgress, RunConfig, RunContext
from tui.core.probes.runner import ProbeRunner, run_probe, run_probe_sync
from tui.core.probes.suites import ProbePrompt, Suite, long_prompt_suite, task_suite
from tui.core.results.store import Store
from tui.core.demo.tiny_model import PRESETS, expected_acceptance_band, preset, write_tiny_model

N_MAX = 3


@pytest.fixture(scope="module")
def a50_server(server_bin: Path, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("a50")
    extra = ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(N_MAX)]
    with llama_server(server_bin, tiny_models["tiny-mtp-a50"], extra, root) as srv:
        yield srv


@pytest.fixture(scope="module")
def long_ctx_server(server_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A 32k-context tiny model for the long prompt (~31k tokens with its byte-level tokenizer).

    Narrow attention (2 layers, one of them attention, 2 heads of 16) and flash attention with a 2048
    ubatch keep one pass of the document near 20 s on one CPU thread instead of 75 s."""
    root = tmp_path_factory.mktemp("longctx")
    spec = preset("tiny-mtp", ctx=32768, n_head=2, n_head_kv=1, head_dim=16, n_rot=8, n_layer=2)
    model = write_tiny_model(root / "tiny-32k.gguf", spec)
    extra = ["-c", "32768", "-fa", "on", "-ub", "2048", "-b", "2048"]
    with llama_server(server_bin, model, extra, root) as srv:
        yield srv


def test_acceptance_in_the_band_the_generator_implies(a50_server: Running, tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        run = run_probe_sync(a50_server.url, task_suite(), RunConfig(repeat=1, n_predict=128), sink=store)
        row = store.require(run.run_id or 0)
    assert run.status == "ok", run.error
    low, high = expected_acceptance_band(PRESETS["tiny-mtp-a50"], N_MAX)
    s = run.summary
    assert low <= s["acceptance"] <= high, (s["acceptance"], (low, high))
    # Per request too, and the /metrics deltas agree with the server's timings.
    for r in run.requests:
        assert r.ok and r.timings is not None
        assert r.predicted_n == 128 and r.cache_n == 0
        assert r.draft_n > 0 and low <= (r.acceptance or 0.0) <= high
        assert r.metrics_delta is not None
        assert r.metrics_delta["spec_decode_num_draft_tokens_total"] == r.draft_n
        assert r.metrics_delta["spec_decode_num_accepted_tokens_total"] == r.draft_n_accepted
        assert r.metrics_delta["tokens_predicted_total"] == 128
        steps = r.verify_steps
        assert steps is not None and 0 < steps <= 128
        assert r.mean_accept_len == pytest.approx(1 + r.draft_n_accepted / steps)
        assert 1.0 <= (r.mean_accept_len or 0) <= 1 + N_MAX
        assert r.ttft_ms is not None and r.wall_ms is not None and r.ttft_ms < r.wall_ms
    assert s["mean_accept_len"] == pytest.approx(1 + s["draft_n_accepted"] / s["verify_steps"])
    # The server's timings are stored untouched, and the server's facts came from /props and /slots.
    assert row.requests[0]["timings"] == run.requests[0].timings
    assert {"prompt_per_token_ms", "predicted_per_token_ms", "draft_n"} <= set(row.requests[0]["timings"])
    assert row.server is not None and row.server["total_slots"] == 1 and row.server["speculative"] is True
    assert row.mtp is True and row.status == "ok"
    codes = [w["code"] for w in row.warnings if w["code"] != hygiene.HOST_BUSY]  # busy CI hosts are real too
    assert codes == [hygiene.FEW_REPEATS, hygiene.SHORT_GENERATION]


def test_acceptance_by_draft_position_follows_the_generator(a50_server: Running, tmp_path: Path) -> None:
    """The per-position figures, from each request's /metrics delta, are the server's exact counts and
    show the acceptance the tiny model was generated with falling off position by position."""
    with Store(tmp_path / "r.sqlite") as store:
        run = run_probe_sync(a50_server.url, task_suite(), RunConfig(repeat=1, n_predict=64), sink=store)
        row = store.require(run.run_id or 0)
    assert run.status == "ok", run.error
    s = run.summary
    pos = DraftPositions.from_json(s["positions"])
    assert pos is not None and pos.n_max == N_MAX  # the server sizes the series to its n-max
    # Exact: the positions add up to the accepted tokens the server's timings report, the drafts and
    # drafted tokens are its own counters, and a longer accepted prefix is never more frequent.
    assert sum(pos.accepted) == s["draft_n_accepted"] and pos.steps == s["verify_steps"] and pos.drafted == s["draft_n"]
    assert list(pos.accepted) == sorted(pos.accepted, reverse=True) and pos.accepted[0] <= pos.steps
    for r in run.requests:
        rp = r.positions
        assert rp is not None and rp.n_max == N_MAX and sum(rp.accepted) == r.draft_n_accepted
    # Against the generator: position i is accepted when the MTP head agrees with the trunk on i tokens in
    # a row, about F^i of drafts for agreement F. Tolerance: the head's agreement map is drawn at random over
    # the vocabulary and a greedy text visits only part of it, so F along the text is taken within +-0.15
    # of nominal, as `expected_acceptance_band` does (measured 0.59 for F = 0.5); position i then lies in
    # [(F-0.15)^i, (F+0.15)^i]. The nine requests pool ~250 drafts, so counting noise (about +-0.03 at
    # position 1) is well inside that band.
    f = PRESETS["tiny-mtp-a50"].mtp_agree
    for i, share in enumerate(pos.shares, start=1):
        assert (f - 0.15) ** i <= share <= (f + 0.15) ** i, (i, pos.shares)
    assert s["draft_advice"]["n_max"] == N_MAX and s["draft_advice"]["text"]
    # Stored: the run's summary and each request's delta give the same figures back.
    assert row.summary is not None and DraftPositions.from_json(row.summary["positions"]) == pos
    assert [r.positions for r in records_from_json(row.requests)] == [r.positions for r in run.requests]


def _templated_length(url: str, messages: list[dict[str, str]]) -> int:
    with httpx.Client(base_url=url, timeout=120) as c:
        prompt = c.post("/apply-template", json={"messages": messages}).json()["prompt"]
        tokens = c.post("/tokenize", json={"content": prompt, "add_special": True, "parse_special": True}).json()
    return len(tokens["tokens"])


@pytest.mark.slow
def test_long_prompt_probe_reprocesses_the_whole_prompt_every_time(long_ctx_server: Running, tmp_path: Path) -> None:
    suite = long_prompt_suite()
    full = _templated_length(long_ctx_server.url, list(suite.prompts[0].messages or ()))
    assert full > 8000  # the real document, not a stub
    with Store(tmp_path / "r.sqlite") as store:
        run = run_probe_sync(long_ctx_server.url, suite, RunConfig(repeat=2), sink=store)
    assert run.status == "ok", run.error
    assert len(run.requests) == 2
    for r in run.requests:
        assert r.kind == "pp"
        assert r.cache_n == 0
        assert r.prompt_n == full  # the repeat processed every token again
        assert r.predicted_n == suite.prompts[0].n_predict
    assert run.summary["pp_source"] == "pp" and run.summary["pp_tps"]["n"] == 2
    assert not [w for w in run.warnings if w.code == hygiene.PP_CACHE_HIT]


def test_prompt_reuse_is_detected_when_the_cache_is_used(a50_server: Running) -> None:
    """Control for the PP check: the same request with cache_prompt on reuses the prompt, and the
    hygiene guard says so; the probe's own requests (cache_prompt off) never do."""
    prompt = task_suite().prompts[0]

    async def go() -> list[dict]:
        async with LlamaClient(a50_server.url) as c:
            out = []
            for _ in range(2):
                res = await c.chat(list(prompt.messages or ()), max_tokens=8, stream=True, cache_prompt=True, seed=1)
                out.append(res.timings)
            return out

    first, second = asyncio.run(go())
    assert second["cache_n"] > 0 and second["prompt_n"] < first["prompt_n"] + first["cache_n"]
    from tui.core.probes.records import RequestRecord

    recs = [RequestRecord(i, prompt.name, "pp", i, 8, timings=t) for i, t in enumerate((first, second))]
    assert hygiene.PP_CACHE_HIT in [w.code for w in hygiene.check_cache(recs)]
    run = run_probe_sync(a50_server.url, Suite("one", (prompt,)), RunConfig(repeat=2, n_predict=8))
    assert [r.cache_n for r in run.requests] == [0, 0]
    assert run.requests[0].prompt_n == run.requests[1].prompt_n == first["prompt_n"] + first["cache_n"]


def test_run_survives_the_server_being_killed_mid_suite(
    server_bin: Path, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    extra = ["--spec-type", "draft-mtp"]
    with llama_server(server_bin, tiny_models["tiny-mtp"], extra, tmp_path) as srv:

        def kill_on_fourth(ev: ProbeProgress) -> None:
            if ev.event == "first_token" and ev.done == 3:  # streaming the 4th request
                srv.kill()

        with Store(db) as store:
            run = run_probe_sync(srv.url, task_suite(), RunConfig(repeat=2, n_predict=256), sink=store,
                                 progress=kill_on_fourth)
        srv.wait_ended(timeout=30)
    assert run.status == "failed"
    assert "went away" in (run.error or "") and task_suite().prompts[3].name in (run.error or "")
    # A fresh handle (as another process would open it) sees the failed run with the work done so far.
    with Store(db) as again:
        row = again.require(run.run_id or 0)
    assert row.status == "failed" and row.finished_at is not None
    assert [r["prompt"] for r in row.requests] == [p.name for p in task_suite().prompts[:4]]
    assert all(r["timings"] and r["timings"]["predicted_n"] == 256 for r in row.requests[:3])
    assert row.requests[3]["timings"] is None and "crashed or was killed" in row.requests[3]["error"]
    assert row.summary is not None and row.summary["n_ok"] == 3 and row.summary["tg_tps_median"] > 0


def test_cancel_event_stops_mid_request_and_keeps_what_was_done(a50_server: Running, tmp_path: Path) -> None:
    cancel = threading.Event()
    seen: list[str] = []

    def on(ev: ProbeProgress) -> None:
        seen.append(ev.event)
        if ev.event == "first_token" and ev.done == 2:
            cancel.set()

    with Store(tmp_path / "r.sqlite") as store:
        run = run_probe_sync(a50_server.url, task_suite(), RunConfig(repeat=3, n_predict=512), sink=store,
                             progress=on, cancel=cancel)
        row = store.require(run.run_id or 0)
    assert run.status == "cancelled" and row.status == "cancelled"
    assert len(run.requests) == 2 and len(row.requests) == 2
    assert seen[0] == "started" and seen[-1] == "finished"
    assert seen.count("request_done") == 2


def test_asyncio_cancellation_records_a_cancelled_run(a50_server: Running, tmp_path: Path) -> None:
    store = Store(tmp_path / "r.sqlite")

    async def go() -> None:
        task: asyncio.Task | None = None

        def on(ev: ProbeProgress) -> None:
            if ev.event == "request_done" and ev.done == 1 and task is not None:
                task.cancel()

        task = asyncio.ensure_future(
            run_probe(a50_server.url, task_suite(), RunConfig(repeat=1, n_predict=64), sink=store, progress=on)
        )
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    (row,) = store.list_runs()
    assert row.status == "cancelled" and len(store.require(row.id).requests) == 1
    store.close()


def test_raw_and_chat_user_suite_from_jsonl(a50_server: Running, tmp_path: Path) -> None:
    f = tmp_path / "mine.jsonl"
    f.write_text(
        json.dumps({"name": "chat", "prompt": "Explain what a hash table is.", "n_predict": 40}) + "\n"
        + json.dumps({"name": "raw", "raw": "The server should answer every request quickly and", "n_predict": 24})
        + "\n"
    )
    from tui.core.probes.suites import load_suite_file

    run = run_probe_sync(a50_server.url, load_suite_file(f), RunConfig(repeat=1))
    assert run.status == "ok"
    assert [(r.prompt, r.predicted_n) for r in run.requests] == [("chat", 40), ("raw", 24)]


def test_http_error_on_one_prompt_is_recorded_and_the_rest_runs(a50_server: Running) -> None:
    """A prompt the server rejects (longer than its context) fails alone; its repeats are skipped."""
    too_long = ProbePrompt("too_long", raw="word " * 6000)
    fine = task_suite().prompts[2]
    run = run_probe_sync(a50_server.url, Suite("mixed", (too_long, fine)), RunConfig(repeat=2, n_predict=16))
    assert run.status == "failed" and "too_long" in (run.error or "")
    assert [(r.prompt, r.ok) for r in run.requests] == [("too_long", False), (fine.name, True), (fine.name, True)]
    assert run.requests[0].error is not None and run.requests[0].error.startswith("HTTP 400")
    assert run.summary["n_ok"] == 2


def _cli(*args: str, env_root: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    env["XDG_CONFIG_HOME"] = str(env_root / "xdg")
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True, timeout=240, env=env)


def test_cli_probe_launches_probes_and_records_json(tiny_models: dict[str, Path], server_bin: Path, tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    out = _cli("probe", "--server-bin", str(server_bin), "--db", str(db), "--repeat", "1", "--n-predict", "16",
               "--json", "-m", str(tiny_models["tiny-mtp"]), "-c", "4096", "-tb", "1",
               "--spec-type", "draft-mtp", "--spec-draft-n-max", "2", env_root=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"run_id", "summary", "requests", "warnings"} <= set(data)
    s = data["summary"]
    assert {"tg_tps_median", "pp_tps_median", "acceptance", "n_requests"} <= set(s)
    assert s["n_requests"] == 9 and s["tg_tps_median"] > 0 and s["pp_tps_median"] > 0
    assert s["acceptance"] >= expected_acceptance_band(PRESETS["tiny-mtp"], 2)[0]
    assert len(s["positions"]["accepted"]) == 2 and s["draft_advice"]["n_max"] == 2  # by draft position, in --json
    assert all(r["timings"]["predicted_n"] == 16 for r in data["requests"])
    assert {"few_repeats", "short_generation"} <= {w["code"] for w in data["warnings"]}
    with Store(db) as store:
        row = store.require(data["run_id"])
    assert row.status == "ok" and row.mtp is True
    settings = row.settings or {}
    assert settings["parallel"] == 1 and settings["threads"] == 1 and settings["spec_draft_n_max"] == 2
    assert settings["ctx_size"] == 4096 and settings["model"] == str(tiny_models["tiny-mtp"])
    assert row.server is not None and row.server["version"] == 11434 and row.server["capabilities"]["draft_mtp"]
    assert "--parallel" in row.server["argv"] and row.memory is not None and row.memory["totals"]["kv"] > 0
    assert row.hardware is not None and "devices" in row.hardware
    # The planner's prediction, reconciled with what llama.cpp reported at launch.
    assert row.plan is not None and row.plan["prediction"]["devices"]
    kv = [d for d in row.plan["reconciliation"]["diffs"] if d["component"] == "kv"]
    assert kv and kv[0]["reported_mib"] == row.memory["totals"]["kv"]
    assert records_from_json(row.requests)[0].timings == data["requests"][0]["timings"]


def test_cli_probe_records_a_launch_that_fails(tiny_models: dict[str, Path], server_bin: Path, tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    out = _cli("probe", "--server-bin", str(server_bin), "--db", str(db), "-m", str(tiny_models["tiny-nomtp"]),
               "-c", "4096", "--spec-type", "draft-mtp", env_root=tmp_path)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("mtp-tune: the probe failed (stored as run 1): ") and "no MTP" in out.stderr
    with Store(db) as store:
        (row,) = store.list_runs()
    assert row.status == "failed" and row.error and "MTP" in row.error
    assert row.settings is not None and row.settings["spec_type"] == ["draft-mtp"]


def test_cli_probe_needs_a_server(tmp_path: Path) -> None:
    out = _cli("probe", "--db", str(tmp_path / "r.sqlite"), env_root=tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("mtp-tune: probe needs a server")
    out = _cli("probe", "--url", "http://127.0.0.1:9", "-c", "4096", env_root=tmp_path)
    assert out.returncode == 2 and "cannot apply" in out.stderr


def test_cli_probe_attach_to_a_dead_url_is_a_failed_run(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    out = _cli("probe", "--url", "http://127.0.0.1:9", "--db", str(db), "--no-warmup", env_root=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "No llama-server answers at http://127.0.0.1:9" in out.stderr
    with Store(db) as store:
        (row,) = store.list_runs()
    assert row.status == "failed"


def test_runner_needs_prompts() -> None:
    with pytest.raises(ValueError, match="no prompts"):
        ProbeRunner(object(), Suite("empty", ()))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeat"):
        RunConfig(repeat=0)
    assert RunContext(url="x").extra_warnings == []


def test_attach_mode_finds_the_local_server_pid(a50_server: Running) -> None:
    """So the attached server's own GPU memory is not reported as "another process on the GPU"."""
    from tui.core.probes.session import local_listener_pid

    assert local_listener_pid(a50_server.url) == a50_server.pid
    assert local_listener_pid("http://127.0.0.1:9") is None
    assert local_listener_pid("http://example.com:8080") is None
