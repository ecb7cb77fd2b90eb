"""A model that cannot be loaded, read from a llama-server log: missing, unreadable, not a GGUF,
truncated, or of an architecture this build does not know.

Patterns are the verbatim wording of llama.cpp b11434 (ggml/src/gguf.cpp, src/llama-model*.cpp).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tui.core.options.reader import value as opt_value
from tui.core.server.failures import Failure, FailureKind

_OPEN_FAIL = re.compile(r"failed to open GGUF file '(.+?)' \((.+?)\)")
_BAD_MAGIC = re.compile(r"invalid magic characters: '(.*)', expected 'GGUF'")
_LOADING = re.compile(r"loading model '(.+?)'")
_TRUNCATED = re.compile(
    r"data is not within the file bounds|failed to read (?:magic|header|key-value pairs|tensor info|tensor data)"
    r"|exceeds remaining file size|failed to seek to beginning of data section"
)
_TENSOR_OOB = re.compile(r"tensor '([^']+)' data is not within the file bounds")
_UNKNOWN_ARCH = re.compile(r"unknown model architecture: '([^']*)'")


def model_path(msgs: list[str], argv: Sequence[str] | None) -> str | None:
    """The model the log says it loads, else the argv's -m."""
    for m in msgs:
        lm = _LOADING.search(m)
        if lm:
            return lm.group(1)
    return opt_value(argv or [], "-m")


def model_failure(lines: list[str], msgs: list[str], argv: Sequence[str] | None) -> Failure | None:
    """The first line saying the model cannot be loaded, as a Failure (None if there is none)."""
    for raw, m in zip(lines, msgs):
        om = _OPEN_FAIL.search(m)
        if om:
            path, why = om.group(1), om.group(2)
            if "No such file" in why:
                return Failure(FailureKind.MISSING_MODEL, f"The model file {path} does not exist.", path,
                               "Check the path given to -m (relative paths are relative to the directory "
                               "mtp-tune was started from) or pick the file again.", evidence=raw)
            return Failure(FailureKind.MODEL_UNREADABLE, f"The model file {path} cannot be opened ({why}).", path,
                           "Check the file's permissions and that it is a regular file, not a directory.",
                           evidence=raw)
        bm = _BAD_MAGIC.search(m)
        if bm:
            path = model_path(msgs, argv)
            return Failure(FailureKind.NOT_GGUF, f"{path or 'The model file'} is not a GGUF file (it starts with "
                           f"'{bm.group(1)}' instead of 'GGUF').", path,
                           "Give -m a .gguf model; safetensors/PyTorch checkpoints must be converted with "
                           "llama.cpp's convert_hf_to_gguf.py first, and an HTML page saved as .gguf means the "
                           "download failed.", evidence=raw)
        if _TRUNCATED.search(m):
            path = model_path(msgs, argv)
            tm = _TENSOR_OOB.search(m)
            detail = f" (tensor '{tm.group(1)}' lies past the end of the file)" if tm else ""
            return Failure(FailureKind.TRUNCATED_GGUF, f"{path or 'The model file'} is truncated or corrupted{detail}.",
                           path, "Download the file again (an interrupted download leaves a partial file) and "
                           "compare its size or checksum with the source.", evidence=raw)
        am = _UNKNOWN_ARCH.search(m)
        if am:
            path = model_path(msgs, argv)
            return Failure(FailureKind.UNSUPPORTED_MODEL, f"This llama-server does not support the model "
                           f"architecture '{am.group(1)}' of {path or 'the model'}.", path,
                           "Update llama-server to a build that supports it.", evidence=raw)
    return None
