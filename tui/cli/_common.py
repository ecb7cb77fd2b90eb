"""Helpers shared by the subcommands: error printing, JSON output and the llama-server flag check."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
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


def experiment_arguments(p: argparse.ArgumentParser, what: str, json_help: str) -> None:
    """The flags `sweep` and `tune` share (where the best is saved, a fresh start of the `what`, --json,
    the server, its load wait, the results store), then every other flag goes to llama-server."""
    p.add_argument("--save-best", metavar="NAME", help="save the best as profile NAME and as section [NAME] of the preset INI")
    p.add_argument("--ini", metavar="PATH", help="preset INI for --save-best (default: presets.ini in the config dir)")
    p.add_argument("--fresh", action="store_true", help=f"forget the saved progress of this {what} and start over")
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--server-bin", metavar="PATH", help="llama-server binary (default: found or built by mtp-tune)")
    p.add_argument("--ready-timeout", type=float, default=180.0, metavar="S", help="seconds to wait for each load (default 180)")
    p.add_argument("--db", metavar="PATH", help="results database (default: the user data dir)")
    pass_unknown_to_server(p)


@dataclass
class Ran:
    """What `run_experiment` came back with: the experiment, its result (None when Ctrl-C stopped it
    before one), and whether Ctrl-C stopped it."""

    experiment: Any
    result: Any = None
    interrupted: bool = False


def run_experiment(server_bin: str | None, db: str | None, make: Callable[[Path, Any], Any], stop: Callable[[Any], None],
                   kept: str, grace_s: float, error_code: int) -> Ran | int:
    """Run a sweep or a tune from the command line: the server (`server_or_fail`), the results store
    (`--db`, closed after), the experiment `make(server path, store)` run on a thread while the main
    thread waits for Ctrl-C. On Ctrl-C `stop(experiment)`, say `kept` is kept, and wait `grace_s` for it
    to end. Waited on an Event, not `Thread.join`: on CPython 3.11 a join interrupted by Ctrl-C can mark
    the worker stopped while it still runs. The experiment's one error (`LabError`) is an exit code
    after its sentence (`error_code`, 130 when interrupted); anything else is raised."""
    from tui.core.lab.events import LabError  # the lab's modules stay out of `--help`

    found = server_or_fail(server_bin)
    if isinstance(found, int):
        return found
    store = store_or_fail(db)
    if isinstance(store, int):
        return store
    error: BaseException | None = None
    done = threading.Event()
    try:
        ran = Ran(make(Path(found.path), store))

        def body() -> None:
            nonlocal error
            try:
                ran.result = ran.experiment.run()
            except BaseException as e:  # noqa: BLE001 - handed to the main thread
                error = e
            finally:
                done.set()

        threading.Thread(target=body, name="command", daemon=True).start()
        try:
            while not done.wait(0.2):
                pass
        except KeyboardInterrupt:
            ran.interrupted = True
            stop(ran.experiment)
            print(f"\nmtp-tune: stopping; {kept} (run the same command to continue) ...", file=sys.stderr, flush=True)
            done.wait(grace_s)
    except LabError as e:
        return fail(str(e))
    finally:
        store.close()
    if isinstance(error, LabError):
        return fail(str(error), 130 if ran.interrupted else error_code)
    if error is not None:
        raise error
    return ran


def save_best(args: argparse.Namespace, best: Settings | None, interrupted: bool) -> tuple[Any, int]:
    """`--save-best NAME`: `best` as profile NAME and section [NAME] of the preset INI (`--ini`), not
    after Ctrl-C. (what was saved or None, 1 when it was asked for and not saved else 0)."""
    if not args.save_best or (interrupted and best is not None):
        return None, 0
    if best is None:
        print("mtp-tune: nothing measured, so no best configuration to save.", file=sys.stderr)
        return None, 1
    from tui.core.sweep.results import save_settings

    try:
        return save_settings(best, args.save_best, ini_path=args.ini), 0
    except Exception as e:  # noqa: BLE001 - ProfileError, IniWriteError: both one paragraph
        print(f"mtp-tune: the best configuration was not saved: {e}", file=sys.stderr)
        return None, 1


def saved_json(saved: Any) -> dict[str, str] | None:
    """What `--json` says of a saved best (`save_best`)."""
    return None if saved is None else {"profile": str(saved.profile_path), "ini": str(saved.ini_path),
                                       "section": saved.section}


def say_saved(saved: Any) -> None:
    if saved is not None:
        print(f"Saved the best as profile {saved.profile_path} and section [{saved.section}] of {saved.ini_path}.")
