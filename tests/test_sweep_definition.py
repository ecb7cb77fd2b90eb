"""Sweep definitions: axis parsing in llama-server spelling, objectives, validation skips, duplicate
collapsing, launch-sharing order and the stable sweep id."""

from __future__ import annotations

from pathlib import Path

import pytest

from tui.core.options.settings import Settings
from tui.core.sweep.axes import Objective, SweepDefinitionError, parse_axis, parse_objective
from tui.core.sweep.definition import build_definition


def base(tmp_path: Path | None = None) -> Settings:
    return Settings(model="/models/m.gguf", ctx_size=4096, parallel=1)


@pytest.mark.parametrize(
    ("text", "field", "values"),
    [
        ("ubatch-size=256,512", "ubatch_size", (256, 512)),
        ("ub=256,512", "ubatch_size", (256, 512)),
        ("ubatch_size=128", "ubatch_size", (128,)),
        ("cache-type-k-draft=f16,q8_0", "cache_type_k_draft", ("f16", "q8_0")),
        ("ctkd=f16,q8_0", "cache_type_k_draft", ("f16", "q8_0")),
        ("spec-draft-n-max=1,2,3", "spec_draft_n_max", (1, 2, 3)),
        ("ctx-size=4096,8192", "ctx_size", (4096, 8192)),
        ("c=4096", "ctx_size", (4096,)),
        ("spec-type=none,draft-mtp", "spec_type", (["none"], ["draft-mtp"])),
        ("spec-type=draft-mtp+ngram-mod", "spec_type", (["draft-mtp", "ngram-mod"],)),
        ("mtp=on,off", "spec_type", (["draft-mtp"], [])),
        ("n-predict=128,512", "n_predict", (128, 512)),
        ("n-predict=1k,4k", "n_predict", (1000, 4000)),
        ("fit-target=1024,2048/4096", "fit_target", ([1024], [2048, 4096])),
        ("flash-attn=on,off", "flash_attn", ("on", "off")),
        ("spec-draft-p-min=0,0.75", "spec_draft_p_min", (0.0, 0.75)),
    ],
)
def test_axis_names_in_llama_server_spelling(text: str, field: str, values: tuple[object, ...]) -> None:
    a = parse_axis(text)
    assert a.field == field
    assert a.values == values
    assert a.name == text.split("=")[0]


def test_option_without_a_settings_field_goes_to_extra_args() -> None:
    a = parse_axis("temp=0.5,0.7")
    assert a.field.startswith("extra:--temp")
    d = build_definition(base(), [a])
    assert [c.settings.extra_args for c in d.grid()] == [["--temp", "0.5"], ["--temp", "0.7"]]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("ubatch-size", "NAME=V1,V2"),
        ("ub=", "no values"),
        ("nonsense-flag=1,2", "not a llama-server option"),
        ("ub=256,256", "twice"),
        ("n-predict=0", "at least 1"),
        ("n-predict=abc", "whole number"),
        ("mtp=maybe", "on or off"),
        ("model=a.gguf,b.gguf", "one sweep per model"),
        ("port=1,2", "cannot be swept"),
        ("metrics=on", "cannot be swept"),
    ],
)
def test_bad_axes_are_explained(text: str, words: str) -> None:
    with pytest.raises(SweepDefinitionError) as e:
        parse_axis(text)
    assert words in str(e.value)
    assert "Traceback" not in str(e.value)


def test_same_option_twice_is_refused() -> None:
    with pytest.raises(SweepDefinitionError, match="same option"):
        build_definition(base(), ["ub=256", "ubatch-size=512"])
    with pytest.raises(SweepDefinitionError, match="twice"):
        build_definition(base(), ["ub=256", "ub=512"])


@pytest.mark.parametrize(
    ("text", "kind", "inp", "out"),
    [("tg", "tg", 0, 0), ("PP", "pp", 0, 0), ("workload:12k,800", "workload", 12000, 800),
     ("workload:12000,800", "workload", 12000, 800), ("workload:0,500", "workload", 0, 500)],
)
def test_objectives(text: str, kind: str, inp: int, out: int) -> None:
    o = parse_objective(text)
    assert (o.kind, o.in_tokens, o.out_tokens) == (kind, inp, out)


@pytest.mark.parametrize("text", ["speed", "workload:12k", "workload:a,b", "workload:100,0"])
def test_bad_objectives(text: str) -> None:
    with pytest.raises(SweepDefinitionError, match="workload:IN,OUT"):
        parse_objective(text)


def test_workload_score_is_end_to_end_time() -> None:
    o = Objective("workload", 12000, 800)
    assert o.score(tg_tps=40.0, pp_tps=1200.0) == pytest.approx(12000 / 1200 + 800 / 40)
    assert not o.higher_is_better
    assert o.score(tg_tps=None, pp_tps=1200.0) is None
    assert Objective("tg").score(50.0, 1.0) == 50.0


