"""A model named by `-hf REPO[:QUANT]` or `-mu URL` on the form, planned from its header before download.

The header is read once per model (HTTP ranges, on a worker thread: `to_local`) into the core's
on-disk cache (`tui.core.remote`); afterwards the form's settings map to the local header copy at
once (`known_local`), so every later keystroke plans in a millisecond, like a file on disk.
"""

from __future__ import annotations

import threading
from typing import Any

from tui.core.options.settings import Settings

_FETCHED: dict[Any, Any] = {}  # ModelSource -> Fetched, this session
_LOCK = threading.Lock()


def source(settings: Settings) -> Any:
    """The remote model the settings name (None for a file on disk or no model)."""
    from tui.core.remote.source import source_of

    return source_of(settings)


def known_local(settings: Settings) -> Settings | None:
    """`settings` pointed at the local header copy when it is already read (or a local model: as is);
    None when a remote header has still to be read (a worker's job)."""
    from tui.core.remote.source import local_settings

    src = source(settings)
    if src is None:
        return settings
    with _LOCK:
        got = _FETCHED.get(src)
    return None if got is None or not got.path.exists() else local_settings(settings, got.path)


def fetched(settings: Settings) -> Any:
    """The Fetched record of the remote model on the form, once read (for labels and the download size)."""
    src = source(settings)
    with _LOCK:
        return None if src is None else _FETCHED.get(src)


def to_local(settings: Settings) -> Settings:
    """`settings` pointed at the local header copy, reading the header now if needed (blocks: a worker
    thread). Raises RemoteError / ValueError with one sentence."""
    from tui.core.remote.fetch import fetch_model
    from tui.core.remote.source import local_settings

    local = known_local(settings)
    if local is not None:
        return local
    src = source(settings)
    got = fetch_model(src)
    with _LOCK:
        _FETCHED[src] = got
    return local_settings(settings, got.path)
