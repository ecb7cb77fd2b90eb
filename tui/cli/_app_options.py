"""CLI arguments -> AppOptions: where the model, the settings, the server and the devices come from.

`mtp-tune` starts from a `--profile` or the last settings used, with the command line's llama-server
flags (`-m FILE`, `-hf REPO`, `-c 32768`, ...) on top; `--demo` uses the
generated tiny model, the provisioned CPU server and a simulated GPU profile; `--attach URL` watches
and probes a server mtp-tune did not start.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from tui.core.gpu.profiles import parse_gpus_spec
from tui.core.options.settings import Settings
from tui.ui.profiles import controller as profiles
from tui.ui.options import AppOptions


#: The demo's CPU server generates a few dozen tokens per second per core: shorter generations keep a
#: probe run under a minute (the hygiene warning about short generations says what this costs).
DEMO_N_PREDICT = 128


def demo_settings(model: Path) -> Settings:
    """The demo's starting point: MTP on, one slot (honest measurements), the demo model's training
    context (4096: llama-server caps a slot there, so a longer one would only allocate unusable KV)."""
    return Settings(model=str(model), ctx_size=4096, parallel=1, spec_type=["draft-mtp"], spec_draft_n_max=3)


def _profile_settings(name: str) -> Settings:
    from tui.core.presets.profiles import ProfileError, load_profile

    try:
        return load_profile(name)
    except (ProfileError, OSError) as exc:
        raise ValueError(f"--profile {name}: {exc}") from exc


def _with_flags(settings: Settings, server_args: list[str]) -> Settings:
    """The command line's llama-server flags on top of `settings`, read and checked as every command
    reads them (`check_server_args`: the one argv reader and the form's validator); a refused value
    stops the TUI before it opens, naming the flag."""
    if not server_args:
        return settings
    from tui.cli._common import MODEL_OPTIONS, check_server_args, names_a_model
    from tui.core.options import reader

    if names_a_model(server_args):  # a new model replaces the old one, whichever way each was named
        settings = dataclasses.replace(settings, model=None, hf_repo=None, extra_args=reader.without(
            list(settings.extra_args), *MODEL_OPTIONS, "--hf-file"))
    out = check_server_args(server_args, base=settings, warn=False)  # ServerArgsError is a ValueError
    if out.model:
        out = dataclasses.replace(out, model=str(Path(out.model).expanduser()))
    return out


def _checked(settings: Settings, source: str) -> Settings:
    """The settings a launch starts from, through the form's validator: refused values stop here."""
    from tui.core.options.validate import errors, validate

    bad = errors(validate(settings, require_model=False))
    if bad:
        raise ValueError(f"{source} cannot be used:\n  " + "\n  ".join(p.message for p in bad))
    return settings


def _probe_options(args: argparse.Namespace, demo: bool) -> dict[str, Any]:
    repeat = getattr(args, "probe_repeat", None)
    n_predict = getattr(args, "probe_n_predict", None)
    if repeat is not None and repeat < 1:
        raise ValueError(f"--probe-repeat {repeat}: give at least 1 (3 or more to see the spread)")
    if n_predict is not None and n_predict < 1:
        raise ValueError(f"--probe-n-predict {n_predict}: give at least 1 token")
    suite = getattr(args, "suite", None)
    if suite and suite not in ("tasks", "long-prompt", "full"):
        path = Path(suite).expanduser()
        if not path.is_file():
            raise ValueError(f"--suite {suite}: not a built-in suite (tasks, long-prompt, full) and no such file")
        suite = str(path.resolve())
    return {
        "probe_suite": suite,
        "probe_repeat": repeat or 3,
        "probe_n_predict": n_predict or (DEMO_N_PREDICT if demo else 512),
    }


def options_from_args(args: argparse.Namespace, setup: Any = None) -> AppOptions:
    """Raises ValueError with a one-paragraph message for bad arguments."""
    server_args = list(getattr(args, "server_args", None) or [])
    theme = getattr(args, "theme", None)
    gpus = getattr(args, "gpus", None)
    server_bin: Path | None = None
    hardware = None
    simulate = False
    if gpus:
        hardware = parse_gpus_spec(gpus)  # ValueError names the bad part
        simulate = True
    if setup is not None:
        settings = demo_settings(setup.model)
        last = None if getattr(args, "demo", False) else profiles.last_launched()
        if last is not None and last.model and Path(last.model) == Path(setup.model):
            settings = last  # the demo reopened by plain `mtp-tune`: as it was last launched
        if getattr(args, "profile", None):
            settings = dataclasses.replace(_profile_settings(args.profile), model=str(setup.model))
            _checked(settings, f"--profile {args.profile}")
        settings = _with_flags(settings, server_args)
        return AppOptions(
            settings=settings, server_bin=setup.server, hardware=setup.hardware, simulate=True, demo=True,
            theme=theme, autolaunch=not getattr(args, "no_launch", False),
            title=f"mtp-tune demo · {setup.hardware.key} (simulated) · {setup.model.name}",
            **_probe_options(args, demo=True),
        )
    if getattr(args, "attach", None):
        if server_args:
            raise ValueError(f"--attach watches a server that is already running, so llama-server flags "
                             f"({' '.join(server_args[:3])} ...) cannot apply; start it with them instead")
        settings = Settings(host="127.0.0.1")
        return AppOptions(settings=settings, attach_url=args.attach, hardware=hardware, simulate=simulate,
                          theme=theme, title=f"mtp-tune · attached to {args.attach}", **_probe_options(args, False))
    if getattr(args, "profile", None):
        settings = _profile_settings(args.profile)
    else:
        settings = profiles.last_launched() or Settings()
    settings = _with_flags(settings, server_args)
    if getattr(args, "profile", None):
        _checked(settings, f"--profile {args.profile}")
    from tui.core.server import provision

    try:
        found = provision.find_server(getattr(args, "server_bin", None))
    except provision.ProvisionError as exc:
        raise ValueError(str(exc)) from exc
    server_bin = found.path if found else None
    model = Path(settings.model).name if settings.model else settings.hf_repo or "no model yet"
    return AppOptions(settings=settings, server_bin=server_bin, hardware=hardware, simulate=simulate,
                      theme=theme, title=f"mtp-tune · {model}", **_probe_options(args, False))
