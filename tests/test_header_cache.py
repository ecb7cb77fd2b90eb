"""The parsed-header cache: a settled model is walked once, its plan unchanged; a fresh or changed file,
or a damaged entry, is read from the file again (never a stale header, never an error)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tui.core.planning import gguf_reader, header_cache
from tui.core.planning.gguf_reader import read_gguf
from tests.helpers.shapemodel import write_shape_model


def settle(path: Path, age_s: float = 3600.0) -> None:
    """Date the file's mtime back, as a model downloaded yesterday has it."""
    t = time.time() - age_s
    os.utime(path, (t, t))


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every header actually walked (parse_header called), in order."""
    seen: list[Path] = []
    real = gguf_reader.parse_header

    def counting(p, fh, size, *a, **kw):  # type: ignore[no-untyped-def]
        seen.append(Path(p))
        return real(p, fh, size, *a, **kw)

    monkeypatch.setattr(gguf_reader, "parse_header", counting)
    return seen


def test_a_settled_model_is_walked_once_and_reads_back_the_same(tmp_path: Path, walks: list[Path]) -> None:
    model = write_shape_model(tmp_path / "m.gguf")
    settle(model)
    first = read_gguf(model)
    second = read_gguf(model)
    assert walks == [model]  # the second read came from the cache
    assert second.kv == first.kv and second.tensors == first.tensors and second.hparams == first.hparams
    assert (second.version, second.file_size, second.alignment, second.data_offset, second.warnings) == \
        (first.version, first.file_size, first.alignment, first.data_offset, first.warnings)
    assert list(header_cache.cache_root().glob("*.json"))


def test_a_fresh_file_is_never_cached(tmp_path: Path, walks: list[Path]) -> None:
    model = write_shape_model(tmp_path / "m.gguf")  # just written: its mtime is now
    read_gguf(model)
    read_gguf(model)
    assert walks == [model, model]
    assert not header_cache.cache_root().exists() or not list(header_cache.cache_root().glob("*.json"))


def test_a_changed_file_is_read_again(tmp_path: Path, walks: list[Path]) -> None:
    model = write_shape_model(tmp_path / "m.gguf")
    settle(model)
    read_gguf(model)
    other = write_shape_model(tmp_path / "other.gguf")
    os.replace(other, model)  # a new file under the old name: another inode and mtime
    settle(model, 60.0)
    read_gguf(model)
    assert walks == [model, model]


def test_a_damaged_entry_is_a_miss(tmp_path: Path, walks: list[Path]) -> None:
    model = write_shape_model(tmp_path / "m.gguf")
    settle(model)
    want = read_gguf(model)
    entry = header_cache.entry_path(model, model.stat())
    assert entry is not None and entry.is_file()
    for junk in ("{not json", '{"format": 1, "version": "3"}', '{"format": 1, "version": 3, "file_size": 1, '
                 '"alignment": 32, "data_offset": 0, "kv": {"a": {"__gguf_array__": ["x", 1]}}, "tensors": [], "warnings": []}'):
        entry.write_text(junk)
        assert read_gguf(model).tensors == want.tensors
    assert len(walks) == 4
