"""The CLI's side of planning a model that is not on this disk: fetch its header, say what it cost."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from tui.cli._common import fail
from tui.core.config.text import safe_text


@dataclass
class ForPlan:
    """A remote model ready to plan: its `Fetched` copy and the flags pointed at it (`-m COPY`)."""

    fetched: Any
    settings: Any
    server_args: list[str]


def fetch_for_plan(settings: Any, server_args: list[str], *, refresh: bool = False, quiet: bool = False) -> ForPlan | int:
    """Read the header of the remote model `settings` name (progress on stderr unless `quiet`);
    an exit code after a one-sentence error."""
    from tui.core.options.reader import without
    from tui.core.remote.errors import RemoteError
    from tui.core.remote.fetch import fetch_model
    from tui.core.remote.hub import sidecar_options
    from tui.core.remote.source import REMOTE_OPTIONS, local_settings, source_of

    source = source_of(settings)
    if source is None:
        return fail("plan needs a model: -m FILE.gguf, -hf REPO[:QUANT] or -mu URL")

    def progress(msg: str) -> None:
        if not quiet:
            print(f"mtp-tune: {safe_text(msg)}", file=sys.stderr)

    try:
        fetched = fetch_model(source, refresh=refresh, progress=progress, sidecar_opts=sidecar_options(settings))
    except (RemoteError, ValueError) as exc:
        return fail(str(exc))
    local = local_settings(settings, fetched.path)
    args = [*without(server_args, "--hf-repo", "--model", *REMOTE_OPTIONS), "-m", str(fetched.path)]
    return ForPlan(fetched, local, args)
