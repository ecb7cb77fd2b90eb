"""Where mtp-tune keeps its files (XDG directories, overridable by environment)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "mtp-tune"


def cache_dir() -> Path:
    """Build cache and generated models; `MTP_TUNE_CACHE_DIR` wins over XDG."""
    env = os.environ.get("MTP_TUNE_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir(APP, appauthor=False))


def config_dir() -> Path:
    """Profiles, history, user themes and `config.toml`."""
    env = os.environ.get("MTP_TUNE_CONFIG_DIR")
    return Path(env) if env else Path(platformdirs.user_config_dir(APP, appauthor=False))


def data_dir() -> Path:
    """The results database and per-launch server logs."""
    env = os.environ.get("MTP_TUNE_DATA_DIR")
    return Path(env) if env else Path(platformdirs.user_data_dir(APP, appauthor=False))


#: Modes of what mtp-tune keeps for its user: logs, the results database, states, history, profiles
#: and caches hold model paths, prompts, server output and, when asked, a key.
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def _tighten(path: Path, mode: int) -> None:
    """Take group and other bits off `path` when it is ours (a shared or foreign one is left as it is)."""
    st = path.stat()
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        os.chmod(path, st.st_mode & mode & 0o7777)


def _root_of(path: Path) -> Path | None:
    """The mtp-tune directory (config, data or cache) that holds `path`, if any."""
    for root in (config_dir(), data_dir(), cache_dir()):
        if path == root or root in path.parents:
            return root
    return None


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Make `path` (and its missing parents) a directory only its owner can enter; returns it.

    Why every creator calls this: a file in a 0700 directory is private whatever its own mode. From
    the mtp-tune root that holds `path` (config_dir, data_dir, cache_dir) down to `path`, each folder
    is created 0700 or, when it exists with looser bits and is ours, tightened to it. Folders above
    the root, or a `path` outside them (an MTP_TUNE_*_DIR elsewhere), are created 0700 when missing
    and otherwise left alone."""
    p = Path(path)
    root = _root_of(p)
    if root is None:
        p.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        return p
    root.parent.mkdir(parents=True, exist_ok=True)
    for d in [*(q for q in reversed(p.parents) if q == root or root in q.parents), p]:
        try:
            d.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            pass
        _tighten(d, PRIVATE_DIR)
    return p


def private_file(path: str | os.PathLike[str]) -> Path:
    """Create `path` empty and 0600 if it is missing (in a private folder), else tighten it if ours;
    returns it. For files opened by a library that creates them with the umask's mode (sqlite)."""
    p = Path(path)
    private_dir(p.parent)
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))
    _tighten(p, PRIVATE_FILE)
    return p
