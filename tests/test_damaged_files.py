"""A damaged local file (a tune or sweep journal, a cache entry, the results database) gives its documented
"absent" value or one error naming the file, never a traceback (issue 29, item 5).

Property-based: random JSON of any shape, random bytes, and a valid file with one value replaced by
random JSON (the damage that gets past a plain `isinstance(d, dict)`).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tui.core.planning import calibration, exact
from tui.core.planning.cache import load_calibration
from tui.core.remote import cache
from tui.core.results.store import Store, StoreError, open_store
from tui.core.lab.journal import Journal, JournalError, load_journal, open_journal
from tui.core.lab.journal_v1 import upgrade
from tui.core.lab.trial import Trial
from tui.core.tune.identity import check_section
from tui.core.lab.ranking import AbVerdict
from tui.core.tune.workload import Workload

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document (a key of an object, an index of a list)."""
    out = [prefix]
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        out += paths(v, (*prefix, k))
    return out


def replaced(doc: Any, where: tuple[Any, ...], value: Any) -> Any:
    if not where:
        return value
    doc = json.loads(json.dumps(doc))
    node = doc
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = value
    return doc


@st.composite
def damaged(draw: st.DrawFn, valid: Any) -> bytes:
    """Bytes of a damaged copy of `valid`: random JSON, random bytes, or `valid` with one value replaced."""
    how = draw(st.sampled_from(["json", "bytes", "one value"]))
    if how == "bytes":
        return draw(st.binary(max_size=64))
    if how == "json":
        return json.dumps(draw(JSON)).encode()
    where = draw(st.sampled_from(paths(valid)))
    return json.dumps(replaced(valid, where, draw(JSON))).encode()


#: A tune's journal as the format-1 code wrote it (see test_lab_journal), and as this version writes it.
TID = "tune-3f42e3b88a55"
VALID_TUNE_V1 = json.loads((Path(__file__).parent / "data" / "journal" / "tune-v1.json").read_text())
VALID_TUNE = Journal.from_json(upgrade(VALID_TUNE_V1, "tune")).to_json()


