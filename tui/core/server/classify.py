"""Reading a llama-server ending (exit status and log) into a `Failure` a user can act on.

This module reads arguments, MTP, ports, presets and signals; out-of-memory lines are `oom`'s, a model
that cannot be loaded is `model_failures`'s, one that cannot be downloaded `download_failures`'s.

llama-server reports most failures as a wall of log followed by exit code 1; a few end with a signal
and no log at all (the OOM killer's SIGKILL). Patterns are the verbatim wording of llama.cpp b11434
(common/arg.cpp, ggml/src/gguf.cpp, src/llama-*.cpp, tools/server/*, the CUDA/Vulkan/Metal/CPU
backends).
"""

from __future__ import annotations

import difflib
import re
import signal as _signal
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from tui.core.options.reader import value as opt_value
from tui.core.options.rules import CACHE_TYPES
from tui.core.server.download_failures import download_failure
from tui.core.server.failures import Failure, FailureKind, strip_prefix
from tui.core.server.model_failures import model_failure, model_path
from tui.core.server.oom import oom_failure


#: Flags removed from llama-server (b11434) and what replaces them; also older/fork spellings.
REMOVED_FLAGS: dict[str, str] = {
    "--no-mmap": "--load-mode none",
    "--mmap": "--load-mode mmap",
    "--mlock": "--load-mode mlock",
    "--draft": "--spec-draft-n-max",
    "--draft-n": "--spec-draft-n-max",
    "--draft-max": "--spec-draft-n-max",
    "--draft-min": "--spec-draft-n-min",
    "--draft-n-min": "--spec-draft-n-min",
    "--spec-ngram-size-n": "--spec-ngram-simple-size-n (or the --spec-ngram-*-size-n of your n-gram type)",
    "--spec-ngram-size-m": "--spec-ngram-simple-size-m (or the --spec-ngram-*-size-m of your n-gram type)",
    "--spec-ngram-min-hits": "--spec-ngram-simple-min-hits (or the --spec-ngram-*-min-hits of your n-gram type)",
    "--mtp": "--spec-type draft-mtp",
    "--dflash": "--spec-type draft-dflash",
    "--eagle3": "--spec-type draft-eagle3",
    "LLAMA_ARG_DRAFT_MAX": "LLAMA_ARG_SPEC_DRAFT_N_MAX",
    "LLAMA_ARG_DRAFT_MIN": "LLAMA_ARG_SPEC_DRAFT_N_MIN",
}
#: Values fork model cards use that upstream spells differently.
SPEC_TYPE_FIXES: dict[str, str] = {"mtp": "draft-mtp", "eagle3": "draft-eagle3", "dflash": "draft-dflash",
                                   "ngram": "ngram-mod", "draft": "draft-simple"}

CRASH_SIGNALS = {_signal.SIGSEGV, _signal.SIGABRT, _signal.SIGBUS, _signal.SIGFPE, _signal.SIGILL}


_ARG_ERR = re.compile(r'error while handling argument "([^"]+)": (.*)')
_ENV_ERR = re.compile(r'error while handling environment variable "([^"]+)": (.*)')
_INVALID_ARG = re.compile(r"error: invalid argument: (\S+)")
_CACHE_TYPE = re.compile(r"Unsupported cache type: (\S+)")
_SPEC_TYPE = re.compile(r"unknown speculative type: (\S+)")
_NO_MTP = re.compile(r"model doesn't contain MTP layers|failed to create MTP context")
_BIND = re.compile(r"couldn't bind HTTP server socket, hostname: ([^,]+), port: (\d+)")
_ROUTER_INIT = re.compile(r"failed to initialize router models: (.*)")
_PRESET_KEY = re.compile(r"option '([^']+)' not recognized in preset '([^']*)'")
_ASSERT = re.compile(r"GGML_ASSERT\(.*\) failed|GGML_ABORT|terminate called|what\(\):|Segmentation fault")


def _signal_name(sig: int) -> str:
    try:
        return _signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _suggest(flag: str, known: Iterable[str] | None) -> str:
    if not known:
        return ""
    close = difflib.get_close_matches(flag, list(known), n=3, cutoff=0.75)
    return f" Did you mean {' or '.join(close)}?" if close else ""


def classify(
    exit_code: int | None,
    log_lines: Iterable[str],
    *,
    raw_log_path: Path | None = None,
    argv: Sequence[str] | None = None,
    was_ready: bool = False,
    known_options: Iterable[str] | None = None,
    token_given: bool = False,
) -> Failure:
    """Classify an ending from Popen's return code (negative = killed by that signal) and the log.

    `was_ready` says the server had answered /health 200 before it ended (so a crash happened while
    serving). `known_options` (from `server.binary`) lets unknown flags get a "did you mean".
    `token_given`: a Hugging Face token went in the server's environment (never in `argv`).
    """
    lines = [ln.rstrip("\r\n") for ln in log_lines]
    msgs = [strip_prefix(ln) for ln in lines]
    sig = -exit_code if exit_code is not None and exit_code < 0 else None
    f = _classify(exit_code, sig, lines, msgs, argv, was_ready, known_options, token_given)
    return replace(f, raw_log_path=raw_log_path, exit_code=exit_code, signal=sig)


