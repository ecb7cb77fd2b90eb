"""Split a GGUF into parts the way llama.cpp's tools do (gguf-py's writer with `split_max_tensors`:
`NAME-0000i-of-0000N.gguf`, `split.no/count/tensors.count` in every part, the metadata in the first)."""

from __future__ import annotations

import math
from pathlib import Path

import gguf


def split_gguf(src: Path, dest: Path, parts: int) -> list[Path]:
    """Write `src` as `parts` files named after `dest` (`dest.stem-0000i-of-0000N.gguf`); return them."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    r = gguf.GGUFReader(src)
    arch = str(r.fields["general.architecture"].contents())
    w = gguf.GGUFWriter(dest, arch, split_max_tensors=math.ceil(len(r.tensors) / parts))
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), f.types[0], sub_type=sub)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    out = [dest.with_name(f"{dest.stem}-{i + 1:05d}-of-{parts:05d}.gguf") for i in range(parts)]
    assert all(p.is_file() for p in out), list(dest.parent.iterdir())
    return out
