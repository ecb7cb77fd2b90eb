"""Hypothesis strategies for `Settings` shared by the argv, INI and TOML round-trip tests.

Generated settings are *valid* (validation finds no errors), so a round trip that changes them is a
real conversion bug, not a garbage-in case.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings as hsettings, strategies as st

from tui.core.options import find_option
from tui.core.options import CACHE_TYPES, FLASH_ATTN, LOAD_MODES, SPEC_TYPES, SPLIT_MODES
from tui.core.options.settings import Settings
from tui.core.options.validate import errors, validate

_PATH_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+ "
#: Extra arguments in canonical spelling (as the importers write them back).
EXTRA_POOL: tuple[tuple[str, ...], ...] = (
    ("--temp", "0.7"),
    ("--top-k", "40"),
    ("--jinja",),
    ("--no-cont-batching",),
    ("--no-kv-unified",),
    ("--override-tensor", "exps=CPU"),
    ("--swa-full",),
    ("--ctx-checkpoints", "8"),
    ("--no-warmup",),
    ("--no-slots",),
)


def _text(min_size: int = 1) -> st.SearchStrategy[str]:
    return st.text(_PATH_CHARS, min_size=min_size, max_size=30).filter(lambda t: t == t.strip() and t != "")


def _opt(s: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | s


@st.composite
def settings_strategy(draw: st.DrawFn, *, ini: bool = False) -> Settings:
    """Valid Settings; `ini=True` keeps host/port/api-key at their defaults (presets never hold them)."""
    model = draw(_opt(_text()))
    hf = None if model else draw(_opt(st.builds(lambda u, m, q: f"{u}/{m}{q}", _text().filter(lambda t: "/" not in t and " " not in t),
                                               _text().filter(lambda t: "/" not in t and " " not in t),
                                               st.sampled_from(["", ":Q4_K_M", ":UD-Q4_K_XL"]))))
    batch = draw(_opt(st.integers(1, 8192)))
    ubatch = draw(_opt(st.integers(1, batch if batch is not None else 2048)))
    n_max = draw(_opt(st.integers(0, min(16, (batch if batch is not None else 2048) - 1))))  # a draft fits one batch
    n_min = draw(_opt(st.integers(0, n_max if n_max is not None else 3)))
    fa = draw(_opt(st.sampled_from(FLASH_ATTN)))
    unquant = ["f32", "f16", "bf16"]
    v_types = unquant if fa == "off" else list(CACHE_TYPES)
    split_mode = draw(_opt(st.sampled_from([m for m in SPLIT_MODES if m != "tensor"])))
    cpu_moe = draw(st.booleans())
    chunks = draw(st.lists(st.sampled_from(EXTRA_POOL), unique=True, max_size=3))
    s = Settings(
        model=model,
        hf_repo=hf if not model else None,
        ctx_size=draw(_opt(st.integers(0, 1 << 20))),
        batch_size=batch,
        ubatch_size=ubatch,
        parallel=draw(_opt(st.sampled_from([-1]) | st.integers(1, 64))),
        threads=draw(_opt(st.integers(1, 256))),
        threads_batch=draw(_opt(st.integers(1, 256))),
        spec_type=draw(st.lists(st.sampled_from([t for t in SPEC_TYPES if t != "none"]), unique=True, max_size=3)),
        spec_draft_n_max=n_max,
        spec_draft_n_min=n_min,
        spec_draft_p_min=draw(_opt(st.floats(0.0, 1.0, allow_nan=False))),
        cache_type_k=draw(_opt(st.sampled_from(CACHE_TYPES))),
        cache_type_v=draw(_opt(st.sampled_from(v_types))),
        cache_type_k_draft=draw(_opt(st.sampled_from(CACHE_TYPES))),
        cache_type_v_draft=draw(_opt(st.sampled_from(v_types))),
        flash_attn=fa,
        fit=draw(_opt(st.booleans())),
        fit_target=draw(st.lists(st.integers(0, 65536), max_size=1)),
        fit_ctx=draw(_opt(st.integers(0, 1 << 20))),
        n_gpu_layers=draw(_opt(st.sampled_from(["auto", "all"]) | st.integers(0, 200).map(str))),
        split_mode=split_mode,
        tensor_split=draw(st.lists(st.floats(0.0, 100.0, allow_nan=False, allow_infinity=False), max_size=1)),
        main_gpu=draw(_opt(st.just(0))),
        cpu_moe=cpu_moe,
        n_cpu_moe=None if cpu_moe else draw(_opt(st.integers(0, 100))),
        load_mode=draw(_opt(st.sampled_from(LOAD_MODES))),
        no_mmproj=draw(st.booleans()),
        cache_ram=draw(_opt(st.integers(-1, 1 << 16))),
        rpc=draw(st.lists(st.builds(lambda h, p: f"{h}:{p}", st.sampled_from(["127.0.0.1", "10.0.0.2", "gpu-box"]), st.integers(1, 65535)), max_size=2)),
        metrics=draw(st.booleans()),
        extra_args=[tok for chunk in chunks for tok in chunk],
    )
    if not ini:
        key = draw(_opt(st.text("abcdefXYZ0123456789-_", min_size=4, max_size=24)))
        s = replace(s, host=draw(st.sampled_from(["127.0.0.1", "::1", "localhost"]) | (st.just("0.0.0.0") if key else st.nothing())),
                    port=draw(_opt(st.integers(0, 65535))), api_key=key)
    return s


def test_pool_uses_canonical_spellings() -> None:
    """The importers write canonical spellings, so the pool must use them for round trips to hold."""
    for chunk in EXTRA_POOL:
        opt = find_option(chunk[0])
        assert opt is not None, chunk
        assert chunk[0] in (opt.canonical, opt.canonical_neg), chunk


@hsettings(max_examples=60, deadline=None)
@given(settings_strategy())
def test_generated_settings_are_valid(s: Settings) -> None:
    assert errors(validate(s, device_count=1, require_model=False)) == []
