"""Whether a file's pages are in memory, seen from outside (mincore): exact-mode tests evict a model
file, run a dry run, and check that no page of its tensor data came back."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def evict(path: Path) -> None:
    """Drop `path`'s pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_after(path: Path, offset: int) -> int:
    """How many of `path`'s pages from the first whole page at or after `offset` are in memory."""
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED: mapping touches nothing
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            n = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * n)()
            assert _libc.mincore(addr, size, vec) == 0, ctypes.get_errno()
            return sum(v & 1 for v in vec[-(-offset // PAGE):])
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
