"""The one redactor: API keys never reach a log, the history, a profile or the screen."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tui.core.options.reader import Occurrence, scan

#: What logs, history and default profiles show instead of a secret.
REDACTED = "<redacted>"

#: Options whose value is a secret (any spelling of these is matched by the table).
SECRET_OPTIONS: tuple[str, ...] = ("--api-key",)
#: Environment variables whose value is a secret.
SECRET_ENV: frozenset[str] = frozenset({"LLAMA_API_KEY", "LLAMA_ARG_API_KEY", "HF_TOKEN"})


def redact_argv(argv: Sequence[str], mask: str = REDACTED) -> list[str]:
    """A copy of `argv` with every secret option value replaced by `mask`."""
    out = [str(a) for a in argv]
    for t in scan(out):
        if not isinstance(t, Occurrence) or t.option.canonical not in SECRET_OPTIONS or t.value is None:
            continue
        if t.inline:
            out[t.index] = f"{t.spelling}={mask}"
        else:
            out[t.index + 1] = mask
    return out


def redact_env(env: Mapping[str, str], mask: str = REDACTED) -> dict[str, str]:
    """A copy of `env` with secret values masked (for doctor output and logs)."""
    return {k: (mask if k in SECRET_ENV or k.endswith("_API_KEY") else v) for k, v in env.items()}
