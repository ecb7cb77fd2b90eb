"""Settings <-> one preset section, importing real-world presets, and the safe section writer."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests.test_settings_strategies import settings_strategy
from tui.core.presets import (
    IniWriteError,
    parse_preset,
    read_preset,
    replace_section_text,
    section_text,
    settings_from_section,
    settings_to_entries,
    settings_to_ini,
    write_section,
)
from tui.core.options.settings import Settings

DATA = Path(__file__).parent / "data" / "ini"

EXISTING = (
    "version = 1\n"
    "\n"
    "; global options for every model instance\n"
    "[*]\n"
    "c = 4096 ; comment kept\n"
    "t = 1\n"
    "\n"
    "[tiny-mtp]\n"
    "model = models/old.gguf\n"
    "spec-type = draft-mtp\n"
    "load-on-startup = true\n"
    "\n"
    "; the model without MTP, for comparisons\n"
    "[tiny-nomtp]\n"
    "model = models/tiny-qwen35-nomtp.gguf\n"
    "fit = off\n"
)


@hsettings(max_examples=150, deadline=None)
@given(settings_strategy(ini=True))
def test_ini_section_round_trip(s: Settings) -> None:
    text = settings_to_ini("m", s)
    pf = parse_preset(text)
    assert pf.server_accepts, [str(p) for p in pf.problems]
    assert not [p for p in pf.problems if p.severity == "error"], [str(p) for p in pf.problems]
    back, preset_only, notes = settings_from_section(pf, "m")
    assert back == s, text
    assert preset_only == {} and notes == []


def test_real_world_preset_import() -> None:
    """A guide's preset with mmap, hf, n-gpu-layers = all, no-mmproj and tensor-split = 1,1."""
    pf = read_preset(DATA / "realworld.ini")
    assert not pf.server_accepts  # mmap is gone from b11434
    (problem,) = pf.problems
    assert (problem.line, problem.key, problem.severity) == (5, "mmap", "error")
    s, preset_only, notes = settings_from_section(pf, "qwen3.6-35b-mtp")
    assert s.hf_repo == "unsloth/Qwen3.6-35B-A3B-MTP-GGUF:UD-Q4_K_XL" and s.model is None
    assert s.n_gpu_layers == "all"
    assert s.no_mmproj is True
    assert s.tensor_split == [1.0, 1.0]
    assert s.load_mode == "mmap"  # the removed key, imported as its replacement
    assert (s.flash_attn, s.parallel, s.cache_ram, s.ctx_size) == ("on", 1, 0, 65536)  # from [*]
    assert (s.cache_type_k, s.cache_type_v, s.cache_type_k_draft, s.cache_type_v_draft) == ("q8_0",) * 4
    assert s.mtp_enabled and s.spec_draft_n_max == 3
    assert s.extra_args == ["--jinja"]
    assert any("mmap = 1 (line 5) was removed" in n.message for n in notes)
    # exported again, the section is one the server accepts: load-mode instead of mmap
    out = parse_preset(settings_to_ini("qwen", s))
    assert out.server_accepts and out.ok
    assert "load-mode = mmap" in settings_to_ini("qwen", s)


def test_replace_keeps_everything_else(tmp_path: Path) -> None:
    path = tmp_path / "models.ini"
    path.write_text(EXISTING)
    os.chmod(path, 0o640)
    s = Settings(model="/models/new.gguf", ctx_size=2048, spec_type=["draft-mtp"], spec_draft_n_max=2, metrics=False)
    res = write_section(path, "tiny-mtp", s)
    new = path.read_text()
    assert res.replaced and res.backup == tmp_path / "models.ini.bak"
    assert res.backup.read_text() == EXISTING
    head = EXISTING[: EXISTING.index("[tiny-mtp]")]
    tail = EXISTING[EXISTING.index("\n; the model without MTP") :]
    assert new == head + (
        "[tiny-mtp]\nmodel = /models/new.gguf\nctx-size = 2048\nspec-type = draft-mtp\n"
        "spec-draft-n-max = 2\nload-on-startup = true\n"  # its preset-only key survives
    ) + tail
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.ini", "models.ini.bak"]  # no temp file left
    back, _, _ = settings_from_section(read_preset(path), "tiny-mtp")
    assert back.model == "/models/new.gguf" and back.ctx_size == 2048 and back.threads == 1  # [*] cascades


