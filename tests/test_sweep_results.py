"""Sweep results from a saved journal: the table, best and within-noise rows, the workload objective,
where MTP starts to pay along n-predict, rendering, saving the best (TOML + INI), the journal file,
and the CLI's errors."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tui.cli import main
from tui.core.options.settings import Settings, settings_json
from tui.core.lab.candidate import Candidate
from tui.core.sweep.definition import build_definition
from tui.core.sweep.results import build_table, save_best
from tui.core.lab.journal import Journal, JournalError, load_journal, open_journal
from tui.core.lab.trial import Samples, Trial


def ok_row(c: Candidate, tg: list[float], pp: list[float] | None = None, acc: float | None = None) -> Trial:
    pp = pp or [1000.0] * len(tg)
    return Trial(c.key, "ok", settings=settings_json(c.settings), n_predict=c.n_predict, acceptance=acc,
                 samples=Samples(list(pp), list(tg), [acc] * len(tg)), memory={"total_mib": 1234.5, "devices": {"CPU": 1234.5}})


def state_for(defn: Any, rows: dict[str, Trial], tmp: Path) -> Journal:
    st = Journal("sweep", defn.sweep_id, defn.to_json(), path=tmp / "s.json")
    for c in defn.grid():
        if c.duplicate_of is not None:
            st.record(Trial(c.key, "duplicate", reason=c.duplicate_reason))
        elif c.invalid is not None:
            st.record(Trial(c.key, "invalid", reason=c.invalid))
    for r in rows.values():
        st.record(r)
    return st


def test_table_best_and_within_noise(tmp_path: Path) -> None:
    defn = build_definition(Settings(model="/m.gguf"), ["ub=128,256,512,1024"], repeat=3)
    g = defn.grid()
    rows = {
        g[0].key: ok_row(g[0], [100, 101, 102]),
        g[1].key: ok_row(g[1], [99, 101, 103]),  # overlaps the best: within noise
        g[2].key: ok_row(g[2], [80, 81, 82]),  # clearly worse
    }
    t = build_table(defn, state_for(defn, rows, tmp_path))
    assert [r.status for r in t.rows] == ["ok", "ok", "ok", "pending"]
    assert t.best is t.rows[0] and t.best.vs_best == "best"
    assert [r.number for r in t.within_noise] == [2] and t.noise_known
    assert t.rows[2].vs_best == "worse"
    assert t.rows[0].tg is not None and t.rows[0].tg.spread == pytest.approx(0.02 / 1.01, rel=1e-3)
    text = t.render()
    assert "BEST" in text and "~best" in text and "Within the noise of the best: #2." in text
    assert "1 configuration(s) not run yet" in text
    d = t.to_json()
    assert d["best"]["number"] == 1 and d["within_noise"] == [2] and not d["complete"]
    assert {"settings", "status", "tg_tps", "pp_tps", "acceptance"} <= set(d["rows"][0])
    json.dumps(d)  # serialisable


def test_the_best_is_the_cheapest_row_within_the_noise_of_the_fastest(tmp_path: Path) -> None:
    """The sweep ranks as the tune does (`lab.ranking`): #2 leads on TG, #1 overlaps it and has the
    smaller micro-batch, so #1 is the best and #2 is within its noise; a row apart is not."""
    defn = build_definition(Settings(model="/m.gguf"), ["ub=256,512,1024"], repeat=3)
    g = defn.grid()
    rows = {g[0].key: ok_row(g[0], [99, 100, 102]), g[1].key: ok_row(g[1], [100, 101, 103]),
            g[2].key: ok_row(g[2], [97, 97.5, 98])}
    t = build_table(defn, state_for(defn, rows, tmp_path))
    assert t.best is t.rows[0] and [r.number for r in t.within_noise] == [2]
    assert t.rows[1].vs_best == "same" and t.rows[2].vs_best == "inconclusive"  # apart, but within the noise


def test_single_pass_rows_have_unknown_noise(tmp_path: Path) -> None:
    defn = build_definition(Settings(model="/m.gguf"), ["ub=128,256"], repeat=1)
    g = defn.grid()
    t = build_table(defn, state_for(defn, {g[0].key: ok_row(g[0], [100]), g[1].key: ok_row(g[1], [99])}, tmp_path))
    assert t.best is t.rows[0] and t.within_noise == [] and not t.noise_known
    assert t.rows[1].vs_best == "inconclusive"
    assert "Noise unknown" in t.render()


def test_workload_objective_uses_end_to_end_time_per_pass(tmp_path: Path) -> None:
    defn = build_definition(Settings(model="/m.gguf"), ["mtp=on,off"], repeat=3, objective="workload:10000,100")
    on, off = defn.grid()
    rows = {  # MTP on: faster TG, much slower PP -> loses on a long-prompt workload
        on.key: ok_row(on, [60, 61, 62], [500, 505, 510]),
        off.key: ok_row(off, [40, 41, 42], [1500, 1510, 1520]),
    }
    t = build_table(defn, state_for(defn, rows, tmp_path))
    assert t.best is not None and t.best.values["mtp"] == "off"
    assert t.best.score is not None and t.best.score.median == pytest.approx(10000 / 1510 + 100 / 41, rel=1e-6)
    assert "e2e s" in t.render()
    t2 = build_table(build_definition(Settings(model="/m.gguf"), ["mtp=on,off"], repeat=3, objective="tg"),
                     state_for(defn, rows, tmp_path))
    assert t2.best is not None and t2.best.values["mtp"] == "on"


