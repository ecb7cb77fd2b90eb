"""The model a tune reads (`TuneModel`), and the files it chooses among: `-m A.gguf -m B.gguf` or `-m FOLDER`, quants of one model.

Why here and not in the server's flags: llama-server loads one model, so several `-m` are no
llama-server thing; the tune reads them (with the one argv reader) before the flags go to the one
validator, which then sees one `-m`. A folder gives the model GGUFs in it by llama.cpp's own rules
(`remote.hub.is_model_file`: no projector, imatrix or draft sidecar) and of a split set only its
first part (llama-server loads the rest from it); a split set's size is all its parts'.

The reference each file's output is measured against is `--ref`, else the largest file: of quants of
one model, the one with the most bits per weight. Every file must score the same tokens as the
reference (its tokenizer and vocabulary: `quality.models.ModelId.same_vocabulary`), else the KL
divergence would compare token ids that mean different things; another model is refused in one
sentence before anything runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tui.core.options.reader import values, without
from tui.core.quality.models import ModelError, check_reference, model_id
from tui.core.remote.hub import is_model_file, split_info


@dataclass(frozen=True)
class TuneModel:
    """`path`: the GGUF to read the header of; `remote`: it is a remote model's header copy, which the
    planner is pointed at in the launches' place (`header`); `notes` for the report."""

    path: Path
    remote: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def header(self) -> Path | None:
        return self.path if self.remote else None


def split_models(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(every `-m` value in order, `args` without them), as llama-server's argv rules read them."""
    return values(args, "--model"), without(args, "--model")


def is_file_axis(models: Sequence[str]) -> bool:
    """Several `-m`, or one that names a folder: the model file is an axis of the tune."""
    return len(models) > 1 or any(Path(m).expanduser().is_dir() for m in models)


def _first_part(path: Path) -> bool:
    info = split_info(path.name)
    return info is None or info.count <= 1 or info.index == 1


def total_bytes(path: Path) -> int:
    """The file's size, with every other part of its split set (`-00001-of-0000N`) beside it."""
    info = split_info(path.name)
    if info is None or info.count <= 1:
        return path.stat().st_size
    parts = [path.with_name(f"{info.prefix.rsplit('/', 1)[-1]}-{i:05d}-of-{info.count:05d}.gguf")
             for i in range(1, info.count + 1)]
    return sum(p.stat().st_size for p in parts if p.is_file())


def model_files(given: Sequence[str]) -> list[Path]:
    """The files `-m` named (folders expanded), each once, the largest first; ModelError naming a `-m`
    that is neither a GGUF file nor a folder holding one."""
    out: dict[Path, None] = {}
    for g in given:
        p = Path(g).expanduser()
        if p.is_dir():
            found = sorted(f for f in p.glob("*.gguf") if f.is_file() and is_model_file(f.name) and _first_part(f))
            if not found:
                raise ModelError(f"-m {g}: the folder holds no model GGUF (projectors, imatrix files and later "
                                 "parts of a split model are not models).")
            out.update(dict.fromkeys(f.resolve() for f in found))
        elif p.is_file():
            out[p.resolve()] = None
        else:
            raise ModelError(f"-m {g}: no such file or folder.")
    return sorted(out, key=lambda f: (-total_bytes(f), f.name))


def reference(files: Sequence[Path], ref: str | None) -> Path:
    """`--ref`, else the largest file (`model_files` puts it first)."""
    if ref:
        p = Path(ref).expanduser()
        if not p.is_file():
            raise ModelError(f"--ref {ref}: no such file.")
        return p.resolve()
    return files[0]


def check_same_model(files: Sequence[Path], ref: Path) -> None:
    """ModelError (`quality.models.check_reference`: one sentence naming both files) when a file's
    tokens are not the reference's."""
    want = model_id(ref, "--ref")
    for f in files:
        check_reference(model_id(f), want)
