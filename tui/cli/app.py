"""Open the TUI: `mtp-tune [-m FILE | --profile NAME | --demo | --attach URL] [--gpus SPEC]`."""

from __future__ import annotations

import argparse
import sys

from tui.cli._common import fail
from tui.core import provision

COMMAND = "app"
HELP = "open the terminal UI (the default when no command is given)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", help="GGUF model to tune (no model: the demo)")
    p.add_argument("--demo", action="store_true", help="tiny generated MTP model, CPU server, simulated GPUs")
    p.add_argument("--attach", metavar="URL", help="watch and probe an already running llama-server")
    p.add_argument("--profile", help="start from a saved profile")
    p.add_argument("--gpus", metavar="SPEC", help="simulated hardware: a profile name, 2x16GiB, or cpu")
    p.add_argument("--server-bin", help="llama-server binary to use")
    p.add_argument("--theme", help="colour theme")
    p.add_argument("--no-launch", action="store_true", help="do not launch the server on start in demo mode")


def _progress(ev: provision.BuildProgress) -> None:
    step = f" {ev.done}/{ev.total}" if ev.total else ""
    print(f"[{ev.phase}{step}] {ev.message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    demo = args.demo or not (args.model or args.attach or args.profile)
    setup = None
    if demo:
        from tui.core.demo import prepare_demo

        try:
            setup = prepare_demo(args.gpus or "rtx3060-laptop-6g", args.server_bin, progress=_progress)
        except provision.ProvisionError as exc:
            return fail(str(exc), 1)
        except KeyError as exc:
            return fail(str(exc.args[0]))
    try:
        from tui.ui.app import run_app
    except ImportError as exc:  # pragma: no cover - only when the UI package is broken
        return fail(f"the terminal UI could not be loaded: {exc}", 1)
    return run_app(args, setup)
