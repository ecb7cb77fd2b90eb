"""mtp-tune: tune llama-server's MTP speculative decoding on GPUs that are too small."""

from __future__ import annotations

__version__ = "0.1.0"  # the source tree's version; an installed package reports its metadata's


def package_version() -> str:
    """The installed distribution's version (importlib.metadata), else `__version__` (a source checkout)."""
    from importlib import metadata

    try:
        return metadata.version("mtp-tune")
    except metadata.PackageNotFoundError:
        return __version__
