"""One remote GGUF's header, read by growing range requests until its tensor table ends.

The same parser that reads a file on disk (`planning.gguf_reader.parse_header`) walks the remote
file through a `RangedFile`, with a read-ahead that grows by an eighth instead of doubling. The
parse needs only the header's own bytes: the tokenizer's arrays are skipped by their lengths, so
the requests follow the header and stop at the tensor table's end (plus the padding up to the data,
which the sparse copy needs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

import httpx

from tui.core.planning.gguf_meta import GGUFError
from tui.core.planning.gguf_reader import parse_header
from tui.core.remote.errors import RemoteError, host_of, quoted
from tui.core.remote.ranged import DEFAULT_LIMITS, Limits, RangedFile, Traffic, remote_readahead


@dataclass(frozen=True)
class RemoteHeader:
    """A remote GGUF file's header bytes (up to where its tensor data begins) and what identifies it."""

    url: str
    name: str  # the file name (a split part keeps llama.cpp's -0000i-of-0000N name)
    size: int  # the whole file's size, from the server
    etag: str
    header: bytes
    split_count: int  # 1 for a single file

    @property
    def header_size(self) -> int:
        return len(self.header)


class _UrlPath(PurePosixPath):
    """A URL as the parser's file name: printed whole (a PurePosixPath of it folds `//` into `/`),
    `.name` the file's own name."""

    url = ""

    def __str__(self) -> str:
        return self.url or super().__str__()


def _named(url: str, name: str) -> _UrlPath:
    p = _UrlPath(name)
    p.url = url
    return p


def file_name(url: str) -> str:
    """The file name a URL ends with (`-mu https://host/dir/model-Q4_K_M.gguf?x=1` -> the .gguf)."""
    return unquote(PurePosixPath(urlsplit(url).path).name) or "model.gguf"


#: what a GGUF may hold past its last tensor's data (padded to the alignment) before the size its
#: server claims is called a lie: writers end the file there, so 1 MiB is slack, not room for a file
TRAILING_SLACK = 1 << 20


def read_remote_header(client: httpx.Client, url: str, headers: dict[str, str] | None = None,
                       traffic: Traffic | None = None, name: str = "", what: str = "",
                       limits: Limits = DEFAULT_LIMITS, listed_size: int | None = None) -> RemoteHeader:
    """Read `url`'s GGUF header by range requests; RemoteError (HTTP, network, no Range, not a GGUF,
    a bound tripped). The size the server claims is checked twice, because the sparse copy is made
    that large: against the Hub listing's size of the file (`listed_size`, for `-hf`) and against
    the header's own tensor table (a file ends after its last tensor's data)."""
    name = name or file_name(url)
    rf = RangedFile(client, url, headers, traffic, what=what or name, limits=limits)
    if listed_size is not None and rf.size != listed_size:
        raise RemoteError(f"{host_of(url)} says {quoted(what or name)} is {rf.size} bytes (Content-Range) but the Hub's "
                          f"listing says {listed_size}: the answers disagree; try again with --refresh.")
    cap = limits.max_bytes
    try:
        _v, _size, align, data_offset, kv, tensors, _w = parse_header(
            _named(quoted(url, 200), name), rf, rf.size, lambda want, have: remote_readahead(want, have, cap))  # type: ignore[arg-type]
    except GGUFError as exc:
        text = str(exc)
        if "not a GGUF file" in text:
            start = bytes(rf.data[:4])
            raise RemoteError(f"{quoted(url, 200)} is not a GGUF file (it starts with {start!r}, not b'GGUF'): check the "
                              "URL (a Hub page's URL is not the file's; use .../resolve/main/FILE.gguf) or the file name.") from None
        raise RemoteError(text) from None
    end = max((t.offset + t.nbytes for t in tensors), default=data_offset)
    if rf.size > (end + align - 1) // align * align + TRAILING_SLACK:
        raise RemoteError(f"{host_of(url)} says {quoted(what or name)} is {rf.size} bytes (Content-Range), but its "
                          f"header's tensors end at byte {end}: the server's size is wrong, and mtp-tune will not make "
                          "a sparse copy that large; plan a downloaded file with -m.")
    rf.ensure(data_offset)  # the padding between the tensor table and the data: part of the copy
    count = kv.get("split.count", 1)
    count = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1
    return RemoteHeader(url, name, rf.size, rf.etag, bytes(rf.data[:data_offset]), count)
