"""The one redactor: secrets (the API key, the Hugging Face token) never reach a log, the history, a
profile, the results database, a state file or the screen.

Why one list: every writer (log header, "starting:" line, history, results database, tune state,
reports, profiles, exports) goes through `redact_argv` / `Settings.redacted()`, so a secret option
added here is hidden everywhere at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tui.core.options.reader import Occurrence, scan

#: What logs, history and default profiles show instead of a secret.
REDACTED = "<redacted>"

#: Options whose value is a secret (any spelling of these is matched by the table), and the
#: environment variable that carries it to llama-server instead of the argv (world-readable in `ps`
#: and /proc/PID/cmdline). None: another way; the API key goes through a 0600 `--api-key-file`
#: (server/keyfile.py). llama-server b11434 reads `-hft` from HF_TOKEN when the flag is absent
#: (common/arg.cpp `set_env("HF_TOKEN")`).
SECRET_OPTIONS: Mapping[str, str | None] = {"--api-key": None, "--hf-token": "HF_TOKEN"}
#: Environment variables whose value is a secret.
SECRET_ENV: frozenset[str] = frozenset({"LLAMA_API_KEY", "LLAMA_ARG_API_KEY", "HF_TOKEN"})


def _secret_occurrences(argv: Sequence[str]) -> list[Occurrence]:
    return [t for t in scan([str(a) for a in argv])
            if isinstance(t, Occurrence) and t.option.canonical in SECRET_OPTIONS and t.value is not None]


def redact_argv(argv: Sequence[str], mask: str = REDACTED, *, keep: frozenset[str] = frozenset()) -> list[str]:
    """A copy of `argv` with every secret option value replaced by `mask`, but those of the options in
    `keep` (what a user asked to store, e.g. `profile import --keep-hf-token`)."""
    out = [str(a) for a in argv]
    for t in _secret_occurrences(out):
        if t.option.canonical in keep:
            continue
        if t.inline:
            out[t.index] = f"{t.spelling}={mask}"
        else:
            out[t.index + 1] = mask
    return out


def kept_secrets(*, api_key: bool = False, hf_token: bool = False) -> frozenset[str]:
    """The secret options a user asked to store (`--keep-api-key`, `--keep-hf-token`), for `keep=`."""
    return frozenset(o for o, on in (("--api-key", api_key), ("--hf-token", hf_token)) if on)


def has_secret(argv: Sequence[str], option: str) -> bool:
    """True when `argv` gives the secret `option` (any spelling) a real value, not the mask."""
    return any(t.option.canonical == option and t.value != REDACTED for t in _secret_occurrences(argv))


def without_secrets(argv: Sequence[str], keep: frozenset[str] = frozenset(), *, masked_only: bool = False
                    ) -> list[str]:
    """A copy of `argv` without the secret options (and their values), except those in `keep`.

    `masked_only` drops only the ones whose value is the mask: settings read back from a history entry
    or a state must not launch `-hft <redacted>` (that would send the mask as the token)."""
    drop = {t.index: t.end for t in _secret_occurrences(argv) if t.option.canonical not in keep
            and (not masked_only or t.value == REDACTED)}
    out: list[str] = []
    i = 0
    while i < len(argv):
        if i in drop:
            i = drop[i]
            continue
        out.append(str(argv[i]))
        i += 1
    return out


def env_secrets(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """`argv` without the secrets that travel by environment, and those variables (the last value wins,
    as llama-server's last-value rule says): what a launch runs and adds to its child's environment.

    A masked secret (settings read back from a state, a history entry) is dropped and sends nothing:
    the mask must not replace the user's own HF_TOKEN."""
    env: dict[str, str] = {}
    for t in _secret_occurrences(argv):
        var = SECRET_OPTIONS[t.option.canonical]
        if var and t.value != REDACTED:
            env[var] = str(t.value)
    by_arg = frozenset(o for o, var in SECRET_OPTIONS.items() if not var)
    return without_secrets(without_secrets(argv, keep=by_arg), masked_only=True), env


def redact_env(env: Mapping[str, str], mask: str = REDACTED) -> dict[str, str]:
    """A copy of `env` with secret values masked (for doctor output and logs)."""
    return {k: (mask if k in SECRET_ENV or k.endswith("_API_KEY") else v) for k, v in env.items()}

