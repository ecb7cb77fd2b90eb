"""Sweeps against the real llama-server and generated tiny models.

A 2x2 grid completes with 4 rows; a configuration that cannot start is recorded and the sweep goes
on; an interrupted sweep (cancelled in-process, or its CLI process killed) resumes without
re-launching finished rows and ends with the same table; the knob search converges on genuine
allocation failures: the smallest --fit-target on an RPC device whose ggml-rpc-server runs under an
address-space limit, and the largest --ctx-size on the CPU backend with llama-server itself limited.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tui.core.lab.trial import Trial
from tui.core.options.settings import Settings
from tui.core.server.process import free_port
from tui.core.sweep.definition import build_definition
from tui.core.sweep.results import build_table
from tui.core.lab.events import LabEvent
from tui.core.sweep.runner import Sweep
from tui.core.demo.tiny_model import preset, write_tiny_model

pytestmark = pytest.mark.timeout(240)

SUITE = """
name = "mini"
[[prompts]]
name = "story"
prompt = "Write a short story about a fox and a dog."
"""


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    p = tmp_path / "mini.toml"
    p.write_text(SUITE)
    return p


def base(model: Path, **kw: Any) -> Settings:
    return Settings(model=str(model), ctx_size=kw.pop("ctx_size", 4096), parallel=1, threads=1, threads_batch=1, **kw)


def run_sweep(defn: Any, server_bin: Path, events: list[LabEvent] | None = None, **kw: Any) -> tuple[Sweep, Any]:
    sw = Sweep(defn, server_bin=server_bin, store=kw.pop("store", None), planner=None,
               on_event=(events.append if events is not None else None), **kw)
    return sw, sw.run()


def test_2x2_sweep_completes_with_4_rows(server_bin: Path, tiny_models: dict[str, Path], suite_file: Path) -> None:
    from tui.core.results.store import open_store

    store = open_store()
    defn = build_definition(base(tiny_models["tiny-mtp"]), ["mtp=on,off", "ub=256,512"], suite=str(suite_file),
                            repeat=2, n_predict=64)
    events: list[LabEvent] = []
    sw, out = run_sweep(defn, server_bin, events, store=store)
    assert out.stopped == "done" and out.launches == 4
    table = build_table(defn, sw.state)
    assert len(table.rows) == 4
    assert [r.status for r in table.rows] == ["ok"] * 4
    assert {(r.values["mtp"], r.values["ub"]) for r in table.rows} == {("on", "256"), ("on", "512"), ("off", "256"), ("off", "512")}
    for r in table.rows:
        assert r.tg_tps and r.tg_tps > 0 and r.pp_tps and r.pp_tps > 0
        assert r.tg is not None and r.tg.n == 2
        assert r.memory_mib and r.memory_mib > 0
        assert r.settings["ubatch_size"] == int(r.values["ub"])
        if r.values["mtp"] == "on":
            assert r.acceptance == pytest.approx(1.0)  # the bigram model accepts every draft
            assert r.settings["spec_type"] == ["draft-mtp"]
        else:
            assert r.acceptance is None and "spec_type" not in r.settings
    assert table.best is not None and table.best.status == "ok"
    # Every measured row is a run in the results store, with the sweep's label.
    stored = {run.id: run for run in store.list_runs()}
    for r in table.rows:
        assert r.run_id in stored and stored[r.run_id].status == "ok"
        assert sw.sweep_id[:8] in (stored[r.run_id].label or "")
    # Progress: every row reported done, with an ETA once something was measured.
    done = [e for e in events if e.kind == "row_done"]
    assert len(done) == 4 and done[-1].done == 4 and done[-1].total == 4
    assert any(e.eta_s is not None and e.eta_s > 0 for e in events if e.kind in ("row_done", "probe") and e.done < 4)
    store.close()


def test_configuration_that_cannot_start_is_recorded_and_skipped(server_bin: Path, tiny_models: dict[str, Path],
                                                                   suite_file: Path) -> None:
    defn = build_definition(base(tiny_models["tiny-nomtp"]), ["spec-type=draft-mtp,none"], suite=str(suite_file),
                            repeat=1, n_predict=64)
    sw, out = run_sweep(defn, server_bin)
    assert out.stopped == "done"
    table = build_table(defn, sw.state)
    failed, ok = table.rows
    assert failed.values["spec-type"] == "draft-mtp" and failed.status == "failed"
    assert failed.failure_kind == "no_mtp_layers"
    assert "MTP" in (failed.reason or "")
    assert ok.status == "ok" and ok.tg_tps and ok.tg_tps > 0  # the sweep went on
    assert table.best is ok
    # Re-running does not retry the failed row: it is a finished result.
    _, again = run_sweep(defn, server_bin)
    assert again.launches == 0


def test_real_planner_skips_predicted_oom_and_certain_failures(server_bin: Path, tiny_models: dict[str, Path],
                                                                suite_file: Path, tmp_path: Path) -> None:
    from tui.core.lab.planning import plan_check

    # The planner knows before launching that draft-mtp cannot start on a model without MTP layers.
    defn = build_definition(base(tiny_models["tiny-nomtp"]), ["mtp=on,off"], suite=str(suite_file), repeat=1, n_predict=32)
    sw = Sweep(defn, server_bin=server_bin, store=None)  # the default planner
    out = sw.run()
    rows = build_table(defn, sw.state).rows
    assert [r.status for r in rows] == ["invalid", "ok"] and out.launches == 1
    assert "no MTP (NextN) layers" in (rows[0].reason or "")
    # Planned against a simulated 512 MiB GPU with fit off: a 262144 context cannot fit there.
    model = write_tiny_model(tmp_path / "long.gguf", preset("tiny-mtp", ctx=262144))
    settings = base(model, fit=False, n_gpu_layers="all", spec_type=["draft-mtp"])
    defn = build_definition(settings, ["ctx-size=4096,262144"], suite=str(suite_file), repeat=1, n_predict=32)
    sw = Sweep(defn, server_bin=server_bin, store=None, planner=plan_check("512MiB"))
    out = sw.run()
    small, large = build_table(defn, sw.state).rows
    assert out.launches == 1 and small.status == "ok" and large.status == "predicted_oom"
    assert "CUDA0 needs" in (large.reason or "") and "--try-anyway" in (large.reason or "")
    assert large.settings["ctx_size"] == 262144
    # With try-anyway only the skipped row runs (here it loads: the GPU was only simulated).
    defn2 = build_definition(settings, ["ctx-size=4096,262144"], suite=str(suite_file), repeat=1, n_predict=32,
                             try_anyway=True)
    sw2 = Sweep(defn2, server_bin=server_bin, store=None, planner=plan_check("512MiB"))
    out2 = sw2.run()
    large2 = build_table(defn2, sw2.state).rows[1]
    assert out2.launches == 1 and large2.status == "ok"
    assert any("predicts an OOM" in w for w in large2.warnings)


def test_cancel_then_resume_runs_only_unfinished_rows(server_bin: Path, tiny_models: dict[str, Path],
                                                      suite_file: Path) -> None:
    defn = build_definition(base(tiny_models["tiny-mtp"]), ["mtp=on,off", "ctkd=f16,q8_0", "n-predict=32,64"],
                            suite=str(suite_file), repeat=1)
    # 8 grid points; MTP off ignores ctkd (2 duplicates); n-predict shares a launch: 3 launches.
    assert defn.launch_count() == 3
    sw = Sweep(defn, server_bin=server_bin, store=None, planner=None)

    def on_event(ev: LabEvent) -> None:
        if ev.kind == "row_done" and ev.trial is not None and ev.trial.status == "ok":
            ok_rows = [r for r in sw.state.trials.values() if r.status == "ok"]
            if len(ok_rows) == 3:
                sw.cancel()

    sw.on_event = on_event
    first = sw.run()
    assert first.stopped == "cancelled"
    saved = {k: r for k, r in sw.state.trials.items() if r.status == "ok"}
    assert len(saved) == 3
    launches_before = sw.state.launches
    assert first.launches == 2  # the third row was the first of the second launch

    sw2 = Sweep(defn, server_bin=server_bin, store=None, planner=None)
    second = sw2.run()
    assert second.stopped == "done"
    assert sorted(second.ran) == sorted(k for k in {c.key for c in defn.grid()} if k not in sw.state.trials or sw.state.trials[k].status not in ("ok", "duplicate"))
    assert second.launches == 2  # the rest of launch 2 runs again, launch 3 is new; launch 1 is not repeated
    assert sw2.state.launches == launches_before + 2
    for k, r in saved.items():  # finished rows were kept, not measured again
        assert sw2.state.trials[k].to_json() == r.to_json()
    table = build_table(defn, sw2.state)
    assert [r.status for r in table.rows].count("ok") == 6
    assert [r.status for r in table.rows].count("duplicate") == 2
    assert all(r.tg_tps for r in table.rows)  # duplicates show their original's numbers
    assert table.complete
    assert len(table.mtp_pays) == 2  # one series per draft KV type, along n-predict
    for m in table.mtp_pays:
        assert [p.n_predict for p in m.points] == [32, 64]


def _sweep_cli(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tui.cli", "sweep", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)


def test_cli_killed_midway_resumes_without_relaunching(server_bin: Path, tiny_models: dict[str, Path],
                                                       suite_file: Path, tmp_path: Path) -> None:
    args = ["--server-bin", str(server_bin), "-m", str(tiny_models["tiny-mtp"]), "-c", "4096", "-t", "1", "-tb", "1",
            "--axis", "mtp=on,off", "--axis", "ub=256,512", "--suite", str(suite_file), "--repeat", "1",
            "--n-predict", "64", "--json"]
    env = dict(os.environ)
    proc = _sweep_cli(args, env)
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        for line in proc.stderr:  # bounded: the process ends by itself after 4 rows at the latest
            seen.append(line)
            if ": ok" in line:
                os.killpg(proc.pid, signal.SIGKILL)
                break
    finally:
        proc.wait(timeout=60)
        if proc.stdout:
            proc.stdout.close()
        proc.stderr.close()
    assert any(": ok" in s for s in seen), "".join(seen)
    state_files = list((Path(env["MTP_TUNE_DATA_DIR"]) / "sweeps").glob("*.json"))
    assert len(state_files) == 1
    before = json.loads(state_files[0].read_text())
    finished = {k: r for k, r in before["trials"].items() if r["status"] == "ok"}
    assert 1 <= len(finished) < 4
    # Run the same command again: it continues.
    done = subprocess.run([sys.executable, "-m", "tui.cli", "sweep", *args, "--save-best", "fox-best"],
                          capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "done" and out["complete"]
    assert out["launches_this_run"] == 4 - len(finished)
    assert len(out["rows"]) == 4 and all(r["status"] == "ok" for r in out["rows"])
    for r in out["rows"]:
        assert set(r) >= {"settings", "status", "tg_tps", "pp_tps", "acceptance"}
        if r["key"] in finished:
            assert r["tg_tps"] == Trial.from_json(finished[r["key"]]).median("tg_tps")  # kept, not re-measured
    assert out["best"]["status"] == "ok"
    top = max(out["rows"], key=lambda r: r["tg_tps"])  # the fastest, or a cheaper row within its noise (lab.ranking)
    assert out["best"]["number"] == top["number"] or top["number"] in out["within_noise"]
    # --save-best wrote the profile and the INI section in one step.
    profile = Path(out["saved"]["profile"])
    ini = Path(out["saved"]["ini"]).read_text()
    assert profile.is_file() and f"ubatch_size = {out['best']['settings']['ubatch_size']}" in profile.read_text()
    assert "[fox-best]" in ini and f"ubatch-size = {out['best']['settings']['ubatch_size']}" in ini


# --------------------------------------------------------------------------- genuine allocation failures


def _limit_as(limit_bytes: int) -> Any:
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return preexec


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """Until the port accepts connections (its banner is block-buffered, so it cannot be read)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "ggml-rpc-server exited at start"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            threading.Event().wait(0.05)
    raise AssertionError(f"ggml-rpc-server did not listen on {port} within {timeout:g} s")


