"""A model named by `-hf REPO[:QUANT]` or `-mu URL` on the form, planned from its header before download.

The header is read once per model (HTTP ranges, on a worker thread: `to_local`) into the core's
on-disk cache (`tui.core.remote`); afterwards the form's settings map to the local header copy at
once (`known_local`), so every later keystroke plans in a millisecond, like a file on disk. A Hub
model is known per endpoint (`HF_ENDPOINT` / `MODEL_ENDPOINT`, read at call time): the same repo
name on another endpoint is another model. The variants picker hands over the header copies it
read (`remember`), so the file it puts in the form plans without asking the Hub again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tui.core.config.endpoint import endpoint
from tui.core.options.settings import Settings
from tui.core.remote.source import local_settings, source_of

_FETCHED: dict[Any, Any] = {}  # (ModelSource, endpoint) -> Fetched, this session
_LOCK = threading.Lock()


def source(settings: Settings) -> Any:
    """The remote model the settings name (None for a file on disk or no model)."""
    return source_of(settings)


def _key(src: Any) -> tuple[Any, str]:
    """What a header copy is known by: the source, and for `-hf` the Hub endpoint it was read from."""
    return src, endpoint() if src.kind == "hf" else ""


def known_local(settings: Settings) -> Settings | None:
    """`settings` pointed at the local header copy when it is already read (or a local model: as is);
    None when a remote header has still to be read (a worker's job)."""
    src = source(settings)
    if src is None:
        return settings
    key = _key(src)
    with _LOCK:
        got = _FETCHED.get(key)
    return None if got is None or not got.path.exists() else local_settings(settings, got.path)


def remote_label(settings: Settings) -> str:
    """What the bars say is being read: `user/repo:Q4_K_M`, or the URL's file name."""
    src = source(settings)
    if src is None:
        return ""
    if src.kind == "url":
        # lazy: the header reader brings httpx; only a --model-url model pays for it
        from tui.core.remote.header import file_name

        return file_name(src.spec)
    return src.label


def fetched(settings: Settings) -> Any:
    """The Fetched record of the remote model on the form, once read (for labels and the download size)."""
    src = source(settings)
    if src is None:
        return None
    key = _key(src)
    with _LOCK:
        return _FETCHED.get(key)


def remember(settings: Settings, got: Any) -> None:
    """`got` (a Fetched header copy) is the model `settings` name: later plans use it at once."""
    src = source(settings)
    if src is not None and got is not None:
        key = _key(src)
        with _LOCK:
            _FETCHED[key] = got


def to_local(settings: Settings, progress: Callable[[str], None] | None = None) -> Settings:
    """`settings` pointed at the local header copy, reading the header now if needed (blocks: a worker
    thread; `progress` hears "listing REPO", "reading the header of FILE"). Raises RemoteError /
    ValueError with one sentence."""
    # lazy: httpx loads with the first remote read, on a worker
    from tui.core.remote.fetch import fetch_model

    local = known_local(settings)
    if local is not None:
        return local
    src = source(settings)
    key = _key(src)
    got = fetch_model(src, progress=progress)
    with _LOCK:
        _FETCHED[key] = got
    return local_settings(settings, got.path)
