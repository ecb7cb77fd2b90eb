"""Helpers shared by the subcommands: error printing, JSON output and the llama-server flag check."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tui.core.config.text import safe_text

if TYPE_CHECKING:
    from tui.core.options.settings import Settings


#: The llama-server options that name the model to load: a file, a Hugging Face repo, or a URL.
MODEL_OPTIONS = ("--model", "--hf-repo", "--model-url")


class ServerArgsError(ValueError):
    """llama-server flags that the one validator refuses; the message lists each problem by field."""


def fail(message: str, code: int = 2) -> int:
    """Print a one-paragraph error (never a traceback) and return the exit code. The message may quote
    a server or a file (a Hub file name, an error body): its control characters are shown escaped."""
    print(f"mtp-tune: {safe_text(message, keep_lines=True)}", file=sys.stderr)
    return code


def mib_arg(text: str) -> float:
    """argparse `type=` of a device size in MiB (`--rpc-mib`): a finite number from 1 MiB to the largest
    simulated device. A bad one is argparse's usage error (exit 2) naming the flag, before any plan."""
    from tui.core.gpu.profiles import MAX_DEVICE_MIB

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of MiB (e.g. 24576)") from None
    if not 1 <= v <= MAX_DEVICE_MIB:  # NaN fails both sides
        raise argparse.ArgumentTypeError(f"{text} MiB: a device has from 1 to {MAX_DEVICE_MIB} MiB (16 TiB)")
    return v


def workload_problem(model: str | None, requests: Sequence[tuple[str, int]]) -> str | None:
    """The refusal of a request (what gave it, its tokens) longer than the local model's training
    context (`tune.workload.beyond_training`); None when all fit or the header cannot be read here
    (the command's own model check names that file)."""
    from tui.core.planning.gguf_meta import GGUFError
    from tui.core.planning.gguf_reader import read_gguf
    from tui.core.tune.workload import beyond_training

    if not model:
        return None
    try:
        n_ctx_train = int(getattr(read_gguf(os.path.expanduser(model)).hparams, "n_ctx_train", 0) or 0)
    except (GGUFError, OSError, ValueError):
        return None
    return beyond_training(n_ctx_train, requests)


def counted(n: int, word: str, plural: str | None = None) -> str:
    """`1 slot`, `4 slots`, `0 passes`: a count and its noun in agreement (`plural` when not word + s)."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def split_server_args(parser: argparse.ArgumentParser, args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(this command's own tokens, llama-server's tokens), each in order.

    The command's own spellings win (`--n-predict` of `probe`); every other token is read with the one
    argv reader, llama-server's rules: `-hf repo` is llama-server's `-hf` (argparse alone would read
    `-h f`), and an option's value is the next token whatever it looks like (`-ngl -1`). Unknown
    `-x` tokens are llama-server's too (the validator names them); a bare word stays ours so
    argparse can refuse it. Everything after `--` is llama-server's.
    """
    from tui.core.options.reader import Occurrence, scan

    own = parser._option_string_actions  # argparse's own index of spellings (stable since 3.2)
    mine: list[str] = []
    server: list[str] = []
    i = 0
    while i < len(args):
        tok = str(args[i])
        if tok == "--":
            server.extend(str(a) for a in args[i + 1:])
            break
        name, eq, _ = tok.partition("=") if tok.startswith("--") else (tok, "", "")
        action = own.get(name)
        if action is not None:
            takes = 0 if eq or action.nargs == 0 else 1
            if action.nargs == "?" and (i + 1 >= len(args) or str(args[i + 1]).startswith("-")):
                takes = 0
            mine.extend(str(a) for a in args[i:i + 1 + takes])
            i += 1 + takes
            continue
        first = scan(list(args[i:i + 2]))[0]
        if isinstance(first, Occurrence):
            server.extend(str(a) for a in args[i:i + first.end])
            i += first.end
        elif tok.startswith("-") and len(tok) > 1:
            server.append(tok)
            i += 1
        else:
            mine.append(tok)
            i += 1
    return mine, server


