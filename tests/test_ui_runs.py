"""The runs controller: the runs screen's one door to the results store. Listing, comparing and
exporting answer a result or one sentence, never a traceback, also when the store cannot be opened."""

from __future__ import annotations

from pathlib import Path

from tui.core.results.store import Store, StoreError
from tui.ui.runs.controller import RunsController, export
from tui.ui.runs.views import RunRow

REQ = {"seq": 0, "prompt": "p", "kind": "chat", "repeat": 0, "timings": {"predicted_per_second": 30.0}}


def _stored(store: Store, tg: float, mtp: bool) -> int:
    run_id = store.begin_run(suite="tasks", mtp=mtp, settings={"ubatch_size": 512, "spec_draft_n_max": 2 if mtp else None})
    store.add_request(run_id, REQ)
    store.finish_run(run_id, "ok", summary={"tg_tps_median": tg, "pp_tps_median": 400.0, "n_requests": 1})
    return run_id


def test_lists_compares_and_exports_stored_runs(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        off, on = _stored(store, 20.0, False), _stored(store, 30.0, True)
        runs = RunsController(lambda: store)
        rows, error = runs.list_runs()
        assert error is None and [r.run_id for r in rows] == [on, off]
        assert rows[0] == RunRow(on, rows[0].when, "MTP n-max 2 · ub 512", 30.0, 400.0, None, 1)
        table, note, error = runs.compare(str(off), str(on))  # the screen's ids may be strings
        assert error is None and table and {r.verdict for r in table} <= {"better", "worse", "same", "inconclusive"}
        assert "changed: spec_draft_n_max None → 2" in note  # B judged against A, A's settings first
        path, error = export(store, (off, on), "csv", tmp_path / "out")
        assert error is None and path is not None and Path(path).read_text(encoding="utf-8").count("\n") >= 3


def test_a_missing_run_or_store_is_one_sentence(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        runs = RunsController(lambda: store)
        assert runs.compare(1, 2)[2] and runs.export((9,), "md")[1]

    def broken() -> Store:
        raise StoreError("the results database /x/results.sqlite is damaged")

    runs = RunsController(broken)
    assert runs.list_runs() == ((), "the runs could not be read: the results database /x/results.sqlite is damaged")
    assert runs.compare(1, 2) == ((), "", "the results database /x/results.sqlite is damaged")
    assert runs.export((1,), "json") == (None, "the results database /x/results.sqlite is damaged")
