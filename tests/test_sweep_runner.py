"""The sweep runner's decisions with a scripted launcher and prober (no server): planning skips,
the knob search after first-decode OOMs, stepping safer when the probe runs out of memory, budget,
cancel, a server dying mid-group, resume, events and ETA. The real server runs in test_sweep_real."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tui.core.server.failures import Failure, FailureKind
from tui.core.probes.hygiene import ProbeWarning
from tui.core.options.settings import Settings
from tui.core.sweep.definition import build_definition
from tui.core.sweep.results import build_table
from tui.core.lab.failures import classify_memory
from tui.core.lab.launcher import LaunchOutcome
from tui.core.lab.events import LabEvent
from tui.core.lab.events import LabError
from tui.core.lab.planning import PlanVerdict
from tui.core.lab.recovery import choose_knob
from tui.core.sweep.runner import Sweep

SUITE = '[[prompts]]\nname = "p"\nprompt = "Say hello."\n'


@pytest.fixture
def suite(tmp_path: Path) -> str:
    p = tmp_path / "s.toml"
    p.write_text(SUITE)
    return str(p)


def base(**kw: Any) -> Settings:
    return Settings(model="/m.gguf", ctx_size=kw.pop("ctx_size", 4096), parallel=1, **kw)


class FakeLauncher:
    """Launch outcomes decided by `rule(settings) -> LaunchOutcome`."""

    def __init__(self, rule: Callable[[Settings], LaunchOutcome] | None = None) -> None:
        self.rule = rule or (lambda s: LaunchOutcome(True, url="http://fake"))
        self.launched: list[Settings] = []
        self.dead: Failure | None = None
        self.running = False
        self.first_decode_messages: list[dict[str, str]] | None = None
        self.first_decode_prompt: str | None = None

    def launch(self, settings: Settings, cancel: threading.Event) -> LaunchOutcome:
        self.launched.append(settings)
        out = self.rule(settings)
        self.running = out.ok
        return out

    def stop(self) -> None:
        self.running = False

    def close(self) -> None:
        self.running = False

    def failure(self) -> Failure | None:
        return self.dead


@dataclass
class FakeRun:
    status: str
    summary: dict[str, Any]
    warnings: list[ProbeWarning] = field(default_factory=list)
    error: str | None = None
    run_id: int | None = None
    requests: list[Any] = field(default_factory=list)


def tg_run(tg: float, pp: float = 1000.0, acc: float | None = None, n: int = 3, status: str = "ok",
           error: str | None = None) -> FakeRun:
    vals = [tg * f for f in (0.99, 1.0, 1.01)][:n]
    pvals = [pp * f for f in (0.99, 1.0, 1.01)][:n]
    summ = {
        "tg_tps_median": tg, "pp_tps_median": pp, "acceptance": acc,
        "tg_tps": {"n": n, "median": tg, "min": min(vals), "max": max(vals)},
        "pp_tps": {"n": n, "median": pp, "min": min(pvals), "max": max(pvals)},
        "passes": [{"tg_tps": a, "pp_tps": b, "acceptance": acc, "complete": True} for a, b in zip(vals, pvals)],
    }
    return FakeRun(status, summ if status == "ok" else {}, error=error)


class FakeProber:
    def __init__(self, rule: Callable[[Settings, int | None], FakeRun] | None = None) -> None:
        self.rule = rule or (lambda s, n: tg_run(100.0 if s.mtp_enabled else 80.0, acc=0.8 if s.mtp_enabled else None))
        self.calls: list[tuple[Settings, int | None]] = []

    def __call__(self, url: str, suite: Any, *, repeat: int, n_predict: int | None, label: str, settings: Settings,
                 memory: Any, plan: Any, cancel: threading.Event, progress: Callable[[Any], None], **kw: Any) -> FakeRun:
        self.calls.append((settings, n_predict))
        return self.rule(settings, n_predict)


def make(defn: Any, launcher: FakeLauncher, prober: FakeProber | None = None, planner: Any = None,
         events: list[LabEvent] | None = None, tmp: Path | None = None) -> Sweep:
    return Sweep(defn, launcher=launcher, prober=prober or FakeProber(), planner=planner, store=None,
                 on_event=events.append if events is not None else None, state_root=tmp)


def oom_outcome(on_device: bool = True, first_decode: bool = False, headroom: int | None = None) -> LaunchOutcome:
    f = Failure(FailureKind.OOM_DEVICE if on_device else FailureKind.OOM_HOST, "Out of memory.")
    return LaunchOutcome(False, failure=f, memory_failure=True, memory_on_device=on_device, at_first_decode=first_decode,
                         devices=[{"name": "CUDA0", "free_mib": 8192}], fit_headroom_mib=headroom)


def test_all_rows_run_and_best_is_found(suite: str, tmp_path: Path) -> None:
    defn = build_definition(base(), ["mtp=on,off", "ub=256,512"], suite=suite, repeat=3)
    be, events = FakeLauncher(), []
    sw = make(defn, be, events=events, tmp=tmp_path)
    out = sw.run()
    assert out.stopped == "done" and out.launches == 4 == len(be.launched)
    t = build_table(defn, sw.state)
    assert [r.status for r in t.rows] == ["ok"] * 4
    assert t.best is not None and t.best.values["mtp"] == "on"
    assert {r.number for r in t.within_noise} == {t.rows[1].number if t.best is t.rows[0] else t.rows[0].number}
    kinds = [e.kind for e in events]
    assert kinds[0] == "started" and kinds[-1] == "finished" and kinds.count("row_done") == 4
    assert events[-1].eta_s == 0.0 and all(e.eta_s is not None for e in events if e.kind == "row_done")
    # The first-decode check uses the suite's first prompt.
    assert be.first_decode_messages == [{"role": "user", "content": "Say hello."}]


def test_predicted_oom_is_skipped_unless_try_anyway(suite: str, tmp_path: Path) -> None:
    def planner(s: Settings) -> PlanVerdict:
        return PlanVerdict("oom", "CUDA0 needs 9000 MiB of 8192 MiB free") if s.ubatch_size == 512 else PlanVerdict("tight", "CUDA0 close")

    defn = build_definition(base(), ["ub=256,512"], suite=suite, repeat=1)
    be = FakeLauncher()
    sw = make(defn, be, planner=planner, tmp=tmp_path)
    sw.run()
    t = build_table(defn, sw.state)
    assert [r.status for r in t.rows] == ["ok", "predicted_oom"]
    assert "9000 MiB" in (t.rows[1].reason or "") and "--try-anyway" in (t.rows[1].reason or "")
    assert any("tight" in w for w in t.rows[0].warnings)
    assert len(be.launched) == 1
    # try-anyway re-runs only the skipped row, and says it was launched against the prediction.
    defn2 = build_definition(base(), ["ub=256,512"], suite=suite, repeat=1, try_anyway=True)
    assert defn2.sweep_id == defn.sweep_id
    be2 = FakeLauncher()
    sw2 = make(defn2, be2, planner=planner, tmp=tmp_path)
    sw2.run()
    assert [s.ubatch_size for s in be2.launched] == [512]
    row = build_table(defn2, sw2.state).rows[1]
    assert row.status == "ok" and any("predicts an OOM" in w for w in row.warnings)


def test_planner_certain_failure_is_invalid_without_launch(suite: str, tmp_path: Path) -> None:
    defn = build_definition(base(), ["mtp=on,off"], suite=suite, repeat=1)
    be = FakeLauncher()
    sw = make(defn, be, planner=lambda s: PlanVerdict("invalid", "no MTP layers") if s.mtp_enabled else None, tmp=tmp_path)
    sw.run()
    t = build_table(defn, sw.state)
    assert [r.status for r in t.rows] == ["invalid", "ok"] and len(be.launched) == 1


def test_first_decode_oom_triggers_a_fit_target_search(suite: str, tmp_path: Path) -> None:
    # Loads, but the first decode fails to allocate unless fit-target >= 1500 MiB.
    def rule(s: Settings) -> LaunchOutcome:
        ft = s.fit_target[0] if s.fit_target else 1024
        return LaunchOutcome(True, url="http://fake") if ft >= 1500 else oom_outcome(first_decode=True)

    defn = build_definition(Settings(model="/m.gguf", parallel=1), ["mtp=on"], suite=suite, repeat=1)
    be = FakeLauncher(rule)
    events: list[LabEvent] = []
    sw = make(defn, be, events=events, tmp=tmp_path)
    sw.run()
    (row,) = build_table(defn, sw.state).rows
    assert row.status == "ok" and row.settings["fit_target"] == [1536]
    f = row.finding
    assert f is not None and f["knob"] == "fit_target" and f["converged"] and f["value"] == 1536
    assert [t["value"] for t in f["trials"]][:3] == [1088, 1152, 1280]
    assert {t["value"]: t["outcome"] for t in f["trials"]}[1472] == "oom"
    assert sw.state.findings[0]["value"] == 1536
    assert any("--fit-target set to 1536 MiB" in w for w in row.warnings)
    assert sum(e.kind == "search_trial" for e in events) == len(f["trials"])
    assert len(be.launched) == 1 + len(f["trials"]) + 1


def test_fit_headroom_skips_values_where_fit_changes_nothing(suite: str, tmp_path: Path) -> None:
    def rule(s: Settings) -> LaunchOutcome:
        ft = s.fit_target[0] if s.fit_target else 1024
        return LaunchOutcome(True, url="http://fake") if ft >= 7000 else oom_outcome(headroom=6900)

    defn = build_definition(Settings(model="/m.gguf"), ["ub=512"], suite=suite, repeat=1)
    sw = make(defn, FakeLauncher(rule), tmp=tmp_path)
    sw.run()
    f = build_table(defn, sw.state).rows[0].finding
    assert f is not None and f["value"] == 7040 and f["origin"] == 1024 and f["start"] == 6848
    assert len(f["trials"]) <= 4


def test_host_oom_searches_the_context(suite: str, tmp_path: Path) -> None:
    def rule(s: Settings) -> LaunchOutcome:
        return LaunchOutcome(True, url="http://fake") if (s.ctx_size or 0) <= 10000 else oom_outcome(on_device=False)

    defn = build_definition(base(ctx_size=65536), ["ub=512"], suite=suite, repeat=1)
    sw = make(defn, FakeLauncher(rule), tmp=tmp_path)
    sw.run()
    row = build_table(defn, sw.state).rows[0]
    assert row.finding and row.finding["knob"] == "ctx_size" and row.finding["value"] == 9984
    assert row.settings["ctx_size"] == 9984


def test_probe_out_of_memory_after_a_search_steps_safer(suite: str, tmp_path: Path) -> None:
    def rule(s: Settings) -> LaunchOutcome:
        ft = s.fit_target[0] if s.fit_target else 1024
        return LaunchOutcome(True, url="http://fake") if ft >= 1500 else oom_outcome()

    def probe(s: Settings, n: int | None) -> FakeRun:
        return tg_run(50.0) if s.fit_target[0] >= 1600 else tg_run(0, status="failed", error="HTTP 500: std::bad_alloc")

    defn = build_definition(Settings(model="/m.gguf"), ["ub=512"], suite=suite, repeat=1)
    sw = make(defn, FakeLauncher(rule), FakeProber(probe), tmp=tmp_path)
    sw.run()
    row = build_table(defn, sw.state).rows[0]
    assert row.status == "ok" and row.settings["fit_target"] == [1600]
    assert row.finding and row.finding["value"] == 1600 and "probe ran out of memory" in row.finding["message"]
    assert sw.state.findings[0]["value"] == 1600


def test_other_launch_failures_are_classified_and_the_sweep_goes_on(suite: str, tmp_path: Path) -> None:
    bad = Failure(FailureKind.UNSUPPORTED_CACHE_TYPE, "llama-server does not support the cache type.", "-ctkd")

    def rule(s: Settings) -> LaunchOutcome:
        return LaunchOutcome(False, failure=bad) if s.cache_type_k_draft == "q4_1" else LaunchOutcome(True, url="u")

    defn = build_definition(base(), ["mtp=on", "ctkd=q4_1,f16", "n-predict=64,128"], suite=suite, repeat=1)
    be = FakeLauncher(rule)
    sw = make(defn, be, tmp=tmp_path)
    sw.run()
    t = build_table(defn, sw.state)
    assert [r.status for r in t.rows] == ["failed", "failed", "ok", "ok"]
    assert t.rows[0].failure_kind == "unsupported_cache_type" and "cache type" in (t.rows[0].reason or "")
    assert len(be.launched) == 2  # one per launch group, no search for a non-memory failure
    assert t.rows[0].finding is None


def test_server_dying_mid_group_fails_the_rest_of_the_group(suite: str, tmp_path: Path) -> None:
    be = FakeLauncher()
    crash = Failure(FailureKind.CRASH, "llama-server crashed (SIGSEGV) while serving a request.")

    def probe(s: Settings, n: int | None) -> FakeRun:
        if n == 128:
            be.dead = crash
            return tg_run(0, status="failed", error="the server went away")
        return tg_run(90.0)

    defn = build_definition(base(), ["n-predict=64,128,256"], suite=suite, repeat=1)
    sw = make(defn, be, FakeProber(probe), tmp=tmp_path)
    sw.run()
    t = build_table(defn, sw.state)
    assert [r.status for r in t.rows] == ["ok", "failed", "failed"]
    assert t.rows[1].failure_kind == "crash" and "SIGSEGV" in (t.rows[1].reason or "")
    assert t.rows[2].failure_kind == "crash"


def test_budget_stops_before_the_next_launch_and_resume_finishes(suite: str, tmp_path: Path) -> None:
    defn = build_definition(base(), ["ub=128,256,512"], suite=suite, repeat=1, budget_min=1e-9)
    be = FakeLauncher()
    out = make(defn, be, tmp=tmp_path).run()
    assert out.stopped == "budget" and be.launched == []
    t = build_table(defn, make(defn, FakeLauncher(), tmp=tmp_path).state)
    assert [r.status for r in t.rows] == ["pending"] * 3 and not t.complete
    assert "not run yet" in t.render()
    defn2 = build_definition(base(), ["ub=128,256,512"], suite=suite, repeat=1)
    out2 = make(defn2, FakeLauncher(), tmp=tmp_path).run()
    assert out2.stopped == "done" and out2.launches == 3


def test_cancel_keeps_finished_rows_and_resume_skips_them(suite: str, tmp_path: Path) -> None:
    defn = build_definition(base(), ["ub=128,256,512"], suite=suite, repeat=1)
    holder: dict[str, Sweep] = {}

    def probe(s: Settings, n: int | None) -> FakeRun:
        if s.ubatch_size == 256:
            holder["sw"].cancel()
            return FakeRun("cancelled", {})
        return tg_run(70.0)

    be = FakeLauncher()
    sw = make(defn, be, FakeProber(probe), tmp=tmp_path)
    holder["sw"] = sw
    out = sw.run()
    assert out.stopped == "cancelled" and out.ran == [defn.grid()[0].key]
    assert set(sw.state.trials) == {defn.grid()[0].key}
    saved = sw.state.trials[defn.grid()[0].key].to_json()
    be2 = FakeLauncher()
    sw2 = make(defn, be2, tmp=tmp_path)
    out2 = sw2.run()
    assert [s.ubatch_size for s in be2.launched] == [256, 512] and out2.stopped == "done"
    assert sw2.state.trials[defn.grid()[0].key].to_json() == saved
    assert sw2.state.launches == 1 + 1 + 2 and len(sw2.state.sessions) == 2


def test_a_broken_event_callback_does_not_stop_the_sweep(suite: str, tmp_path: Path) -> None:
    def boom(ev: LabEvent) -> None:
        raise RuntimeError("ui bug")

    defn = build_definition(base(), ["ub=128"], suite=suite, repeat=1)
    sw = Sweep(defn, launcher=FakeLauncher(), prober=FakeProber(), planner=None, store=None, on_event=boom,
               state_root=tmp_path)
    assert sw.run().stopped == "done"


def test_missing_server_and_bad_suite_are_explained(tmp_path: Path) -> None:
    defn = build_definition(base(), ["ub=128"], suite=str(tmp_path / "nope.toml"), repeat=1)
    with pytest.raises(LabError, match="llama-server binary"):
        Sweep(defn, planner=None, store=None, state_root=tmp_path).run()
    with pytest.raises(LabError, match="not a built-in suite"):
        Sweep(defn, launcher=FakeLauncher(), planner=None, store=None, state_root=tmp_path).run()


def test_failed_launches_are_recorded_in_the_store(suite: str, tmp_path: Path) -> None:
    from tui.core.results.store import open_store

    store = open_store(tmp_path / "r.sqlite")
    bad = Failure(FailureKind.MISSING_MODEL, "The model file /m.gguf does not exist.", "/m.gguf")
    defn = build_definition(base(), ["ub=128"], suite=suite, repeat=1)
    sw = Sweep(defn, launcher=FakeLauncher(lambda s: LaunchOutcome(False, failure=bad)), prober=FakeProber(),
               planner=None, store=store, state_root=tmp_path)
    sw.run()
    row = build_table(defn, sw.state).rows[0]
    run = store.get(row.run_id or -1)
    assert run is not None and run.status == "failed" and "does not exist" in (run.error or "")
    store.close()


def test_memory_classification_from_the_log() -> None:
    # llama.cpp's words for an RPC device's failed allocation, then a misleading final error.
    lines = ["E ggml_gallocr_reserve_n_impl: failed to allocate RPC0[127.0.0.1:50052] buffer of size 525090848",
             "E common_speculative_init_result: failed to create MTP context",
             "I common_params_fit_impl: projected to use 903 MiB of device memory vs. 24152 MiB of free device memory"]
    out = LaunchOutcome(False, failure=Failure(FailureKind.NO_MTP_LAYERS, "no MTP layers"))
    classify_memory(out, lines)
    assert out.memory_failure and out.memory_on_device and out.failure is not None
    assert out.failure.kind == FailureKind.OOM_DEVICE and "RPC0" in out.failure.message
    assert out.fit_headroom_mib == 24152 - 903
    host = LaunchOutcome(False, failure=Failure(FailureKind.CRASH, "crashed"))
    classify_memory(host, ["E ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 1073741824"])
    assert host.memory_failure and not host.memory_on_device and host.failure.kind == FailureKind.OOM_HOST  # type: ignore[union-attr]
    plain = LaunchOutcome(False, failure=Failure(FailureKind.UNKNOWN_ARG, "unknown option"))
    classify_memory(plain, ["error: invalid argument: --foo"])
    assert not plain.memory_failure
    assert choose_knob(Settings(), out) == "fit_target"
    assert choose_knob(Settings(fit=False), out) == "ctx_size"
    assert choose_knob(Settings(ctx_size=4096, n_gpu_layers="all"), out) == "ctx_size"
    assert choose_knob(Settings(), host) == "ctx_size"


def test_the_same_sweep_cannot_run_twice_at_once(suite: str, tmp_path: Path) -> None:
    defn = build_definition(base(), ["ub=128"], suite=suite, repeat=1)
    other = make(defn, FakeLauncher(), tmp=tmp_path)
    seen: list[str] = []

    def probe(s: Settings, n: int | None) -> FakeRun:
        with pytest.raises(LabError, match="already running") as e:
            other.run()  # e.g. the CLI while the TUI runs it
        seen.append(str(e.value))
        return tg_run(10.0)

    assert make(defn, FakeLauncher(), FakeProber(probe), tmp=tmp_path).run().stopped == "done"
    assert seen and str(os.getpid()) in seen[0]
    assert other.run().stopped == "done"  # free again afterwards (nothing left to run)
