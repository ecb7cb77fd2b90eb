"""Reading a llama-server ending (exit status and log) into a `Failure` a user can act on.

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
from tui.core.server.failures import Failure, FailureKind, strip_prefix


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
_OPEN_FAIL = re.compile(r"failed to open GGUF file '(.+?)' \((.+?)\)")
_BAD_MAGIC = re.compile(r"invalid magic characters: '(.*)', expected 'GGUF'")
_LOADING = re.compile(r"loading model '(.+?)'")
_LOAD_FAIL = re.compile(r"failed to load model(?: from|,)? '?([^']+?)'?$")
_TRUNCATED = re.compile(
    r"data is not within the file bounds|failed to read (?:magic|header|key-value pairs|tensor info|tensor data)"
    r"|exceeds remaining file size|failed to seek to beginning of data section"
)
_TENSOR_OOB = re.compile(r"tensor '([^']+)' data is not within the file bounds")
_UNKNOWN_ARCH = re.compile(r"unknown model architecture: '([^']*)'")
_NO_MTP = re.compile(r"model doesn't contain MTP layers|failed to create MTP context")
_BIND = re.compile(r"couldn't bind HTTP server socket, hostname: ([^,]+), port: (\d+)")
_ROUTER_INIT = re.compile(r"failed to initialize router models: (.*)")
_PRESET_KEY = re.compile(r"option '([^']+)' not recognized in preset '([^']*)'")
_ASSERT = re.compile(r"GGML_ASSERT\(.*\) failed|GGML_ABORT|terminate called|what\(\):|Segmentation fault")

# Memory: (regex, where) with where in {"device", "host"}; a named group `buf` is a buffer type
# (CUDA0, Vulkan0, CPU, CUDA_Host, Metal...), `dev` a CUDA device index, `size` a size in MiB.
_OOM_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"allocating (?P<size>[\d.]+) MiB on device (?P<dev>\d+): (?:cuda|hip|musa)Malloc failed: "
                r"out of memory", re.I), "device"),
    (re.compile(r"(?:cuda|hip|musa)Malloc failed: out of memory", re.I), "device"),
    (re.compile(r"(?:CUDA|ROCm|MUSA) error: out of memory"), "device"),
    (re.compile(r"ErrorOutOfDeviceMemory|OutOfDeviceMemoryError|out of device memory|OUT_OF_DEVICE_MEMORY", re.I),
     "device"),
    (re.compile(r"Device memory allocation of size (?P<bytes>\d+) failed"), "device"),
    (re.compile(r"failed to allocate Metal buffer"), "device"),
    (re.compile(r"ggml_metal\w*: error: failed to allocate buffer, size = *(?P<size>[\d.]+) MiB"), "device"),
    (re.compile(r"failed to allocate (?P<buf>[\w.:\[\]-]+) buffer of size (?P<bytes>\d+)"), "auto"),
    (re.compile(r"unable to allocate (?P<buf>[\w.-]+) buffer"), "auto"),
    (re.compile(r"ErrorOutOfHostMemory|OutOfHostMemoryError", re.I), "host"),
    (re.compile(r"insufficient memory \(attempted to allocate (?P<mb>[\d.]+) MB\)"), "host"),
    (re.compile(r"Memory allocation of size (?P<bytes>\d+) failed"), "host"),
    (re.compile(r"cpu_buffer_type_alloc_buffer: failed to allocate buffer of size (?P<bytes>\d+)"), "host"),
    (re.compile(r"std::bad_alloc|\bbad_alloc\b|Cannot allocate memory"), "host"),
    (re.compile(r"failed to allocate memory for prompt cache state"), "host"),
]
_OOM_COMPONENT: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"failed to allocate buffer for kv cache|kv_cache", re.I), "the KV cache"),
    (re.compile(r"failed to allocate buffer for rs cache|memory_recurrent", re.I), "the recurrent state"),
    (re.compile(r"compute (?:pp |tg )?buffers|gallocr", re.I), "a compute buffer"),
    (re.compile(r"output buffer", re.I), "the output buffer"),
    (re.compile(r"unable to allocate \S+ buffer|llama_model_load", re.I), "the model weights"),
    (re.compile(r"prompt cache", re.I), "the host prompt cache (--cache-ram)"),
]
_HOST_BUFS = re.compile(r"^(?:CPU|.*_Host|.*Host|CPU_\w+)$")
_MTP_CONTEXT = re.compile(r"creating MTP draft context")


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
) -> Failure:
    """Classify an ending from Popen's return code (negative = killed by that signal) and the log.

    `was_ready` says the server had answered /health 200 before it ended (so a crash happened while
    serving). `known_options` (from `server.binary`) lets unknown flags get a "did you mean".
    """
    lines = [ln.rstrip("\r\n") for ln in log_lines]
    msgs = [strip_prefix(ln) for ln in lines]
    sig = -exit_code if exit_code is not None and exit_code < 0 else None
    f = _classify(exit_code, sig, lines, msgs, argv, was_ready, known_options)
    return replace(f, raw_log_path=raw_log_path, exit_code=exit_code, signal=sig)


def _classify(
    exit_code: int | None,
    sig: int | None,
    lines: list[str],
    msgs: list[str],
    argv: Sequence[str] | None,
    was_ready: bool,
    known: Iterable[str] | None,
) -> Failure:
    for raw, m in zip(lines, msgs):
        f = _argument_failure(raw, m, known)
        if f:
            return f
    f = _oom_failure(lines, msgs)
    if f:
        return f
    f = _model_failure(lines, msgs, argv)
    if f:
        return f
    for raw, m in zip(lines, msgs):
        if _NO_MTP.search(m):
            model = _model_path(msgs, argv)
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


def _oom_failure(lines: list[str], msgs: list[str]) -> Failure | None:
    for i, (raw, m) in enumerate(zip(lines, msgs)):
        for pat, where in _OOM_PATTERNS:
            om = pat.search(m)
            if not om:
                continue
            gd = om.groupdict()
            buf = gd.get("buf")
            if where == "auto":
                where = "host" if buf and _HOST_BUFS.match(buf) else "device"
            device = buf or (f"CUDA{gd['dev']}" if gd.get("dev") else None)
            if device is None:
                device = _device_from_context(msgs, i) if where == "device" else "host RAM"
            size = gd.get("size") or gd.get("mb")
            if size is None and gd.get("bytes"):
                size = f"{int(gd['bytes']) / 1048576:.2f}"
            component = _component(msgs, i)
            draft = any(_MTP_CONTEXT.search(x) for x in msgs[:i])
            what = f" while allocating {component}" if component else ""
            if draft:
                what += " of the MTP draft context" if component else " (after the MTP draft context was created)"
            amount = f" ({size} MiB)" if size else ""
            if where == "device":
                return Failure(
                    FailureKind.OOM_DEVICE,
                    f"Out of GPU memory on {device or 'the GPU'}{what}{amount}: the weights, KV cache and compute "
                    "buffers do not fit in free VRAM.",
                    device,
                    "Lower -c (context), quantize the KV cache (-ctk/-ctv q8_0; for MTP also -ctkd/-ctvd q8_0), "
                    "use --fit on with a larger --fit-target, offload fewer layers (-ngl) or MoE experts to the CPU "
                    "(--n-cpu-moe), or a smaller -ub; close other programs that use the GPU.",
                    evidence=raw,
                )
            return Failure(
                FailureKind.OOM_HOST,
                f"Out of host memory{what}{amount}: the system could not allocate RAM for llama-server.",
                device if device != "host RAM" else None,
                "Free RAM, lower -c or --cache-ram (the host prompt cache, default 8192 MiB), keep the default "
                "--load-mode (mmap) instead of 'none', or offload more to the GPU.",
                evidence=raw,
            )
    return None


def _device_from_context(msgs: list[str], i: int) -> str | None:
    for m in reversed(msgs[max(0, i - 5): i + 3]):
        dm = re.search(r"current device: (\d+)", m)
        if dm:
            return f"CUDA{dm.group(1)}"
        if "vulkan" in m.lower():
            return "Vulkan"
        if "metal" in m.lower():
            return "Metal"
    return None


def _component(msgs: list[str], i: int) -> str | None:
    for m in msgs[i: i + 5]:
        if "buffer size =" in m:  # an INFO size line, not the failed allocation
            continue
        for pat, name in _OOM_COMPONENT:
            if pat.search(m):
                return name
    return None


def _model_path(msgs: list[str], argv: Sequence[str] | None) -> str | None:
    for m in msgs:
        lm = _LOADING.search(m)
        if lm:
            return lm.group(1)
    return opt_value(argv or [], "-m")


def _model_failure(lines: list[str], msgs: list[str], argv: Sequence[str] | None) -> Failure | None:
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
            path = _model_path(msgs, argv)
            return Failure(FailureKind.NOT_GGUF, f"{path or 'The model file'} is not a GGUF file (it starts with "
                           f"'{bm.group(1)}' instead of 'GGUF').", path,
                           "Give -m a .gguf model; safetensors/PyTorch checkpoints must be converted with "
                           "llama.cpp's convert_hf_to_gguf.py first, and an HTML page saved as .gguf means the "
                           "download failed.", evidence=raw)
        if _TRUNCATED.search(m):
            path = _model_path(msgs, argv)
            tm = _TENSOR_OOB.search(m)
            detail = f" (tensor '{tm.group(1)}' lies past the end of the file)" if tm else ""
            return Failure(FailureKind.TRUNCATED_GGUF, f"{path or 'The model file'} is truncated or corrupted{detail}.",
                           path, "Download the file again (an interrupted download leaves a partial file) and "
                           "compare its size or checksum with the source.", evidence=raw)
        am = _UNKNOWN_ARCH.search(m)
        if am:
            path = _model_path(msgs, argv)
            return Failure(FailureKind.UNSUPPORTED_MODEL, f"This llama-server does not support the model "
                           f"architecture '{am.group(1)}' of {path or 'the model'}.", path,
                           "Update llama-server to a build that supports it.", evidence=raw)
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