def pass_unknown_to_server(p: argparse.ArgumentParser) -> None:
    """Make `p` hand every llama-server token to `args.server_args`, in order (`split_server_args`).

    llama-server's flags are open-ended, so `mtp-tune plan|serve|probe|sweep -m F -c 4096 -fa on` and
    the TUI itself pass `-c 4096 -fa on` through; abbreviations are off so `--server...` never
    swallows one of ours.
    """
    p.set_defaults(server_args=[])
    p.allow_abbrev = False
    parse_known = p.parse_known_args

    def parse_known_args(args: Any = None, namespace: Any = None) -> tuple[Any, list[str]]:
        mine, server = split_server_args(p, list(sys.argv[1:] if args is None else args))
        ns, extras = parse_known(mine, namespace)
        ns.server_args = list(getattr(ns, "server_args", []) or []) + server + extras
        return ns, []

    p.parse_known_args = parse_known_args  # type: ignore[method-assign]


def check_server_args(server_args: Sequence[str], *, base: Settings | None = None, warn: bool = True,
                      device_count: int | None = None) -> Settings:
    """The llama-server flags of any command as Settings, through the form's validator (`check_argv`).

    Raises `ServerArgsError` with one line per refused value, in the validator's words, which name
    the option and what it accepts (`cache-type-k: unknown cache type 'q9'; llama-server accepts
    f32, ...`), before a plan is computed or a server starts: every command exits 2 on it. An option
    llama-server does not have (`--ctk`) is refused too, with the nearest one it has: the server
    would refuse to start with it, and a plan that left it out would answer another question than
    the one typed. Warnings go to stderr.
    A missing model is left to the caller, which knows its own usage line. `device_count` (a
    DeviceSet's count: RPC devices count) turns on the per-device rules (-ts, --fit-target, -mg).
    """
    from tui.core.options.spec import normalize_spelling
    from tui.core.options.validate import check_argv, errors

    settings, problems = check_argv(list(server_args), base=base, device_count=device_count, require_model=False,
                                    unknown="error")
    # An unknown option that came with `base` (the last launch's or a profile's extra arguments, which
    # the form keeps with a warning) was not typed here: named, but not refused on this command line.
    typed = {normalize_spelling(str(a).split("=", 1)[0]) for a in server_args if str(a).startswith("-")}
    problems = [replace(p, severity="warning") if p.option and p.option not in typed else p for p in problems]
    bad = errors(problems)
    if bad:
        raise ServerArgsError("\n  ".join(p.message for p in bad))
    if warn:
        for p in problems:
            print(f"mtp-tune: warning: {p.message}", file=sys.stderr)
    return settings


def names_a_model(server_args: Sequence[str]) -> bool:
    """True when the llama-server flags give a model (`-m`, `-hf` or `-mu`), read as the server reads them."""
    from tui.core.options import reader

    return any(reader.values(list(server_args), name) for name in MODEL_OPTIONS)


def server_or_fail(server_bin: str | None) -> Any:
    """The llama-server a command runs (`provision.ensure_server`: built on first use, its progress on
    stderr), or an exit code after the one-sentence reason it cannot be had."""
    from tui.core.server.provision import ProvisionError, ensure_server

    try:
        return ensure_server(server_bin, progress=lambda ev: print(f"[build] {ev.phase}: {ev.message}",
                                                                 file=sys.stderr, flush=True))
    except ProvisionError as exc:
        return fail(str(exc))


def store_or_fail(db: str | None) -> Any:
    """The results store a command writes (`results.store.open_store`), or an exit code after its reason."""
    from tui.core.results.store import StoreError, open_store

    try:
        return open_store(db)
    except StoreError as exc:
        return fail(str(exc))


@dataclass
class Interruptible:
    """What `run_interruptible` came back with: the work's result or error, and whether Ctrl-C stopped it."""

    result: Any = None
    error: BaseException | None = None
    interrupted: bool = False


def run_interruptible(work: Callable[[], Any], stop: Callable[[], None], what: str, grace_s: float) -> Interruptible:
    """Run `work` on a thread while the main thread waits for Ctrl-C; on Ctrl-C call `stop`, say `what`
    is kept, and wait `grace_s` for the work to end. Waited on an Event, not `Thread.join`: on CPython
    3.11 a join interrupted by Ctrl-C can mark the worker stopped while it still runs."""
    out = Interruptible()
    done = threading.Event()

    def body() -> None:
        try:
            out.result = work()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            out.error = e
        finally:
            done.set()

    threading.Thread(target=body, name="command", daemon=True).start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        out.interrupted = True
        stop()
        print(f"\nmtp-tune: stopping; {what} (run the same command to continue) ...", file=sys.stderr, flush=True)
        done.wait(grace_s)
    return out