def test_append_new_section_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "crlf.ini"
    original = (DATA / "crlf.ini").read_bytes()  # CRLF, no newline at the end
    path.write_bytes(original)
    write_section(path, "c", Settings(model="/models/c.gguf", metrics=False))
    data = path.read_bytes()
    assert data.startswith(original)
    assert data[len(original) :] == b"\r\n\r\n[c]\r\nmodel = /models/c.gguf\r\n"
    assert [m.name for m in read_preset(path).models] == ["a", "b", "c"]


def test_new_file_and_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "new.ini"
    res = write_section(path, "m", Settings(model="/m.gguf", metrics=True))
    assert res.backup is None and path.read_text() == "version = 1\n\n[m]\nmodel = /m.gguf\nmetrics = true\n"
    dup = "[m]\nmodel = a\n\n[x]\nmodel = x\n\n[m]\nctx-size = 1\n"
    text, replaced, removed = replace_section_text(dup, "m", section_text("m", [("model", "b")]))
    assert (replaced, removed) == (True, 1)
    assert text == "[m]\nmodel = b\n\n[x]\nmodel = x\n\n"


@pytest.mark.parametrize(
    ("settings", "name", "fragment"),
    [
        (Settings(model="/models/a;b.gguf"), "m", "cuts preset values at ';' and '#'"),
        (Settings(model="/models/#1.gguf"), "m", "cuts preset values"),
        (Settings(model="/m.gguf", extra_args=["--frobnicate"]), "m", "not a llama-server b11434 option"),
        (Settings(model="/m.gguf", extra_args=["--no-mmap"]), "m", "use --load-mode none"),
        (Settings(model="/m.gguf", extra_args=["-ot", "a=CPU", "-ot", "b=CPU"]), "m", "appears twice"),
        (Settings(model="/m.gguf", spec_draft_n_min=5), "m", "greater than spec-draft-n-max"),
        (Settings(model="/m.gguf", cache_type_v="q4_0", flash_attn="off"), "m", "needs flash attention"),
        (Settings(model=" /m.gguf"), "m", "blanks would be dropped"),
        (Settings(model="/m.gguf"), "bad]name", "cannot be written"),
        (Settings(model="/m.gguf"), "repo:q4_k_m", "would rename"),
        (Settings(model="/m.gguf"), "*", "[*] holds options"),
    ],
)
def test_refuses_what_the_server_would_reject(tmp_path: Path, settings: Settings, name: str, fragment: str) -> None:
    path = tmp_path / "p.ini"
    path.write_text(EXISTING)
    with pytest.raises(IniWriteError) as e:
        write_section(path, name, settings)
    assert fragment in str(e.value)
    assert path.read_text() == EXISTING and not (tmp_path / "p.ini.bak").exists()


def test_refuses_to_touch_a_file_the_server_rejects(tmp_path: Path) -> None:
    path = tmp_path / "bad.ini"
    path.write_text("[a]\nmodel = x\n  ctx-size = 1\n")
    with pytest.raises(IniWriteError, match="already refused by llama-server"):
        write_section(path, "b", Settings(model="/m.gguf"))


def test_api_key_host_port_never_written() -> None:
    s = Settings(model="/m.gguf", api_key="s3cret", host="0.0.0.0", port=9000)
    keys = [k for k, _ in settings_to_entries(s)]
    assert keys == ["model", "metrics"]


_SECTION = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
_COMMENT = st.sampled_from(["", "; a comment\n", "# another\n", "\n"])


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(_SECTION, min_size=1, max_size=5, unique=True), comments=st.lists(_COMMENT, min_size=6, max_size=6),
       pick=st.integers(0, 10), new=settings_strategy(ini=True))
def test_write_changes_only_the_target_section(tmp_path: Path, names: list[str], comments: list[str], pick: int, new: Settings) -> None:
    blocks = [f"{comments[i]}[{n}]\nmodel = /models/{n}.gguf\nctx-size = {100 + i}\n" for i, n in enumerate(names)]
    original = "version = 1\n" + "".join(blocks) + comments[-1]
    target = names[pick % len(names)] if pick < 8 else "brand-new"
    path = tmp_path / f"{target}-{pick}.ini"
    path.write_text(original)
    write_section(path, target, new, backup=False)
    result = path.read_text()
    new_block = section_text(target, settings_to_entries(new, target))
    if target == "brand-new":
        assert result.startswith(original) and result.endswith(new_block)
    else:
        old_block = f"[{target}]\nmodel = /models/{target}.gguf\nctx-size = {100 + names.index(target)}\n"
        assert result.replace(new_block, old_block, 1) == original
    pf = read_preset(path)
    back, _, _ = settings_from_section(pf, target)
    assert back == replace(new)
