"""Exact mode on a split model (`NAME-0000i-of-0000N.gguf`): the planner reads every part's header,
the dry run measures a sparse copy of every part (one cache folder, named so llama.cpp finds the
parts from the first), never the user's files, and the copy is cached, pruned and removed whole."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.helpers.residency import evict, resident_after
from tests.helpers.split_model import split_gguf
from tui.core.demo.tiny_model import PRESETS, write_tiny_model
from tui.core.options.argv import settings_from_argv
from tui.core.options.settings import Settings
from tui.core.planning import sparse
from tui.core.planning.exact import exact_plan
from tui.core.planning.gguf_meta import GGUFError
from tui.core.planning.gguf_reader import read_gguf


@pytest.fixture
def models(tmp_path: Path) -> tuple[Path, list[Path]]:
    whole = write_tiny_model(tmp_path / "tiny.gguf", PRESETS["tiny-mtp"])
    return whole, split_gguf(whole, tmp_path / "split" / "tiny.gguf", 3)


def _sets(root: Path) -> list[Path]:
    return sorted((root / "sparse").glob("*")) if (root / "sparse").exists() else []


# ---- the header, read whole ------------------------------------------------------------------


def test_a_split_model_is_read_whole_from_its_first_part(models: tuple[Path, list[Path]]) -> None:
    whole, parts = models
    a, b = read_gguf(whole), read_gguf(parts[0])
    assert [p.path for p in b.parts] == parts and not a.parts
    assert sorted((t.name, t.nbytes) for t in a.tensors) == sorted((t.name, t.nbytes) for t in b.tensors)
    assert a.hparams == b.hparams and a.total_bytes == b.total_bytes
    assert sparse.header_hash(b) != sparse.header_hash(read_gguf(whole))


def test_a_missing_part_or_a_later_part_as_m_is_one_sentence(models: tuple[Path, list[Path]]) -> None:
    _, parts = models
    with pytest.raises(GGUFError, match="must|first part"):
        read_gguf(parts[1])
    parts[2].unlink()
    with pytest.raises(GGUFError, match=r"tiny-00003-of-00003\.gguf: part 3 of the split model .* is missing"):
        read_gguf(parts[0])


# ---- the dry run -----------------------------------------------------------------------------


def test_exact_mode_on_a_split_model_matches_the_whole_file_and_reads_no_part(
        server_bin: Path, models: tuple[Path, list[Path]], tmp_path: Path) -> None:
    whole, parts = models
    meta = read_gguf(parts[0])  # before the eviction: the reader's 1 MiB window may read past a header
    metas = meta.parts  # each part's own data offset
    for p in parts:
        evict(p)
    assert all(resident_after(p, m.data_offset) == 0 for p, m in zip(parts, metas))
    argv = ["-c", "4096", "--spec-type", "draft-mtp"]
    root = tmp_path / "x"
    res = exact_plan(settings_from_argv(["-m", str(parts[0]), *argv]).settings, [], server_bin, meta=meta,
                     use_cache=False, root=root)
    assert res.available and res.sparse_copy, res.reason
    assert [resident_after(p, m.data_offset) for p, m in zip(parts, metas)] == [0, 0, 0]
    ref = exact_plan(settings_from_argv(["-m", str(whole), *argv]).settings, [], server_bin, use_cache=False,
                     root=tmp_path / "y")
    assert ref.available, ref.reason
    assert {d.key: d.components for d in res.plan.devices} == {d.key: d.components for d in ref.plan.devices}  # type: ignore[union-attr]
    assert res.fit == ref.fit
    (entry,) = _sets(root)  # one entry: a folder with every part, header copied, data a hole
    assert entry.is_dir() and sorted(f.name for f in entry.iterdir()) == [f"model-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for f, p, m in zip(sorted(entry.iterdir()), parts, metas):
        assert f.stat().st_size == p.stat().st_size and f.stat().st_blocks * 512 < p.stat().st_size
        assert f.read_bytes()[: m.data_offset] == p.read_bytes()[: m.data_offset]
    again = exact_plan(settings_from_argv(["-m", str(parts[0]), *argv]).settings, [], server_bin, use_cache=False, root=root)
    assert again.available and _sets(root) == [entry]  # reused


# ---- cached, pruned and removed whole ------------------------------------------------------------


def test_a_split_set_is_pruned_as_one_entry(models: tuple[Path, list[Path]], tmp_path: Path) -> None:
    root = tmp_path / "x"
    meta = read_gguf(models[1][0])
    first = sparse.sparse_copy(meta, root)
    entry = first.parent
    assert first.name == "model-00001-of-00003.gguf" and read_gguf(first).parts  # llama.cpp's rule finds the parts
    single = sparse.sparse_copy(read_gguf(models[0]), root)
    os.utime(entry, (1_000_000, 1_000_000))  # the set is the oldest
    assert sparse.prune_sparse(root, cap_bytes=0, keep=single) == [entry]
    assert not entry.exists() and _sets(root) == [single]
    stale = sparse.sparse_path(root, "f" * 24, meta).with_name("f" * 24 + ".split.99.tmp")
    (stale / "sub").mkdir(parents=True)
    os.utime(stale, (1000, 1000))
    assert sparse.prune_sparse(root, keep=single) == [stale] and not stale.exists()


def test_a_set_that_cannot_be_written_leaves_no_partial_set(models: tuple[Path, list[Path]], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    meta = read_gguf(models[1][0])
    real = sparse.write_sparse
    calls = []

    def full_at_second(header: bytes, size: int, dest: Path) -> Path:
        calls.append(dest)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(header, size, dest)

    monkeypatch.setattr(sparse, "write_sparse", full_at_second)
    res = exact_plan(Settings(model=str(models[1][0])), [], sys.executable, meta=meta, use_cache=False, root=tmp_path / "x")
    assert res.status == "unavailable" and "No space left" in res.reason
    assert len(calls) == 2 and _sets(tmp_path / "x") == []


@pytest.mark.parametrize("server", ["too-old", "cancelled"])
def test_a_failing_run_leaves_no_split_set(server: str, models: tuple[Path, list[Path]], tmp_path: Path) -> None:
    import threading

    body = {"too-old": "import sys\nprint('error: invalid argument: --log-jsonl', file=sys.stderr)\nsys.exit(1)",
            "cancelled": "import time\ntime.sleep(120)"}[server]
    fake = tmp_path / "fake-server"
    fake.write_text(f"#!{sys.executable}\n{body}\n")
    fake.chmod(0o755)
    cancel = threading.Event()
    res = exact_plan(Settings(model=str(models[1][0])), [], fake, use_cache=False, timeout_s=5, root=tmp_path / "x",
                     cancel=cancel, progress=lambda _m: server == "cancelled" and cancel.set())
    assert not res.available
    assert (tmp_path / "x" / "sparse").exists() and _sets(tmp_path / "x") == []
