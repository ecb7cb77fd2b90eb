"""The quality index (fast tier): what `measure` stored is found by the model's header digest without
running anything, newest first and bounded; a damaged index is ignored and rebuilt from the results,
never a traceback."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from tests.test_quality_measure import CAPTURED, _req, fake  # noqa: F401  (`fake` is a fixture)
from tui.core.quality import cache, index
from tui.core.quality.measure import measure
from tui.core.quality.models import model_id
from tui.core.quality.oracle import OracleInfo
from tui.core.quality.parse import parse_kld
from tui.core.quality.request import KvPair

FIGURES = parse_kld(CAPTURED.read_text(encoding="utf-8").splitlines())


def entry(digest: str = "d1", kv: str = "q8_0", at: float = 1.0, key: str = "", ref: str = "") -> index.Measured:
    k, _, v = kv.partition("/")
    return index.Measured(digest, f"/m/{digest}.gguf", KvPair(k, v or k), FIGURES, "the built-in corpus", "t1",
                          ref or digest, f"/m/{ref or digest}.gguf", ("-t", "2"), at, 3.5, key or f"{digest}-{kv}-{at}")


def measured(model: Path, kv: str, kld: float = 0.0081, at: float | None = None) -> index.Measured:
    """What `measure` records for `kv` on `model` (the captured Gemma figures, its mean KLD set)."""
    k, _, v = kv.partition("/")
    figures = dataclasses.replace(FIGURES, kld_mean=dataclasses.replace(FIGURES.kld_mean, value=kld))
    digest = model_id(model).digest
    return index.Measured(digest, str(model), KvPair(k, v or k), figures, "the built-in corpus", "t", digest,
                          str(model), (), at or time.time(), 1.0, f"{kv}-{kld}")


def test_measure_records_each_setting_and_the_lookup_finds_them_newest_first(
        fake: tuple[OracleInfo, Path, Path]) -> None:  # noqa: F811
    oracle, model, log = fake
    digest = model_id(model).digest
    assert index.lookup(digest) == []
    measure(_req(model, "q8_0"), oracle)
    measure(_req(model, "q4_0,q8_0/q4_0"), oracle)
    found = index.lookup(digest)
    assert [m.kv.label for m in found] == ["q8_0/q4_0", "q4_0", "q8_0"]
    first = found[-1]
    assert (first.ctx, first.chunks, first.model, first.reference) == (FIGURES.ctx, FIGURES.chunks, str(model), str(model))
    assert first.self_reference and first.figures.kld_mean == FIGURES.kld_mean and first.text.startswith("the built-in")
    assert "-t" not in first.flags  # the cache's key flags: threads change no figure
    runs = log.read_text().count("\n")
    measure(_req(model, "q8_0"), oracle)  # from the cache: nothing runs, and the index keeps one entry per result
    assert log.read_text().count("\n") == runs
    assert [m.kv.label for m in index.lookup(digest)] == ["q8_0/q4_0", "q4_0", "q8_0"]
    assert index.lookup("another model") == []


@pytest.mark.parametrize("damage", [b"{not json", b'{"format": 1, "entries": [{"k": "q8_0"}]}', b"[]",
                                    b'{"format": 99, "entries": []}', b"\x00" * 64])
def test_a_damaged_index_is_ignored_and_rebuilt_from_the_results(damage: bytes) -> None:
    kept = [entry(at=1.0), entry(kv="q4_0", at=2.0)]
    for m in kept:  # what measure writes: the result file carries its entry
        cache.write_result(m.key, {"figures": m.figures.to_json(), "entry": m.to_json()})
    cache.write_result("old-result", {"figures": FIGURES.to_json()})  # written before the index: no entry
    index.path().write_bytes(damage)
    assert [m.kv.label for m in index.lookup("d1")] == ["q4_0", "q8_0"]
    assert json.loads(index.path().read_text())["format"] == index.FORMAT  # written back whole
    assert [m.kv.label for m in index.lookup("d1")] == ["q4_0", "q8_0"]


def test_a_write_replaces_the_same_result_and_keeps_the_newest_within_the_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index, "MAX_ENTRIES", 3)
    for i in range(5):
        index.record(entry(kv=f"t{i}", at=float(i)))
    assert [m.kv.k for m in index.lookup("d1")] == ["t4", "t3", "t2"]
    index.record(entry(kv="t3", at=9.0, key="d1-t3-3.0"))  # the same result measured again
    assert [m.kv.k for m in index.lookup("d1")] == ["t3", "t4", "t2"]
    index.path().write_bytes(b"x" * (index.MAX_BYTES + 1))  # too large to be ours: rebuilt (no results here)
    assert index.lookup("d1") == []


def test_the_lookup_never_writes_where_nothing_was_measured() -> None:
    assert index.lookup("d1") == [] and not index.path().exists()


def test_newest_for_prefers_the_models_own_reference() -> None:
    own_old, other_new = entry(at=1.0), entry(at=2.0, ref="q8-file")
    assert index.newest_for([other_new, own_old], KvPair("q8_0", "q8_0")) is own_old
    assert index.newest_for([other_new], KvPair("q8_0", "q8_0")) is other_new
    assert index.newest_for([other_new], KvPair("q4_0", "q4_0")) is None
    assert index.settings_measured([entry(kv="q4_0", at=3), entry(at=2), entry(kv="q4_0", at=1)]) == [
        KvPair("q4_0", "q4_0"), KvPair("q8_0", "q8_0")]