def _classify(
    exit_code: int | None,
    sig: int | None,
    lines: list[str],
    msgs: list[str],
    argv: Sequence[str] | None,
    was_ready: bool,
    known: Iterable[str] | None,
    token_given: bool = False,
) -> Failure:
    for raw, m in zip(lines, msgs):
        f = _argument_failure(raw, m, known)
        if f:
            return f
    f = download_failure(lines, msgs, argv, token_given=token_given)  # before the model: a failed download loads an empty path
    if f:
        return f
    f = oom_failure(lines, msgs)
    if f:
        return f
    f = model_failure(lines, msgs, argv)
    if f:
        return f
    for raw, m in zip(lines, msgs):
        if _NO_MTP.search(m):
            model = model_path(msgs, argv)
            return Failure(
                FailureKind.NO_MTP_LAYERS,
                f"--spec-type draft-mtp was given, but the model {model or ''} has no MTP (NextN) layers, "
                "so llama-server could not create the MTP draft context and refused to start.".replace("  ", " "),
                "--spec-type",
                "Use a GGUF converted with its MTP head (a '...-MTP' build whose metadata has "
                "nextn_predict_layers > 0), or remove --spec-type draft-mtp to run without speculation.",
                evidence=raw,
            )
        bm = _BIND.search(m)
        if bm:
            host, port = bm.group(1), bm.group(2)
            return Failure(
                FailureKind.PORT_IN_USE,
                f"llama-server could not listen on {host}:{port}: another process (often an earlier "
                "llama-server) already holds that port.",
                f"--port {port}",
                f"Stop the other server, or leave the port empty so mtp-tune picks a free one; "
                f"`ss -ltnp 'sport = :{port}'` shows who holds it.",
                evidence=raw,
            )
        rm = _ROUTER_INIT.search(m)
        if rm:
            detail = rm.group(1)
            km = _PRESET_KEY.search(detail)
            if km:
                key, section = km.group(1), km.group(2)
                fix = (f"Remove or rename '{key}' in section [{section}]: preset keys are llama-server option "
                       "names without dashes.")
                if f"--{key}" in REMOVED_FLAGS:
                    new = REMOVED_FLAGS["--" + key].lstrip("-")
                    fix = f"'{key}' was removed from llama-server; use {new} in section [{section}] instead."
                return Failure(FailureKind.PRESET_ERROR,
                               f"The --models-preset file was rejected: option '{key}' is not a llama-server option "
                               f"(section [{section}]).", key, fix, evidence=raw)
            return Failure(FailureKind.PRESET_ERROR, f"The router could not load its models: {detail}.",
                           opt_value(argv or [], "--models-preset"),
                           "Fix the --models-preset file (keys start at column 0, `key = value`, no ';' or '#' "
                           "inside values) and check that every model path exists.", evidence=raw)
    if sig is not None:
        return _signal_failure(sig, lines, msgs, was_ready)
    if exit_code is not None and exit_code > 128 and exit_code - 128 in {int(s) for s in _signal.Signals}:
        return _signal_failure(exit_code - 128, lines, msgs, was_ready)
    if exit_code == 0:
        return Failure(FailureKind.EXITED,
                       "llama-server exited on its own with code 0 (something else stopped it, or it was given "
                       "an option such as --help or --version that exits at once).", None,
                       "Start it again; if it keeps stopping, look at the last lines of the log.")
    errs = [ln for ln, m in zip(lines, msgs) if re.match(r"^(?:\[\d+\]\s)?(?:\d+\.\d+\.\d+\.\d+\s)?E\s", ln)
            or m.lower().startswith("error")]
    last = (errs or [ln for ln in lines if ln.strip()] or ["(empty log)"])[-1]
    code = "unknown" if exit_code is None else str(exit_code)
    return Failure(FailureKind.UNKNOWN,
                   f"llama-server stopped with exit code {code}; mtp-tune does not recognise the cause. "
                   f"Last error line: {strip_prefix(last).strip()}",
                   None, "Read the full log for the first error; it usually names the option or file at fault.",
                   evidence=last)