def test_duplicates_show_their_originals_numbers(tmp_path: Path) -> None:
    defn = build_definition(Settings(model="/m.gguf"), ["mtp=on,off", "ctkd=f16,q8_0"], repeat=3)
    g = defn.grid()
    by = {(c.texts[0][1], c.texts[1][1]): c for c in g}
    rows = {c.key: ok_row(c, [90.0 + i, 91.0 + i, 92.0 + i]) for i, c in enumerate(g) if c.duplicate_of is None}
    t = build_table(defn, state_for(defn, rows, tmp_path))
    dup = next(r for r in t.rows if r.key == by[("off", "q8_0")].key)
    orig = next(r for r in t.rows if r.key == by[("off", "f16")].key)
    assert dup.status == "duplicate" and dup.same_as == orig.number and dup.tg_tps == orig.tg_tps
    assert f"= #{orig.number}" in t.render()


def test_where_mtp_starts_to_pay(tmp_path: Path) -> None:
    defn = build_definition(Settings(model="/m.gguf"), ["mtp=on,off", "n-predict=128,512,2048"], repeat=3)
    rows = {}
    tg_on = {128: 80.0, 512: 110.0, 2048: 140.0}
    for c in defn.grid():
        base = tg_on[c.n_predict] if c.settings.mtp_enabled else 100.0  # type: ignore[index]
        rows[c.key] = ok_row(c, [base - 1, base, base + 1])
    t = build_table(defn, state_for(defn, rows, tmp_path))
    (m,) = t.mtp_pays
    assert m.pays_from == 512
    assert [p.n_predict for p in m.points] == [128, 512, 2048]
    assert [p.verdict for p in m.points] == ["worse", "better", "better"]
    assert "pays from 512 generated tokens" in t.render()
    # Never pays.
    for c in defn.grid():
        if c.settings.mtp_enabled:
            rows[c.key] = ok_row(c, [79, 80, 81])
    t2 = build_table(defn, state_for(defn, rows, tmp_path))
    assert t2.mtp_pays[0].pays_from is None and "does not pay" in t2.render()


def test_save_best_writes_profile_and_ini_section(tmp_path: Path) -> None:
    defn = build_definition(Settings(model="/models/m.gguf", ctx_size=4096, parallel=1, port=9999),
                            ["mtp=on,off", "ub=256,512"], repeat=3)
    g = defn.grid()
    # ranges apart: the last row is the best outright (a row within its noise would win by being cheaper)
    rows = {c.key: ok_row(c, [100.0 + 10 * i, 101.0 + 10 * i, 102.0 + 10 * i]) for i, c in enumerate(g)}
    t = build_table(defn, state_for(defn, rows, tmp_path))
    ini = tmp_path / "presets.ini"
    ini.write_text("version = 1\n\n[other]\nmodel = /x.gguf\n")
    saved = save_best(t, "sweep-best", ini_path=ini)
    prof = tomllib.loads(saved.profile_path.read_text())
    assert prof["settings"]["ubatch_size"] == 512 and "spec_type" not in prof["settings"]
    text = ini.read_text()
    assert "[other]\nmodel = /x.gguf" in text and "[sweep-best]" in text and "ubatch-size = 512" in text
    assert "port" not in text.split("[sweep-best]")[1]
    # A name the INI cannot hold leaves both files alone.
    before = ini.read_text()
    with pytest.raises(Exception):
        save_best(t, "bad name;x", ini_path=ini)
    assert ini.read_text() == before
    broken = tmp_path / "broken.ini"
    broken.write_text("[x]\n  indented = 1\n")
    with pytest.raises(Exception, match="already refused"):
        save_best(t, "other-name", ini_path=broken)
    assert not saved.profile_path.with_name("other-name.toml").exists()
    empty = build_table(defn, state_for(defn, {}, tmp_path))
    with pytest.raises(ValueError, match="no measured configuration"):
        save_best(empty, "x", ini_path=ini)


def test_journal_file_round_trip_and_errors(tmp_path: Path) -> None:
    st = open_journal("sweep", "abc123", {"x": 1}, tmp_path)
    st.record(Trial("k1", "ok", samples=Samples([900.0], [12.5], [None]), warnings=["w"]))
    st.record(Trial("k2", "predicted_oom", reason="too big"))
    st.launches = 3
    path = st.save()
    assert path == tmp_path / "abc123.json" and not list(tmp_path.glob(".*tmp"))
    back = load_journal("sweep", "abc123", tmp_path)
    assert back is not None and back.trials["k1"].median("tg_tps") == 12.5 and back.launches == 3
    assert back.finished("k1") and back.finished("k2") and not back.finished("k2", try_anyway=True)
    assert not back.finished("k3")
    assert open_journal("sweep", "abc123", {}, tmp_path, fresh=True).trials == {}
    path.write_text("{not json")
    with pytest.raises(JournalError, match="delete it"):
        load_journal("sweep", "abc123", tmp_path)
    path.write_text(json.dumps({"sweep_id": "other", "format": 1}))
    with pytest.raises(JournalError, match="wrong id"):
        load_journal("sweep", "abc123", tmp_path)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["sweep", "--axis", "ub=256"], "needs a model"),
        (["sweep", "-m", "/m.gguf"], "at least one --axis"),
        (["sweep", "-m", "/m.gguf", "--axis", "ub=256", "--repeat", "0"], "--repeat 0"),
        (["sweep", "-m", "/m.gguf", "--axis", "bogus=1"], "not a llama-server option"),
        (["sweep", "-m", "/m.gguf", "--axis", "ub=256", "--objective", "fast"], "workload:IN,OUT"),
        (["sweep", "-m", "/nonexistent/m.gguf", "--axis", "ub=256"], "does not exist"),
    ],
)
def test_cli_errors_are_one_paragraph(argv: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and words in err and "Traceback" not in err
