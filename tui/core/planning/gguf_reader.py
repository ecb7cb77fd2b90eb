"""Header-only GGUF reader: hyperparameters and the tensor table, without touching tensor data.

The planner needs every tensor's type and byte size and the handful of hyperparameters that size the
KV cache and recurrent state. Reading only the header keeps this instant even for a 20 GB file (the
header of a real Qwen3.6-35B-A3B GGUF is a few MB, mostly the tokenizer, which is skipped, not
decoded). Parsed with `struct` over a growing in-memory window; the file is never memory-mapped.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

from tui.core.planning import header_cache
from tui.core.planning.header_cache import Header
from tui.core.planning.gguf_meta import GGML_TYPES, ArrayInfo, GGUFError, GGUFMeta, SplitPart, TensorInfo
from tui.core.planning.hparams import hparams_from_kv

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# value types (gguf spec)
_U8, _I8, _U16, _I16, _U32, _I32, _F32, _BOOL, _STR, _ARR, _U64, _I64, _F64 = range(13)
_SCALAR: dict[int, struct.Struct] = {
    _U8: struct.Struct("<B"), _I8: struct.Struct("<b"), _U16: struct.Struct("<H"), _I16: struct.Struct("<h"),
    _U32: struct.Struct("<I"), _I32: struct.Struct("<i"), _F32: struct.Struct("<f"), _BOOL: struct.Struct("<?"),
    _U64: struct.Struct("<Q"), _I64: struct.Struct("<q"), _F64: struct.Struct("<d"),
}
_Q = struct.Struct("<Q")
_I = struct.Struct("<I")
#: arrays longer than this are skipped (only their length is kept): token lists, merges, scores.
MAX_KEPT_ARRAY = 4096
#: GGML_MAX_DIMS
MAX_DIMS = 4
#: GGML_MAX_NAME (names are shorter)
MAX_NAME = 64
#: The most header bytes (key/values, tensor table, padding) any GGUF may take before mtp-tune stops
#: reading it, local or remote. Why 64 MiB: the largest real headers measured are vocabularies,
#: llama.cpp's own ggml-vocab-gemma-4.gguf (a 262k-token tokenizer: 15.0 MiB) and Qwen3.6-35B-A3B's
#: (248k tokens plus 753 tensor infos: 11.8 MiB); four times the largest leaves room for bigger
#: vocabularies while a damaged or hostile length field (llama.cpp itself accepts a 1 GiB string,
#: gguf.cpp GGUF_MAX_STRING_LENGTH) can never make a plan buffer gigabytes.
MAX_HEADER_BYTES = 64 << 20
#: Claimed counts refused before anything is read. The GGUF spec caps a key at 65535 bytes; llama.cpp
#: caps nothing below SIZE_MAX for the counts, so these are mtp-tune's, each far above real files
#: (about 50 keys; a few thousand tensors, 47k for 256 unmerged experts on 61 layers) and low enough
#: that the parsed table stays tens of MB of Python objects, not gigabytes.
MAX_KEY_NAME = 65535
MAX_KEYS = 1 << 16
MAX_TENSORS = 1 << 17
#: small arrays are kept as lists (per-layer head counts and the like) up to this many values in all;
#: past it every array is recorded by its length only, so a header of many small arrays stays small
MAX_KEPT_VALUES = 1 << 18
_LAYER = re.compile(r"^blk\.(\d+)\.")


def local_readahead(want: int, have: int) -> int:
    """How much to read when the parser needs `want` more bytes and holds `have`: a local file
    doubles its window (few reads, and the page cache makes over-reading cheap)."""
    return max(want, 1 << 20, have)


class _Window:
    """A growing read-ahead buffer over the header. Every length is checked against the file size
    before anything is read or allocated, so a damaged length field is a GGUFError, not a MemoryError.
    `readahead(want, have)` sizes each read (a remote header reads in small steps: every byte costs)."""

    def __init__(self, path: Path, fh: Any, file_size: int = 0, readahead: Any = local_readahead) -> None:
        self.path = path
        self.fh = fh
        self._file_size = file_size
        self._readahead = readahead
        self.buf = bytearray()
        self.pos = 0
        self.kept = 0  # array values kept as lists so far (MAX_KEPT_VALUES)

    def bad(self, what: str, at: int | None = None) -> GGUFError:
        return GGUFError(f"{self.path}: {what} (at byte offset {self.pos if at is None else at}); the GGUF header "
                         "is damaged or truncated. Fetch or convert the file again.")

    def check(self, n: int, what: str) -> None:
        """Raise unless `n` more bytes from the current position lie inside the file."""
        left = self._file_size - self.pos
        if n > left:
            raise GGUFError(
                f"{self.path}: {what} at byte offset {self.pos} needs {n} bytes but the file ends at byte "
                f"{self._file_size} ({max(left, 0)} left): the GGUF header is truncated or that field is damaged. "
                "The download or copy is incomplete or corrupt: fetch the file again."
            )
        if self.pos + n > MAX_HEADER_BYTES:
            raise GGUFError(
                f"{self.path}: {what} at byte offset {self.pos} needs {n} bytes, which would make the GGUF header "
                f"larger than {MAX_HEADER_BYTES >> 20} MiB (real headers, a 262k-token vocabulary included, take "
                "under 16 MiB): that field is damaged or the file is not what it claims. Fetch or convert it again."
            )

    def need(self, n: int, what: str = "the header") -> None:
        self.check(n, what)
        want = self.pos + n - len(self.buf)
        if want <= 0:
            return
        ahead = min(self._readahead(want, len(self.buf)), self._file_size - len(self.buf), MAX_HEADER_BYTES - len(self.buf))
        chunk = self.fh.read(max(want, ahead))
        self.buf += chunk
        if len(chunk) < want:
            raise GGUFError(
                f"{self.path}: the GGUF header is truncated (the file ends at byte {len(self.buf)} while the "
                "header continues). The download or copy is incomplete: fetch the file again."
            )

    def u32(self, what: str = "a u32") -> int:
        self.need(4, what)
        (v,) = _I.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self, what: str = "a u64") -> int:
        self.need(8, what)
        (v,) = _Q.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def string(self, what: str = "a string", limit: int | None = None) -> str:
        """A length-prefixed string; one longer than `limit` bytes is refused before it is read."""
        n = self.u64(f"the length of {what}")
        if limit is not None and n > limit:
            raise self.bad(f"{what} claims {n} bytes (at most {limit} allowed)", at=self.pos - 8)
        self.pos -= 8
        self.check(8 + n, f"{what} (length {n})")
        self.pos += 8
        self.need(n, what)
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def skip_strings(self, count: int, key: str) -> None:
        """Skip `count` length-prefixed strings (the tokenizer's 250k tokens and merges)."""
        self.check(8 * count, f"key {key!r}: an array of {count} strings")
        # every string takes at least its 8-byte length: read that much (the window's readahead adds
        # more), then walk, checking each length
        self.need(min(count * 8, max(8, self._file_size - self.pos)), f"key {key!r}")
        buf = self.buf
        unpack = _Q.unpack_from
        pos = self.pos
        size = self._file_size
        left = count
        while left:
            k = -1
            try:
                for k in range(left):
                    start = pos
                    pos += 8 + unpack(buf, pos)[0]
                    if pos > size:
                        raise self.bad(f"key {key!r}: string {count - left + k} of {count} claims "
                                       f"{pos - start - 8} bytes, past the end of the file", at=start)
                left = 0
            except struct.error:  # ran past the window: read more and go on from item k
                left -= k
                self.pos = pos
                self.need(max(8, min(left * 8, size - pos)), f"key {key!r}: string {count - left} of {count}")
                buf = self.buf
        self.pos = pos
        self.need(0)

    def value(self, vtype: int, key: str, depth: int = 0) -> Any:
        if vtype in _SCALAR:
            st = _SCALAR[vtype]
            self.need(st.size, f"the value of key {key!r}")
            (v,) = st.unpack_from(self.buf, self.pos)
            self.pos += st.size
            return v
        if vtype == _STR:
            return self.string(f"the value of key {key!r}")
        if vtype == _ARR:
            etype = self.u32(f"the element type of key {key!r}")
            count = self.u64(f"the length of key {key!r}")
            if etype == _STR:
                if count <= 64:
                    return [self.string(f"an element of key {key!r}") for _ in range(count)]
                self.skip_strings(count, key)
                return ArrayInfo(etype, count)
            if etype in _SCALAR:
                st = _SCALAR[etype]
                nbytes = st.size * count
                self.need(nbytes, f"key {key!r}: an array of {count} elements")
                if count <= MAX_KEPT_ARRAY and self.kept + count <= MAX_KEPT_VALUES:
                    self.kept += count
                    vals = list(struct.unpack_from(f"<{count}{st.format[-1]}", self.buf, self.pos))
                    self.pos += nbytes
                    return vals
                self.pos += nbytes
                return ArrayInfo(etype, count)
            if etype == _ARR:
                if depth >= 4:
                    raise self.bad(f"key {key!r} nests arrays more than 4 deep")
                self.check(12 * count, f"key {key!r}: an array of {count} arrays")
                return [self.value(_ARR, key, depth + 1) for _ in range(count)]
            raise self.bad(f"key {key!r} has an array of unknown element type {etype}")
        raise self.bad(f"key {key!r} has unknown value type {vtype} (or the header is newer than mtp-tune)")


def read_gguf(path: str | Path) -> GGUFMeta:
    """Read the header of a GGUF file. Raises GGUFError with a one-paragraph message on bad input.

    A split model (`split.count` > 1, given by its first part) is read whole: every part's header,
    found by llama.cpp's own naming rule, its tensors in one table and each part in `meta.parts`."""
    p = Path(path)
    version, file_size, alignment, data_offset, kv, tensors, warnings = _read_header(p)
    parts: list[SplitPart] = []
    count = kv.get("split.count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 1:
        parts = [SplitPart(p, file_size, data_offset)]
        for i, part in enumerate(split_paths(p, kv), start=1):
            if not part.is_file():
                raise GGUFError(f"{part}: part {i + 1} of the split model {p.name} is missing; llama-server needs every "
                                "part next to the first.")
            _v, size, _a, offset, pkv, ptensors, pwarn = _read_header(part)
            if pkv.get("split.no") != i or pkv.get("split.count") != count:
                raise GGUFError(f"{part}: its split.no/split.count ({pkv.get('split.no')}/{pkv.get('split.count')}) do "
                                f"not say part {i + 1} of {count}; the split set is mixed up.")
            parts.append(SplitPart(part, size, offset))
            tensors += [replace(t, file=i) for t in ptensors]
            warnings += pwarn
    hp = hparams_from_kv(p, kv, tensors, warnings)
    return GGUFMeta(p, version, file_size, alignment, data_offset, kv, tensors, hp, warnings, parts)


def split_paths(first: Path, kv: dict[str, Any]) -> list[Path]:
    """The other parts of a split model, as llama.cpp finds them (src/llama.cpp `llama_split_prefix` /
    `llama_split_path`: `PREFIX-%05d-of-%05d.gguf`, the prefix taken from the first part's name)."""
    count, no = kv.get("split.count"), kv.get("split.no", 0)
    suffix = f"-{no + 1:05d}-of-{count:05d}.gguf"
    if no != 0 or not first.name.endswith(suffix):
        raise GGUFError(f"{first}: a split model ({count} parts) is loaded from its first part, named "
                        f"PREFIX-00001-of-{count:05d}.gguf; give that file as -m.")
    prefix = first.name[: -len(suffix)]
    return [first.with_name(split_name(prefix, i, count)) for i in range(1, count)]


def split_name(prefix: str, no: int, count: int) -> str:
    """llama.cpp's `llama_split_path` (0-based `no`)."""
    return f"{prefix}-{no + 1:05d}-of-{count:05d}.gguf"




def _read_header(p: Path) -> Header:
    """One file's header: version, size, alignment, data offset, key/values, tensors, warnings."""
    try:
        fh = open(p, "rb")
    except FileNotFoundError:
        raise GGUFError(f"{p}: no such file. Check the -m path.") from None
    except IsADirectoryError:
        raise GGUFError(f"{p}: is a directory, not a GGUF file. Give the path of the .gguf file.") from None
    except OSError as exc:
        raise GGUFError(f"{p}: cannot be opened ({exc.strerror}). Check the path and its permissions.") from None
    with fh:
        st = os.fstat(fh.fileno())
        entry = header_cache.entry_path(p, st)
        cached = header_cache.load(entry) if entry is not None else None
        if cached is not None and cached[1] == st.st_size:
            return cached
        header = parse_header(p, fh, st.st_size)
    if entry is not None:
        header_cache.save(entry, header)
    return header


def parse_header(p: Path, fh: Any, file_size: int, readahead: Any = local_readahead) -> Header:
    """Parse one GGUF header from `fh` (any object with `read(n)`, positioned at byte 0) of a file of
    `file_size` bytes, named `p` in messages: version, size, alignment, data offset, key/values,
    tensors, warnings. Reads sequentially and never past the tensor table (plus `readahead`)."""
    w = _Window(p, fh, file_size, readahead)
    head = fh.read(4)
    if head != GGUF_MAGIC:
        raise GGUFError(
            f"{p}: not a GGUF file (it starts with {head!r}, not b'GGUF'). Give llama-server a model in GGUF "
            "format (convert it with llama.cpp's convert_hf_to_gguf.py, or download a .gguf)."
        )
    w.buf += head
    w.pos = 4
    version = w.u32("the GGUF version")
    if version not in (2, 3):
        raise GGUFError(f"{p}: GGUF version {version} is not supported (only 2 and 3). Re-convert the model with a current llama.cpp.")
    n_tensors = w.u64("the tensor count")
    n_kv = w.u64("the key count")
    # each key takes at least 13 bytes (length, type, one byte of value), each tensor info 24
    if 13 * n_kv + 24 * n_tensors > file_size - w.pos:
        raise w.bad(f"the header claims {n_tensors} tensors and {n_kv} keys, more than a {file_size}-byte file "
                    "can hold", at=8)
    if n_tensors > MAX_TENSORS or n_kv > MAX_KEYS:
        raise w.bad(f"the header claims {n_tensors} tensors and {n_kv} keys (mtp-tune reads at most {MAX_TENSORS} "
                    f"tensors and {MAX_KEYS} keys; real models have a few thousand and about 50)", at=8)
    kv: dict[str, Any] = {}
    for i in range(n_kv):
        key = w.string(f"the name of key {i}", MAX_KEY_NAME)
        label = key if len(key) <= 80 else key[:80] + "..."  # messages quote a bounded name
        vtype = w.u32(f"the type of key {label!r}")
        kv[key] = w.value(vtype, label)
    alignment = kv.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(f"{p}: general.alignment = {repr(alignment)[:80]} is not a power of two; the header is corrupt.")
    raw: list[tuple[str, tuple[int, ...], int, int]] = []
    for i in range(n_tensors):
        name = w.string(f"the name of tensor {i}", MAX_NAME - 1)  # GGML_MAX_NAME counts the NUL
        n_dims = w.u32(f"the dimension count of tensor {name!r}")
        if n_dims > MAX_DIMS:
            raise w.bad(f"tensor {name!r} claims {n_dims} dimensions (ggml allows {MAX_DIMS})", at=w.pos - 4)
        w.need(8 * n_dims, f"the shape of tensor {name!r}")
        dims = struct.unpack_from(f"<{n_dims}Q", w.buf, w.pos)
        w.pos += 8 * n_dims
        ttype = w.u32(f"the type of tensor {name!r}")
        off = w.u64(f"the data offset of tensor {name!r}")
        if off % alignment:
            raise w.bad(f"tensor {name!r} has data offset {off}, not a multiple of the alignment {alignment}", at=w.pos - 8)
        raw.append((name, tuple(dims), ttype, off))
    header_end = w.pos
    data_offset = (header_end + alignment - 1) // alignment * alignment
    tensors: list[TensorInfo] = []
    for name, dims, ttype, off in raw:
        info = GGML_TYPES.get(ttype)
        if info is None:
            raise GGUFError(
                f"{p}: tensor {name!r} has quantization type id {ttype}, which mtp-tune does not know "
                "(newer than llama.cpp b11434?). Update mtp-tune, or use a file quantized with a known type."
            )
        tname, blck, tsize = info
        n = 1
        for d in dims:
            n *= d
        if dims and dims[0] % blck:
            raise GGUFError(f"{p}: tensor {name!r} has row length {dims[0]}, not a multiple of the {tname} block ({blck}).")
        nbytes = n // blck * tsize
        m = _LAYER.match(name)
        tensors.append(TensorInfo(name, tname, ttype, dims, data_offset + off, nbytes, int(m.group(1)) if m else None))
    warnings: list[str] = []
    last_end = max((t.offset + t.nbytes for t in tensors), default=data_offset)
    if last_end > file_size:
        warnings.append(
            f"{p.name}: the tensor data is truncated ({file_size} bytes, the table needs {last_end}); "
            "llama-server will refuse to load it."
        )
    return version, file_size, alignment, data_offset, kv, tensors, warnings
