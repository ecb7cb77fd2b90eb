"""The tune's search space: fixed flags stay fixed, floors hold, MTP only where the model has it, the
context holds the workload, and the launch / memory keys group what they should (issue 21)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tui.core.options.settings import Settings
from tui.core.planning.largest_ctx import CTX_STEP
from tui.core.tune.space import (KV_QUALITY, PER_REQUEST_FIELDS, Floors, SpaceError, build_space, given_fields,
                                   needs_at_least, space_for_model)
from tui.core.tune.workload import Workload, from_requests, parse_shape, shape

WL = shape(2000, 500)
BASE = Settings(model="m.gguf")


def names(space) -> list[str]:
    return [a.name for a in space.axes]


def test_a_model_with_mtp_gets_both_sides_and_the_draft_axes() -> None:
    sp = build_space(BASE, WL, has_mtp=True)
    assert sp.branches == (False, True)
    assert names(sp) == ["draft-n-max", "ubatch", "batch", "kv", "draft-kv", "flash-attn"]
    n_max = next(a for a in sp.axes if a.name == "draft-n-max")
    assert n_max.values == (1, 2, 3, 4, 5, 6) and n_max.start == 3 and n_max.ordered and n_max.mtp_only
    on, off = sp.point({}, True), sp.point({}, False)
    assert on.mtp and on.settings.spec_type == ["draft-mtp"] and on.settings.spec_draft_n_max == 3
    assert not off.mtp and off.settings.spec_draft_n_max is None and off.settings.cache_type_k_draft is None
    assert "draft-n-max" not in dict(off.values) and [a.name for a in sp.axes_for(False)] == [
        "ubatch", "batch", "kv", "flash-attn"]
    assert len(sp.grid()) >= 48


def test_a_model_without_mtp_is_searched_with_mtp_off_only() -> None:
    sp = build_space(BASE, WL, has_mtp=False)
    assert sp.branches == (False,) and "draft-n-max" not in names(sp) and "draft-kv" not in names(sp)
    assert all(not c.mtp for c in sp.grid()) and any("no MTP" in n for n in sp.notes)
    with pytest.raises(SpaceError, match="no MTP"):
        build_space(Settings(model="m.gguf", spec_type=["draft-mtp"]), WL, has_mtp=False)


def test_mtp_presence_and_moe_layers_come_from_the_gguf_header() -> None:
    hp = SimpleNamespace(n_nextn=1, n_expert=0, n_layer=40, n_layer_dense_lead=0)
    assert space_for_model(BASE, SimpleNamespace(hparams=hp), WL).branches == (False, True)
    dense = SimpleNamespace(n_nextn=0, n_expert=0, n_layer=40, n_layer_dense_lead=0)
    assert space_for_model(BASE, SimpleNamespace(hparams=dense), WL).branches == (False,)
    moe = SimpleNamespace(n_nextn=1, n_expert=128, n_layer=48, n_layer_dense_lead=0)
    sp = space_for_model(BASE, SimpleNamespace(hparams=moe), WL)
    ax = next(a for a in sp.axes if a.name == "n-cpu-moe")
    assert ax.values == (0, 12, 24, 48) and ax.start == 0
    assert sp.point({}, False).settings.n_cpu_moe is None  # 0 experts on the CPU is the server default
    assert sp.point({"n-cpu-moe": 24}, False).settings.n_cpu_moe == 24
    assert "n-cpu-moe" not in names(space_for_model(Settings(model="m", cpu_moe=True), SimpleNamespace(hparams=moe), WL))


def test_flags_the_user_gave_are_fixed() -> None:
    fixed = Settings(model="m.gguf", ubatch_size=1024, cache_type_k="q8_0", threads=6, spec_type=["draft-mtp"],
                     fit_target=[512])
    assert {"ubatch_size", "cache_type_k", "threads", "spec_type", "fit_target"} <= given_fields(fixed)
    sp = build_space(fixed, WL, has_mtp=True)
    assert "ubatch" not in names(sp) and sp.branches == (True,) and sp.fit_fixed
    kv = next(a for a in sp.axes if a.name == "kv")
    assert kv.fields == ("cache_type_v",)  # -ctk is fixed: only -ctv is searched
    for c in sp.grid():
        s = c.settings
        assert s.ubatch_size == 1024 and s.cache_type_k == "q8_0" and s.threads == 6 and s.fit_target == [512]
        assert s.mtp_enabled
    off = build_space(Settings(model="m.gguf", spec_type=["none"]), WL, has_mtp=True)
    assert off.branches == (False,) and "draft-n-max" not in names(off)
    assert build_space(Settings(model="m.gguf", fit=False), WL, has_mtp=True).fit_fixed  # --fit off: no search


def test_floors_bound_the_kv_types() -> None:
    sp = build_space(BASE, WL, has_mtp=True, floors=Floors(kv="q8_0", draft_kv="q4_0"))
    for c in sp.grid(valid_only=False):
        s = c.settings
        assert KV_QUALITY[s.cache_type_k] >= KV_QUALITY["q8_0"] and KV_QUALITY[s.cache_type_v] >= KV_QUALITY["q8_0"]
        if c.mtp:
            assert KV_QUALITY[s.cache_type_k_draft] >= KV_QUALITY["q4_0"]
    strict = build_space(BASE, WL, has_mtp=True, floors=Floors(kv="f16", draft_kv="q8_0"))
    assert next(a for a in strict.axes if a.name == "kv").values == ("f16",)
    assert next(a for a in strict.axes if a.name == "draft-kv").values == ("f16", "q8_0")
    below = build_space(Settings(model="m.gguf", cache_type_k="q4_0"), WL, has_mtp=True)
    assert any("below the main KV floor" in n for n in below.notes)  # a fixed flag wins over the floor
    with pytest.raises(SpaceError, match="--kv-floor"):
        Floors(kv="q3")


def test_the_context_holds_the_longest_request() -> None:
    sp = build_space(BASE, shape(6000, 500), has_mtp=False)
    assert sp.ctx == 6656 and sp.ctx % CTX_STEP == 0 and sp.point({}, False).settings.ctx_size == 6656
    assert build_space(BASE, shape(100, 100), has_mtp=False, floors=Floors(min_ctx=16384)).ctx == 16384
    assert build_space(Settings(model="m", ctx_size=32768), WL, has_mtp=False).ctx == 32768
    with pytest.raises(SpaceError, match="cannot hold"):
        build_space(Settings(model="m", ctx_size=1024), WL, has_mtp=False)
    train = build_space(Settings(model="m", ctx_size=0), WL, has_mtp=False)
    assert train.ctx == 0 and train.point({}, False).settings.ctx_size == 0  # a fixed -c 0 stays
    hp = SimpleNamespace(n_nextn=0, n_expert=0, n_layer=40, n_layer_dense_lead=0, n_ctx_train=2048)
    with pytest.raises(SpaceError, match="training context"):
        space_for_model(Settings(model="m", ctx_size=0), SimpleNamespace(hparams=hp), WL)


def test_the_launch_key_groups_what_one_launch_serves() -> None:
    assert PER_REQUEST_FIELDS == frozenset()  # b11434 compiles the per-request speculative fields out
    sp = build_space(BASE, WL, has_mtp=True)
    grid = sp.grid()
    assert len({c.key for c in grid}) == len(grid)
    off = [c for c in grid if not c.mtp]
    assert len(off) == len({(c.value("ubatch"), c.value("batch"), c.value("kv"), c.value("flash-attn")) for c in off})
    a, b = sp.point({"draft-n-max": 2}, True), sp.point({"draft-n-max": 5}, True)
    assert a.key != b.key and a.memory_key == b.memory_key  # n-max needs a restart but no more memory
    assert sp.point({"ubatch": 1024}, True).memory_key != a.memory_key
    t = build_space(BASE, WL, has_mtp=False, threads=(4, 8))
    assert t.point({"threads": 4}, False).memory_key == t.point({"threads": 8}, False).memory_key


def test_the_one_validator_marks_what_the_server_would_refuse() -> None:
    sp = build_space(BASE, WL, has_mtp=True)
    bad = sp.point({"kv": "q8_0", "flash-attn": "off"}, False)
    assert bad.invalid and "needs flash attention" in bad.invalid
    assert bad not in sp.grid() and bad.key not in {c.key for c in sp.grid()}
    ub_over_b = build_space(BASE, WL, has_mtp=False, values={"ubatch": (4096,), "batch": (2048,)}).point({}, False)
    assert ub_over_b.invalid and "larger than batch-size" in ub_over_b.invalid


def test_memory_order_for_pruning_after_an_oom() -> None:
    sp = build_space(BASE, WL, has_mtp=True)
    small = sp.point({"ubatch": 512, "kv": "q8_0"}, False)
    big = sp.point({"ubatch": 1024, "kv": "f16"}, True)
    assert needs_at_least(big, small) and not needs_at_least(small, big)
    assert needs_at_least(small, small)
    mixed = sp.point({"ubatch": 2048, "kv": "q8_0"}, False)
    other = sp.point({"ubatch": 512, "kv": "f16"}, False)
    assert not needs_at_least(mixed, other) and not needs_at_least(other, mixed)  # neither is above the other
    fa_off = sp.point({"flash-attn": "off"}, False)
    assert needs_at_least(fa_off, sp.point({}, False))
    elsewhere = build_space(Settings(model="m", n_gpu_layers="20"), WL, has_mtp=True)
    assert not needs_at_least(elsewhere.point({"ubatch": 2048}, True), small)  # other fixed flags: not comparable


def test_near_starts_with_the_fewest_changes_and_the_least_memory() -> None:
    sp = build_space(BASE, WL, has_mtp=True)
    near = list(sp.near(sp.start(True), True))
    assert near[0].values == sp.point(sp.start(True), True).values
    assert near[1].value("ubatch") == 256 and sum(1 for k, v in near[1].values if v != dict(near[0].values)[k]) == 1


def test_unknown_axes_are_refused() -> None:
    with pytest.raises(SpaceError, match="unknown axis"):
        build_space(BASE, WL, has_mtp=True, values={"rope": (1,)})


def test_workload_shapes() -> None:
    w = parse_shape("12k:800")
    assert (w.in_tokens, w.out_tokens, w.longest) == (12000, 800, 12800) and w.ctx_needed() == 12800 and shape(12000, 801).ctx_needed() == 13056
    assert w.objective.text() == "workload:12000,800"
    assert w.seconds(1000.0, 50.0) == pytest.approx(12 + 16)
    for bad in ("12000", "a:b", "100:0"):
        with pytest.raises(ValueError, match="--workload"):
            parse_shape(bad)
    suite = from_requests("tasks", [(100, 400), (3000, 200), (500, 500)])
    assert suite.in_tokens == 1200 and suite.out_tokens == pytest.approx(1100 / 3) and suite.longest == 3200
    assert Workload.from_json(suite.to_json()) == suite