def test_invalid_combinations_are_skipped_with_the_validation_reason() -> None:
    d = build_definition(base(), ["mtp=on", "spec-draft-n-max=1,3", "spec-draft-n-min=0,2"])
    rows = {(c.value("spec-draft-n-max"), c.value("spec-draft-n-min")): c for c in d.grid()}
    bad = rows[(1, 2)]
    assert bad.invalid and "spec-draft-n-min (2) is greater than spec-draft-n-max (1)" in bad.invalid
    assert not bad.runnable
    assert all(c.runnable for k, c in rows.items() if k != (1, 2))
    d2 = build_definition(base(), ["ub=1024,4096"])  # ub > default batch 2048
    skipped = [c for c in d2.grid() if c.invalid]
    assert len(skipped) == 1 and "ubatch-size (4096) is larger than batch-size (2048)" in (skipped[0].invalid or "")


def test_draft_options_without_mtp_collapse_as_duplicates() -> None:
    d = build_definition(base(), ["mtp=on,off", "spec-draft-n-max=1,2,3", "ctkd=f16,q8_0"])
    grid = d.grid()
    assert len(grid) == 12
    off = [c for c in grid if c.value("mtp") == []]
    originals = [c for c in off if c.duplicate_of is None]
    assert len(originals) == 1
    dups = [c for c in off if c.duplicate_of is not None]
    assert len(dups) == 5 and all(c.duplicate_of == originals[0].key for c in dups)
    assert all("changes nothing without a speculative type" in (c.duplicate_reason or "")
               or "change nothing without a speculative type" in (c.duplicate_reason or "") for c in dups)
    assert "ctkd" in (dups[0].duplicate_reason or "") or "spec-draft-n-max" in (dups[0].duplicate_reason or "")
    # The launched settings of the MTP-off row carry no draft flags at all.
    assert originals[0].settings.spec_draft_n_max is None and originals[0].settings.cache_type_k_draft is None
    assert d.launch_count() == 1 + 6
    # With MTP off an n-min > n-max is no error: the flags are dropped, so it is a duplicate.
    d2 = build_definition(base(), ["mtp=off", "spec-draft-n-max=1", "spec-draft-n-min=0,2"])
    assert [c.invalid for c in d2.grid()] == [None, None]
    assert d2.grid()[1].duplicate_of == d2.grid()[0].key


def test_order_shares_launches_across_generation_lengths() -> None:
    d = build_definition(base(), ["n-predict=512,128", "ub=256,512", "mtp=on,off"])
    order = d.configurations()
    assert len(order) == 8
    keys = [c.launch_key for c in order]
    # Each launch's rows are adjacent, so each distinct server is started once.
    changes = sum(1 for a, b in zip(keys, keys[1:]) if a != b)
    assert changes == len(set(keys)) - 1 == 3
    for k in set(keys):
        lens = [c.n_predict for c in order if c.launch_key == k]
        assert lens == sorted(lens) == [128, 512]
    assert d.launch_count() == 4


def test_sweep_id_is_stable_and_ignores_objective_and_budget(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 100)
    s = Settings(model=str(model), ctx_size=4096)
    a = build_definition(s, ["ub=256,512", "mtp=on,off"], repeat=2)
    b = build_definition(s, ["ub=256,512", "mtp=on,off"], repeat=2, objective="workload:1k,100", budget_min=5)
    c = build_definition(Settings(model=str(model), ctx_size=4096, port=1234), ["ubatch-size=256,512", "mtp=on,off"], repeat=2)
    assert a.sweep_id == b.sweep_id == c.sweep_id  # and the port or the axis spelling does not matter
    assert [x.key for x in a.grid()] == [x.key for x in c.grid()]
    assert build_definition(s, ["ub=256,1024", "mtp=on,off"], repeat=2).sweep_id != a.sweep_id
    assert build_definition(s, ["ub=256,512", "mtp=on,off"], repeat=3).sweep_id != a.sweep_id
    assert build_definition(s, ["ub=256,512", "mtp=on,off"], repeat=2, n_predict=64).sweep_id != a.sweep_id
    before = a.sweep_id
    model.write_bytes(b"GGUF" + b"\0" * 200)  # another file at the same path
    assert build_definition(s, ["ub=256,512", "mtp=on,off"], repeat=2).sweep_id != before
    assert a.sweep_id == before  # computed once per definition


def test_bad_limits() -> None:
    with pytest.raises(SweepDefinitionError, match="--repeat 0"):
        build_definition(base(), ["ub=256"], repeat=0)
    with pytest.raises(SweepDefinitionError, match="--budget"):
        build_definition(base(), ["ub=256"], budget_min=0)
    assert build_definition(base(), ["ub=256"], budget_min=1.5).limits.budget_s == 90.0
