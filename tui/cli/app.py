"""Open the TUI: `mtp-tune [-m FILE | -hf REPO[:QUANT] | -mu URL | --profile NAME | --demo | --attach URL]
[llama-server flags] [--gpus SPEC] [--theme NAME]`.

llama-server's flags (any of its spellings, read by the one argv reader as `plan`, `serve`, `probe` and
`sweep` read them) go into the form on top of where the settings come from: `--profile`, the demo's, or
the last launched ones. Without a model, --profile or --attach, the last launched settings are
reopened; with none recorded (or with --demo), the demo starts: a generated tiny MTP model on a real
CPU llama-server, with a simulated GPU profile, so the whole loop works on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from tui.cli._common import fail, names_a_model, pass_unknown_to_server
from tui.core.server import provision

COMMAND = "app"
HELP = "open the terminal UI (the default when no command is given)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--demo", action="store_true", help="tiny generated MTP model, CPU server, simulated GPUs")
    p.add_argument("--attach", metavar="URL", help="watch and probe an already running llama-server")
    p.add_argument("--profile", help="start from a saved profile")
    p.add_argument("--gpus", metavar="SPEC", help="simulated hardware: a profile name, 2x16GiB, or cpu")
    p.add_argument("--server-bin", help="llama-server binary to use")
    p.add_argument("--theme", help="colour theme (mtp-dark, mtp-light, mtp-okabe-ito, or a user theme)")
    p.add_argument("--no-launch", action="store_true", help="do not launch the server on start in demo mode")
    p.add_argument("--no-exact", action="store_true",
                   help="show only the instant memory estimate (no llama.cpp dry runs for exact figures)")
    p.add_argument("--suite", metavar="NAME|FILE", help="probe suite chosen at start: tasks, long-prompt, full, or a file")
    p.add_argument("--probe-repeat", type=int, metavar="N", help="passes per probe run (default 3)")
    p.add_argument("--probe-n-predict", type=int, metavar="N",
                   help="tokens generated per probe request (default 512; the demo uses 128)")
    pass_unknown_to_server(p)  # -m FILE, -hf REPO, -c 32768 ...: llama-server's, into the form


def _progress(ev: provision.BuildProgress) -> None:
    step = f" {ev.done}/{ev.total}" if ev.total else ""
    print(f"[{ev.phase}{step}] {ev.message}", file=sys.stderr, flush=True)


def _wants_demo(args: argparse.Namespace) -> bool:
    """--demo; or nothing to reopen; or the last launch was the demo (its generated model): running
    the README's first command again reopens the demo with its simulated GPU, not the bare model on
    a machine without one."""
    if args.demo:
        return True
    if names_a_model(args.server_args) or args.attach or args.profile:
        return False
    from tui.ui.profiles.controller import last_launched

    last = last_launched()
    return last is None or not last.model or not Path(last.model).is_file() or _is_demo_model(last.model)


def _is_demo_model(model: str) -> bool:
    """A model the demo generated (they live in the cache's models/ folder, see tui.core.demo.prepare)."""
    from tui.core.config.paths import cache_dir

    try:
        return Path(model).expanduser().resolve().parent == (cache_dir() / "models").resolve()
    except OSError:
        return False


def run(args: argparse.Namespace) -> int:
    setup = None
    if _wants_demo(args):
        from tui.core.demo.prepare import DEFAULT_PROFILE, prepare_demo
        from tui.core.gpu.profiles import PROFILES, parse_gpus_spec

        profile = args.gpus if args.gpus in PROFILES else DEFAULT_PROFILE
        try:
            setup = prepare_demo(profile, args.server_bin, progress=_progress)
        except provision.ProvisionError as exc:
            return fail(str(exc), 1)
        except KeyError as exc:
            return fail(str(exc.args[0]))
        if args.gpus and args.gpus not in PROFILES:
            try:
                hardware = parse_gpus_spec(args.gpus)
            except ValueError as exc:
                return fail(str(exc))
            if hardware is None:
                return fail("--gpus cpu: the demo needs at least one simulated GPU; give a profile or a size")
            setup = dataclasses.replace(setup, hardware=hardware)
    return _leave(run_app(args, setup))


def run_app(args: argparse.Namespace, setup: Any) -> int:
    """Run the TUI for the parsed arguments (`setup` is a DemoSetup in demo mode)."""
    from tui.cli._app_options import options_from_args

    try:
        from tui.ui.app import make_app
    except ImportError as exc:  # pragma: no cover - only when the UI package is broken
        return fail(f"the terminal UI could not be loaded: {exc}", 1)
    try:
        options = options_from_args(args, setup)
    except ValueError as exc:
        return fail(str(exc))
    if getattr(args, "no_exact", False):
        options = dataclasses.replace(options, exact=False)
    return int(make_app(options).run() or 0)


def _is_the_command() -> bool:
    """True when this process is `mtp-tune` itself (the console script or `python -m tui.cli`), not a
    test or script calling `run()` in-process."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return Path(getattr(main, "__file__", None) or "").name == "mtp-tune" or (
        spec is not None and spec.name == "tui.cli.__main__")


def _leave(code: int) -> int:
    """End the process as soon as the screen is gone (the server is already stopped).

    The interpreter's own teardown of Textual's object graph takes half a second or more on a busy
    machine, after the user pressed q; exit handlers (the child cleanup among them) still run, the
    streams are flushed, then the process ends without that teardown.
    """
    if not _is_the_command():
        return code
    import atexit
    import os

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
