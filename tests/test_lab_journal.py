"""The one journal (`lab.journal`) and the one trial record (`lab.trial`).

The format-1 files in tests/data/journal/ were written by the code this journal replaced
(`sweep.state.SweepState.save` and `tuning.tune_state.TuneState.save` at commit 9e0f04d): a sweep with a
measured, a duplicate, a predicted-OOM and a failed row, and a tune with a measured and a dominated
record, its workload, prompt and a complete A/B. A resume must read them as they were.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tui.core.lab.journal import VERSION, JournalError, JournalLock, load_journal, open_journal
from tui.core.lab.trial import Samples, Trial
from tui.core.tune.identity import check_section
from tui.core.lab.ranking import AbVerdict
from tui.core.tune.workload import Workload

DATA = Path(__file__).parent / "data" / "journal"
SWEEP_ID, TUNE_ID = "sweep-v1fixture", "tune-3f42e3b88a55"


def copy_in(name: str, journal_id: str, root: Path) -> Path:
    path = root / f"{journal_id}.json"
    shutil.copy(DATA / name, path)
    return path


def test_a_format_1_sweep_state_is_read_as_it_was_written(tmp_path: Path) -> None:
    copy_in("sweep-v1.json", SWEEP_ID, tmp_path)
    j = load_journal("sweep", SWEEP_ID, tmp_path)
    assert j is not None and j.kind == "sweep" and j.launches == 3 and len(j.sessions) == 1
    assert list(j.trials) == ["r1", "r2", "r3", "r4"]
    r1 = j.trials["r1"]
    assert r1.status == "ok" and r1.mtp and r1.n_predict == 128 and r1.run_id == 7 and r1.launch == 2
    assert r1.samples is not None and r1.samples.tg_tps == [40.0, 41.0, 42.0] and r1.samples.pp_tps == [890.0, 900.0, 910.0]
    tg = r1.summary("tg_tps")
    assert tg is not None and (tg.median, tg.min, tg.max, tg.n) == (41.0, 40.0, 42.0, 3)  # the stored summary, rebuilt
    assert r1.accept_rate() == 0.75 and r1.mean_accept_len == 2.5 and r1.memory["total_mib"] == 1234.5  # type: ignore[index]
    assert r1.finding == {"flag": "fit-target", "value": 256, "converged": True, "message": "found"}
    assert (r1.log_path, r1.started_at, r1.finished_at, r1.warnings) == (
        "/tmp/l.log", 100.0, 160.0, ["fit-target set to 256 MiB after a memory allocation failure"])
    assert [j.trials[k].status for k in ("r2", "r3", "r4")] == ["duplicate", "predicted_oom", "failed"]
    assert j.trials["r4"].failure_kind == "oom_device" and j.trials["r3"].samples is None
    assert j.finished("r1") and j.finished("r3") and not j.finished("r3", try_anyway=True)
    assert j.findings[0]["value"] == 256
    j.save()  # the resumed sweep writes today's version, with nothing lost
    d = json.loads((tmp_path / f"{SWEEP_ID}.json").read_text())
    assert d["version"] == VERSION and "format" not in d and "rows" not in d
    again = load_journal("sweep", SWEEP_ID, tmp_path)
    assert again is not None and {k: t.to_json() for k, t in again.trials.items()} == {k: t.to_json() for k, t in j.trials.items()}


def test_a_format_1_tune_state_is_read_with_its_records_and_section(tmp_path: Path) -> None:
    copy_in("tune-v1.json", TUNE_ID, tmp_path)
    j = load_journal("tune", TUNE_ID, tmp_path, check_more=check_section)
    assert j is not None and j.kind == "tune" and j.launches == 4 and j.findings == []
    k1, k2 = j.trials["k1"], j.trials["k2"]
    assert (k1.number, k1.memory_key, k1.stage, k1.status, k1.mtp, k1.fit_target, k1.launches) == (1, "m1", "start", "ok", True, 256, 2)
    assert k1.values == {"mtp": True, "ubatch": 512} and k1.vram_mib == 4000.0 and k1.verdict == {"label": "best"}
    assert k1.finding == {"value": 256, "message": "smallest fit-target", "trials": []}  # the fit search, `tune` taken out
    assert k1.samples is not None and k1.samples.e2e_s == [3.0, 2.9] and k1.measured and k1.median() == pytest.approx(2.95)
    assert k1.warnings == ["another process uses the GPU"] and k1.plan == {"risk": "ok", "message": "exact"}
    assert (k2.status, k2.number, k2.mtp, k2.reason) == ("dominated", 2, False, "needs at least the memory of #3, which ran out")
    assert Workload.from_json(j.tune.workload or {}) == Workload("1000:500", 1000.0, 500.0, 1500)
    assert j.tune.prompt == "hello"
    v = j.tune.ab_verdict("k1", "k2", 2)
    assert v is not None and AbVerdict.from_json(v).status == "complete" and j.tune.ab_verdict("k1", "k2", 3) is None
    j.save()
    again = load_journal("tune", TUNE_ID, tmp_path, check_more=check_section)
    assert again is not None and again.tune == j.tune and again.trials["k1"] == k1


def test_a_newer_version_is_refused_in_one_sentence_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s1.json"
    path.write_text(json.dumps({"version": VERSION + 1, "kind": "sweep", "id": "s1", "trials": {}}))
    with pytest.raises(JournalError) as e:
        load_journal("sweep", "s1", tmp_path)
    msg = str(e.value)
    assert str(path) in msg and f"version {VERSION + 1}" in msg and "update mtp-tune" in msg and "\n" not in msg


@pytest.mark.parametrize("damage", [
    {"trials": {"k": {"key": "k", "status": "exploded"}}},
    {"trials": {"k": {"key": "k", "status": "ok", "samples": {"tg_tps": "fast"}}}},
    {"trials": []},
    {"tune": {"ab": [{"on": "a"}]}},
])
def test_a_damaged_journal_is_refused_in_one_sentence_naming_the_file(tmp_path: Path, damage: dict) -> None:
    path = tmp_path / "t1.json"
    path.write_text(json.dumps({"version": VERSION, "kind": "tune", "id": "t1"} | damage))
    with pytest.raises(JournalError) as e:
        open_journal("tune", "t1", {}, tmp_path)
    msg = str(e.value)
    assert str(path) in msg and "is damaged (" in msg and "--fresh" in msg and "\n" not in msg


def test_the_lock_refuses_a_second_runner_in_one_sentence(tmp_path: Path) -> None:
    code = ("import sys, time; from pathlib import Path; from tui.core.lab.journal import JournalLock\n"
            "l = JournalLock('sweep', 's1', Path(sys.argv[1])); l.acquire(); print('held', flush=True); sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"  # ends when the child prints or dies
        with pytest.raises(JournalError) as e:
            JournalLock("sweep", "s1", tmp_path).acquire()
        msg = str(e.value)
        assert "this sweep is already running" in msg and f"pid {holder.pid}" in msg and "\n" not in msg
    finally:
        holder.communicate("", timeout=30)  # closing stdin ends the holder, which drops the lock
    with JournalLock("sweep", "s1", tmp_path):  # free again once the holder is gone
        pass
    assert oct((tmp_path / "s1.lock").stat().st_mode & 0o777) == "0o600"


def test_a_trial_round_trips_through_the_journal(tmp_path: Path) -> None:
    t = Trial("k9", "eliminated", number=9, stage="walk ubatch", values={"mtp": True, "ubatch": 1024}, memory_key="m9",
              mtp=True, settings={"ubatch_size": 1024}, n_predict=64, reason="slower than #3", failure=None,
              failure_kind=None, plan={"risk": "tight", "message": "close"}, vram_mib=5000.0, fit_target=512,
              finding={"value": 512}, samples=Samples([100.0, None], [20.0, 21.0], [0.5, None], [3.0, None], error=None),
              acceptance=0.52, mean_accept_len=2.1, memory={"total_mib": 5000.0}, verdict={"label": "worse"},
              launches=2, launch=4, seconds=33.5, run_id=11, log_path="/x.log", started_at=1.0, finished_at=2.0,
              resumed=True, warnings=["w"])
    assert Trial.from_json(json.loads(json.dumps(t.to_json()))) == t
    j = open_journal("tune", "t9", {"kind": "tune"}, tmp_path)
    j.record(t)
    path = j.save()
    assert oct(path.stat().st_mode & 0o777) == "0o600" and not list(tmp_path.glob(".*tmp"))
    back = load_journal("tune", "t9", tmp_path)
    assert back is not None and back.trials == {"k9": t} and back.definition == {"kind": "tune"}
