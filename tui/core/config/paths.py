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