@pytest.fixture
def limited_rpc_server(rpc_server_bin: Path, tmp_path: Path) -> Iterator[str]:
    """One ggml-rpc-server on 127.0.0.1 under a 700 MB address-space limit (a small fake 'GPU')."""
    port = free_port()
    with open(tmp_path / "rpc.log", "wb") as log:
        proc = subprocess.Popen([str(rpc_server_bin), "-H", "127.0.0.1", "-p", str(port), "-t", "1"],
                                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_limit_as(700 * 1000 * 1024),
                                start_new_session=True)
    try:
        _wait_listening(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_fit_target_search_converges_on_a_real_rpc_allocation_failure(
        server_bin: Path, limited_rpc_server: str, suite_file: Path, tmp_path: Path) -> None:
    # n_ctx_train 262144 with 64-wide heads: at full context the KV and compute buffers need more
    # than the rpc-server may map, while --fit's view of the device (the host's RAM) says it fits.
    model = write_tiny_model(tmp_path / "long-ctx.gguf", preset("tiny-mtp", ctx=262144, head_dim=64))
    settings = Settings(model=str(model), parallel=1, threads=1, threads_batch=1, rpc=[limited_rpc_server],
                        n_gpu_layers="all", spec_type=["draft-mtp"])
    defn = build_definition(settings, ["spec-draft-n-max=2"], suite=str(suite_file), repeat=1, n_predict=16)
    events: list[LabEvent] = []
    sw, out = run_sweep(defn, server_bin, events)
    (row,) = build_table(defn, sw.state).rows
    finding = row.finding
    assert finding is not None, row.reason
    trials = finding["trials"]
    print(f"fit-target search: {finding['message']}; trials: {[(t['value'], t['outcome']) for t in trials]}")
    assert finding["knob"] == "fit_target" and finding["converged"], finding["message"]
    assert "allocat" in finding["cause"].lower()  # it started from a genuine allocation failure
    value = finding["value"]
    by_value = {t["value"]: t["outcome"] for t in trials}  # the last outcome per value
    assert by_value.get(value, "ok") == "ok"
    # Converged to one step: the value one step below fails for lack of memory (tried, or it is
    # the start, which failed).
    below = value - finding["step"]
    assert by_value.get(below) == "oom" or below == finding["start"]
    assert row.status == "ok" and row.settings["fit_target"] == [value]
    assert row.tg_tps and row.tg_tps > 0
    assert sw.state.findings and sw.state.findings[0]["value"] == value
    # The failing launch, the trials (relaunch failures included), the measured launch.
    assert sw.state.launches == len(trials) + 2
    assert any(e.kind == "search_trial" for e in events)


def _vm_peak_kb(server_bin: Path, settings: Settings) -> int:
    """VmPeak of llama-server once ready with `settings` (no limit), from /proc."""
    from tui.core.server.events import ServerState
    from tui.core.server.supervisor import Supervisor

    with Supervisor(server_bin, settings, ready_timeout=60) as sup:
        sup.start()
        assert sup.wait_ready(60) == ServerState.READY, sup.failure
        status = Path(f"/proc/{sup.pid}/status").read_text()
    return next(int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmPeak:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="address-space limits via /proc and ulimit -v")
def test_ctx_search_converges_on_a_real_host_allocation_failure(server_bin: Path, suite_file: Path,
                                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # glibc reserves 64 MiB of address space per malloc arena, and how many arenas the server's
    # threads create depends on timing: one arena makes the address-space bound the same every launch.
    monkeypatch.setenv("MALLOC_ARENA_MAX", "1")
    # On the CPU backend --fit-target changes nothing; the knob that fixes a host allocation is the
    # context. llama-server runs under an address-space limit (ulimit -v in a wrapper script) set
    # halfway between what it maps at a 4k context and at the full 262144 one, measured here, so
    # the full context fails to allocate for real on any machine and a small one fits.
    model = write_tiny_model(tmp_path / "long-ctx.gguf", preset("tiny-mtp", ctx=262144, head_dim=64))
    settings = base(model, ctx_size=262144, spec_type=["draft-mtp"])
    small = _vm_peak_kb(server_bin, base(model, ctx_size=4096, spec_type=["draft-mtp"]))
    full = _vm_peak_kb(server_bin, settings)
    assert full > small + 200_000, (small, full)
    limit_kb = (small + full) // 2
    wrapper = tmp_path / "limited-llama-server"
    wrapper.write_text(f"#!/bin/sh\nulimit -v {limit_kb}\nexec '{server_bin}' \"$@\"\n")
    wrapper.chmod(0o755)
    defn = build_definition(settings, ["ub=512"], suite=str(suite_file), repeat=1, n_predict=16)
    sw, out = run_sweep(defn, wrapper)
    (row,) = build_table(defn, sw.state).rows
    finding = row.finding
    assert finding is not None, row.reason
    print(f"ctx-size search under ulimit -v {limit_kb} (VmPeak {small} kB at 4k, {full} kB at 262144): "
          f"{finding['message']}; trials: {[(t['value'], t['outcome'], t['seconds']) for t in finding['trials']]}")
    assert "memory" in finding["cause"].lower()  # it started from a genuine host allocation failure
    assert finding["knob"] == "ctx_size" and finding["converged"], finding["message"]
    value = finding["value"]
    by_value = {t["value"]: t["outcome"] for t in finding["trials"]}  # the last outcome per value
    # Right at the bound the outcome may flicker; the answer is the value the row was measured with,
    # and one step above it failed for lack of memory.
    above = value + finding["step"]
    assert by_value.get(above) == "oom" or above == finding["start"]
    assert by_value.get(value, "ok") == "ok"
    assert row.status == "ok", row.reason
    assert row.settings["ctx_size"] == value and 4096 <= value < 262144
    assert row.memory and row.memory["n_ctx"] == value