def _argument_failure(raw: str, m: str, known: Iterable[str] | None) -> Failure | None:
    am = _ARG_ERR.search(m) or _ENV_ERR.search(m)
    is_env = bool(_ENV_ERR.search(m)) and not _ARG_ERR.search(m)
    if am:
        flag, detail = am.group(1), am.group(2).strip()
        if "has been removed" in detail:
            repl = REMOVED_FLAGS.get(flag)
            hint = detail.split("removed.", 1)[-1].strip().rstrip(".")
            if is_env:
                return Failure(FailureKind.REMOVED_ARG,
                               f"The environment variable {flag} sets an option that llama-server no longer has.",
                               flag, f"Unset {flag}" + (f" and use {repl} instead." if repl else f"; {hint}."),
                               evidence=raw)
            return Failure(FailureKind.REMOVED_ARG, f"llama-server no longer accepts {flag} (removed upstream).",
                           flag, f"Use {repl} instead." if repl else f"{hint[:1].upper()}{hint[1:]}.", evidence=raw)
        cm = _CACHE_TYPE.search(detail)
        if cm:
            return Failure(FailureKind.UNSUPPORTED_CACHE_TYPE,
                           f"{flag} {cm.group(1)}: this llama-server does not support the KV cache type '{cm.group(1)}'.",
                           f"{flag} {cm.group(1)}",
                           f"Use one of {', '.join(CACHE_TYPES)} (q8_0 halves the KV size of f16 with little loss; "
                           "a quantized V cache needs flash attention).", evidence=raw)
        sm = _SPEC_TYPE.search(detail)
        if sm:
            bad = sm.group(1)
            good = SPEC_TYPE_FIXES.get(bad)
            fix = f"Use --spec-type {good}." if good else (
                "Use one of none, draft-simple, draft-eagle3, draft-mtp, draft-dflash, draft-dspark, ngram-simple, "
                "ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache.")
            return Failure(FailureKind.BAD_ARG_VALUE, f"--spec-type {bad}: this llama-server has no speculative type '{bad}'"
                           + (" (that spelling comes from a fork or an older build)." if good else "."),
                           f"{flag} {bad}", fix, evidence=raw)
        where = "environment variable" if is_env else "option"
        return Failure(FailureKind.BAD_ARG_VALUE, f"llama-server rejected the value of the {where} {flag}: {detail}",
                       flag, f"Fix the value of {flag}"
                       + (" or unset it." if is_env else "; `llama-server --help` lists the allowed values."),
                       evidence=raw)
    im = _INVALID_ARG.search(m)
    if im:
        flag = im.group(1)
        if flag in REMOVED_FLAGS:
            return Failure(FailureKind.REMOVED_ARG,
                           f"llama-server no longer accepts {flag} (removed upstream; older guides and forks still use it).",
                           flag, f"Use {REMOVED_FLAGS[flag]} instead.", evidence=raw)
        return Failure(FailureKind.UNKNOWN_ARG, f"llama-server does not know the option {flag}.", flag,
                       "Remove it or check its spelling in `llama-server --help` (options from forks such as "
                       "--checkpoint-every-n-tokens do not exist upstream)." + _suggest(flag, known), evidence=raw)
    return None


def _signal_failure(sig: int, lines: list[str], msgs: list[str], was_ready: bool) -> Failure:
    name = _signal_name(sig)
    serving = was_ready or any("processing task" in m or "launch_slot" in m for m in msgs)
    when = "while serving a request" if serving else "while loading"
    if sig in CRASH_SIGNALS:
        hint = next((ln for ln, m in zip(lines, msgs) if _ASSERT.search(m)), None)
        detail = f" Last words: {strip_prefix(hint).strip()}" if hint else ""
        return Failure(FailureKind.CRASH, f"llama-server crashed ({name}) {when}.{detail}", None,
                       "This is a llama-server bug or a broken build/driver: try the same settings without "
                       "--spec-type (to see whether MTP is involved) and report it upstream with the log.",
                       evidence=hint)
    if sig == _signal.SIGKILL:
        return Failure(FailureKind.KILLED, f"llama-server was killed with SIGKILL {when}. If nobody killed it "
                       "by hand, the Linux OOM killer is the usual cause (host RAM ran out).", None,
                       "Check `dmesg` or `journalctl -k` for 'Out of memory: Killed process'; if so, lower -c, "
                       "--cache-ram or --parallel, or free RAM.")
    return Failure(FailureKind.KILLED, f"llama-server was stopped by {name} {when}, from outside mtp-tune.", None,
                   "Start it again; if something keeps stopping it (a service manager, a container limit), look there.")


def router_model_failure(model: str, exit_code: int | None, child_lines: Iterable[str],
                         raw_log_path: Path | None = None) -> Failure:
    """A router child (one preset section) failed to load: explain it from the child's own log lines."""
    lines = list(child_lines)
    inner = classify(exit_code, lines, raw_log_path=raw_log_path)
    if inner.kind in (FailureKind.UNKNOWN, FailureKind.EXITED):
        return Failure(FailureKind.ROUTER_MODEL_FAILED,
                       f"The router could not load model '{model}': its llama-server exited with code {exit_code}.",
                       model, "Check that section of the --models-preset file; the full log shows the child's errors.",
                       raw_log_path=raw_log_path, exit_code=exit_code, evidence=inner.evidence)
    return replace(inner, message=f"Router model '{model}': {inner.message}")
