"""A model llama-server could not download (`-hf`, `-mu`), read from its log into one sentence and a fix.

llama-server b11434 reports a download failure in two ways. A file transfer that fails ends the
launch at once: "failed to download model: Download 'URL' failed with status code: N"
(server.cpp, from download.cpp `common_download_run_tasks`; N is the HEAD's status, or -1 for no
answer or three broken attempts). The Hub's API failing (a 404 repo, a gated 401, no network) is
only logged by hf-cache.cpp ("get_repo_commit: error: GET failed (401): ..."); llama.cpp then falls
back to its cache, finds nothing, and fails to load an empty model path, so that line is the cause
only when no model was ever opened.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from tui.core.options.reader import value as opt_value
from tui.core.server.download import DownloadLine, DownloadSnapshot, LineKind, file_name, human_bytes, read_line
from tui.core.server.failures import Failure, FailureKind

_AVAILABLE = re.compile(r"^ - (.+\.gguf)$")  # download.cpp list_available_gguf_files, after "Available GGUF files:"
_OPENED = "llama_model_loader: loaded meta data"
_TOKEN_FIX = "pass a read token with -hft TOKEN or the HF_TOKEN environment variable"


def _hide_user(url: str) -> str:
    return re.sub(r"//[^/@]+@", "//****:****@", url)


def download_failure(lines: list[str], msgs: list[str], argv: Sequence[str] | None, *,
                     token_given: bool = False) -> Failure | None:
    """The download failure the log shows, as a Failure (None if the launch did not fail downloading).

    `token_given`: the launch passed a Hugging Face token (HF_TOKEN in the server's environment, where
    the supervisor puts `-hft`: the argv never holds it); a `-hft` in `argv` counts too."""
    read = [(raw, line) for raw in lines if (line := read_line(raw)) is not None]
    if not read:
        return None
    argv = list(argv or [])
    repo = (opt_value(argv, "--hf-repo") or "").split(":", 1)[0]
    errors = [line for _, line in read if line.kind == LineKind.ERROR
              or (line.kind == LineKind.FAILED and line.detail.startswith("unable to"))]
    bad_token = any(line.kind == LineKind.HUB and "invalid token" in line.detail for _, line in read)
    token_given = token_given or opt_value(argv, "--hf-token") is not None
    for raw, line in read:
        if line.kind != LineKind.FAILED:
            continue
        f = _given_up(line, errors, repo, argv, (token_given, bad_token), msgs)
        if f is not None:
            return Failure(f.kind, f.message, f.flag_or_file, f.fix, evidence=raw)
    if any(_OPENED in m for m in msgs):
        return None  # the Hub could not be asked, but a cached copy was found and loaded
    for raw, line in read:
        if line.kind == LineKind.HUB and line.detail.startswith(("GET failed", "HTTPLIB failed")):
            return _hub(line, repo or "the repository", (token_given, bad_token), raw)
    return None


def _fail(message: str, flag: str | None, fix: str) -> Failure:
    return Failure(FailureKind.DOWNLOAD_FAILED, message, flag, fix)


def _token_fix(token: tuple[bool, bool], repo: str) -> str:
    """The fix for a 401/403, by `token`: (a token was given, llama-server called it invalid)."""
    given, bad_token = token
    if bad_token:
        return ("llama-server ignored the token given: a Hugging Face token is hf_ followed by at least 34 letters "
                "and digits; " + _TOKEN_FIX + ".")
    if given:
        return f"The token given (-hft or HF_TOKEN) was refused: make sure it may read {repo} and that its terms were accepted."
    return f"Accept the repository's terms on huggingface.co if it is gated, and {_TOKEN_FIX}."


def _hub(line: DownloadLine, repo: str, token: tuple[bool, bool], raw: str) -> Failure:
    code, detail = line.number, line.detail.split(": ", 1)[-1].strip()
    if code is None:  # HTTPLIB failed: the Hub's address did not answer
        f = _fail(f"llama-server could not download {repo}: it could not reach the Hugging Face Hub ({detail}).",
                  "-hf", "Check the network (and HF_ENDPOINT or MODEL_ENDPOINT, if set); a model downloaded before "
                  "also starts with --offline.")
    elif code in (401, 403):
        f = _fail(f"llama-server could not download {repo}: the Hub answered {code} ({detail}), so the repository "
                  "is gated or private.", "-hf", _token_fix(token, repo))
    elif code == 404:
        f = _fail(f"llama-server could not download {repo}: the Hub has no repository {repo} (404 {detail}).", "-hf",
                  "Check the -hf spelling (user/model[:quant]); a private repository also answers 404 without a "
                  f"token, so {_TOKEN_FIX} if it is yours.")
    else:
        f = _fail(f"llama-server could not download {repo}: the Hub answered {code} ({detail}).", "-hf",
                  "Try again in a while; the Hub's status page says whether it is down.")
    return Failure(f.kind, f.message, f.flag_or_file, f.fix, evidence=raw)


def _available(msgs: Sequence[str]) -> list[str]:
    return [am.group(1) for m in msgs if (am := _AVAILABLE.match(m))]


def _given_up(line: DownloadLine, errors: list[DownloadLine], repo: str, argv: Sequence[str], token: tuple[bool, bool],
              msgs: Sequence[str]) -> Failure | None:
    detail = line.detail
    if detail.startswith("no GGUF files found") or detail.endswith("not found in repository"):
        avail = _available(msgs)
        spec = opt_value(list(argv), "--hf-repo") or repo
        tag = spec.split(":", 1)[1] if ":" in spec else ""
        what = f"file {line.path}" if line.path else f"GGUF model file for the quant {tag}" if tag else "GGUF model file"
        pick = f"Pick one of {', '.join(avail[:8])}" if avail else "Look at the repository's files"
        return _fail(f"llama-server could not download {line.url or repo}: the repository has no {what}.",
                     "-hff" if line.path else "-hf", f"{pick} (-hf {repo}:QUANT, or -hff FILE).")
    if "offline mode" in detail:
        return _fail(f"--offline was given, but {file_name(line.path)} is not in llama.cpp's cache ({line.path}).",
                     "--offline", "Start once without --offline so llama-server downloads it.")
    if line.number is None:
        if detail.startswith(("failed to download model", "failed to fetch model metadata")):
            reason = detail.split(": ", 1)[-1].strip()
            return _fail(f"llama-server could not download the model: {reason}.".replace("..", "."), None,
                         "Check the -hf/-mu value and the network.")
        return None  # "download failed after N attempts" etc.: the final "failed to download model" line follows
    return _url_failure(_hide_user(line.url), line.number, errors, token, repo)


def _url_failure(url: str, code: int, errors: list[DownloadLine], token: tuple[bool, bool],
                 repo: str) -> Failure:
    name = file_name(url)
    host = urlsplit(url).netloc or url
    local = next((e.detail for e in errors if e.detail.startswith(("error ", "unable to"))), None)
    if local is not None:
        path = local.split(": ", 1)[-1].split(" to ", 1)[0]
        disk = " (is the disk full?)" if "writing" in local else ""
        return _fail(f"llama-server could not download {name}: it could not write {path}{disk}.", path,
                     "Check that the folder is writable and that the disk has room for the model.")
    if code == -1:
        broke = next((e.detail for e in reversed(errors) if e.detail.startswith("download failed:")), None)
        if broke is not None:
            why = broke.removeprefix("download failed: ").rsplit(" (status", 1)[0]
            return _fail(f"llama-server could not download {name}: the transfer from {host} broke off ({why}) "
                         "three times.", "-hf" if repo else "-mu",
                         "Check the network and start again: the part already downloaded is kept and resumed.")
        return _fail(f"llama-server could not download {name}: nothing answered at {host}.", "-hf" if repo else "-mu",
                     "Check the network and the address (HF_ENDPOINT for -hf, the URL for -mu).")
    if code in (401, 403):
        return _fail(f"llama-server could not download {name}: {url} answered {code}, so it needs a token.",
                     "-hf" if repo else "-mu", _token_fix(token, repo or host))
    if code == 404:
        return _fail(f"llama-server could not download {name}: {url} answered 404 (no such file).",
                     "-hf" if repo else "-mu", "Check the URL, or the quant or file asked for in the repository.")
    return _fail(f"llama-server could not download {name}: {url} answered {code}.", "-hf" if repo else "-mu",
                 "Try again in a while, or check the URL.")


def download_stalled(summary: DownloadSnapshot | None, seconds: float, raw_log_path: Path | None = None) -> Failure:
    """A download under way made no progress for the whole ready timeout (the supervisor stops it)."""
    if summary is None:
        where, name = "", "the model"
    else:
        name = summary.name
        of = f" of {human_bytes(summary.total)}" if summary.total else ""
        where = f" (it stopped at {human_bytes(summary.bytes)}{of})"
    return Failure(FailureKind.DOWNLOAD_FAILED,
                   f"llama-server's download of {name} made no progress for {seconds:g} s{where}, so mtp-tune "
                   "stopped it.", None,
                   "Check the network; the partial .downloadInProgress file is kept and the next launch resumes "
                   "it. On a slow link, raise the ready timeout.", raw_log_path=raw_log_path)