@SETTINGS
@given(data=damaged(VALID_TUNE) | damaged(VALID_TUNE_V1))
def test_a_damaged_journal_is_refused_in_one_sentence(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / f"{TID}.json"
    path.write_bytes(data)
    try:
        j = load_journal("tune", TID, tmp_path)
    except JournalError as e:
        assert str(path) in str(e) and "\n" not in str(e)
        return
    assert j is not None and all(isinstance(t, Trial) for t in j.trials.values())


@SETTINGS
@given(data=damaged(VALID_TUNE) | damaged(VALID_TUNE_V1))
def test_a_damaged_tune_journal_is_refused_when_opened_not_midway(tmp_path: Path, data: bytes) -> None:
    (tmp_path / f"{TID}.json").write_bytes(data)
    try:
        j = open_journal("tune", TID, {}, tmp_path, check_more=check_section)
    except JournalError as e:
        assert str(tmp_path / f"{TID}.json") in str(e) and "\n" not in str(e)
        return
    for t in j.trials.values():  # what a resumed tune reads: it works on what it got
        t.median("e2e_s"), t.measured
    if j.tune.workload is not None:
        Workload.from_json(j.tune.workload)
    for a in j.tune.ab:
        AbVerdict.from_json(a.verdict)


@pytest.mark.parametrize("doc", [VALID_TUNE, VALID_TUNE_V1], ids=["version 2", "format 1"])
def test_the_valid_tune_journal_round_trips(tmp_path: Path, doc: dict[str, Any]) -> None:
    (tmp_path / f"{TID}.json").write_text(json.dumps(doc))
    j = open_journal("tune", TID, {}, tmp_path, check_more=check_section)
    assert list(j.trials) == ["k1", "k2"] and j.tune.workload is not None and j.tune.prompt == "hello"
    assert j.tune.ab_verdict("k1", "k2", 2) is not None


LISTING = {"key": "ep|r", "commit": "c" * 40, "files": [{"path": "a-Q4_K_M.gguf", "size": 123}], "fetched_at": 1.0}


@SETTINGS
@given(data=damaged(LISTING))
def test_a_damaged_listing_is_absent_or_of_the_shape_fetch_reads(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "listings" / f"{cache._digest('ep|r')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    rec = cache.load_listing("ep|r", tmp_path)
    if rec is not None:  # what remote/fetch.py does with it
        assert isinstance(rec["commit"], str) and float(rec.get("fetched_at", 0)) >= float("-inf")
        assert all(isinstance(f["path"], str) and int(f["size"]) == f["size"] for f in rec["files"])


ENTRY = {"key": "url|u", "names": ["m.gguf"], "urls": ["http://h/m.gguf"], "etags": ["e"], "sizes": [64],
         "header_sizes": [32], "fetched_at": 1.0}


@SETTINGS
@given(data=damaged(ENTRY))
def test_a_damaged_header_entry_is_a_miss(tmp_path: Path, data: bytes) -> None:
    entry = tmp_path / "headers" / cache._digest("url|u")
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "m.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    (entry / "entry.json").write_bytes(data)
    hit = cache.lookup("url|u", tmp_path)
    assert hit is None or (hit.path.parent == entry and hit.total_size == 64)


def test_a_header_entry_naming_a_file_outside_its_folder_is_a_miss(tmp_path: Path) -> None:
    entry = tmp_path / "headers" / cache._digest("url|u")
    entry.mkdir(parents=True)
    (tmp_path / "secret").write_bytes(b"x" * 64)
    (entry / "entry.json").write_text(json.dumps({**ENTRY, "names": ["../../secret"]}))
    assert cache.lookup("url|u", tmp_path) is None
    (entry / "m.gguf").write_bytes(b"\0" * 64)
    (entry / "entry.json").write_text(json.dumps(ENTRY))
    assert cache.lookup("url|u", tmp_path) is not None  # the same record, inside: found


EXACT = {"components": {"CUDA0": {"weights": 1.0}}, "fit": {"action": "none", "message": "", "changed": False,
         "n_ctx": None, "n_gpu_layers": None, "tensor_split": [], "overrides": []}, "warnings": [], "seconds": 1.0,
         "runs": 1, "sources": {"CUDA0": {"source": "exact", "why": "", "by_formula": [], "weights_buffers_mib": {}}}}


@SETTINGS
@given(data=damaged(EXACT))
def test_a_damaged_exact_entry_is_a_miss(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "k.json").write_bytes(data)
    got = exact._load(tmp_path, "k")
    assert got is None or set(got) >= set(EXACT)


def test_the_valid_exact_entry_is_read(tmp_path: Path) -> None:
    (tmp_path / "k.json").write_text(json.dumps(EXACT))
    assert exact._load(tmp_path, "k") == EXACT


CALIBRATION = calibration.Calibration("CPU", "d", ["p", 1, 2], {"main": calibration.GraphFit(
    True, (1.0, 2.0), 3.0, 1.0, None, (1.0, 2.0, 3.0, 4.0, 5.0, 6.0), 9, 0.01)}, 1.0, 9, [], {"main": 1.0}).to_dict()


@SETTINGS
@given(data=damaged(CALIBRATION))
def test_a_damaged_calibration_is_a_miss(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "c.json").write_bytes(data)
    got = load_calibration(tmp_path / "c.json")
    if got is not None:  # what a plan then does with it: every graph's terms at some features
        for g in got.graphs.values():
            assert g.floor is None or len(g.floor) == 6
            assert g.ffn is None or len(g.ffn) == 2


def test_the_valid_calibration_is_read(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text(json.dumps(CALIBRATION))
    assert load_calibration(tmp_path / "c.json") is not None


@SETTINGS
@given(data=st.binary(min_size=1, max_size=256))
def test_a_results_database_that_is_no_database_is_refused_in_one_sentence(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "results.sqlite"
    path.write_bytes(b"not sqlite " + data)
    with pytest.raises(StoreError) as e:
        open_store(path).close()
    assert str(path) in str(e.value)


@SETTINGS
@given(column=st.sampled_from(["settings_json", "summary_json", "warnings_json", "created_at"]),
       value=JSON.map(json.dumps) | st.text(max_size=12))
def test_a_damaged_run_is_refused_in_one_sentence(tmp_path: Path, column: str, value: str) -> None:
    path = tmp_path / "results.sqlite"
    with Store(path) as s:
        rid = s.begin_run(suite="quick", settings={"n_ctx": 4096})
        s.finish_run(rid, "ok", summary={"tg_tps": None})
    con = sqlite3.connect(path)
    con.execute(f"UPDATE runs SET {column} = ? WHERE id = ?", (value, rid))
    con.commit()
    con.close()
    with Store(path) as s:
        try:
            rows = s.list_runs()
            got = s.get(rid)
        except StoreError as e:
            assert str(path) in str(e)
            return
        assert rows[0].settings is None or isinstance(rows[0].settings, dict)
        assert got is not None and isinstance(got.warnings, list)
    path.unlink()
