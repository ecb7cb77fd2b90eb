"""The model a tune reads and plans: a file on disk, or for `-hf`/`-mu` the header copy of the remote one.

A tune of a model that is not on the disk yet needs no download to start: its space comes from the
GGUF header and every candidate is planned (llama.cpp's dry run) on the header copy that `plan -hf`
reads by HTTP ranges (cached, so a second tune asks nothing). The launches keep `-hf`/`-mu`:
llama-server downloads the file at the first launch and reuses its cache afterwards, as it would
for the user. One sentence for every reason it cannot go ahead; the CLI and the TUI both ask here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tui.core.options.settings import Settings


class ModelError(ValueError):
    """No model the tune can read: the message says what to give instead."""


@dataclass(frozen=True)
class TuneModel:
    """`path`: the GGUF to read the header of; `remote`: it is a remote model's header copy, which the
    planner is pointed at in the launches' place (`header`); `notes` for the report."""

    path: Path
    remote: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def header(self) -> Path | None:
        return self.path if self.remote else None


def tune_model(base: Settings, *, where: str = "-m", progress: Callable[[str], None] | None = None) -> TuneModel:
    """The model `base` names, as llama-server reads the flags (-hf wins over -m; -mu downloads to -m).

    `where` names the field in errors ("-m" for the CLI, "the form's model field" for the TUI).
    Raises ModelError."""
    from tui.core.remote.errors import RemoteError
    from tui.core.remote.fetch import fetch_model
    from tui.core.remote.hub import sidecar_options
    from tui.core.remote.source import source_of

    source = source_of(base)
    if source is None:
        if not base.model:
            raise ModelError(f"tune needs a model: a file ({where} FILE.gguf), -hf REPO[:QUANT] or -mu URL.")
        path = Path(base.model).expanduser()
        if not path.is_file():
            raise ModelError(f"the model file {base.model} does not exist (or is not a file); check {where}.")
        return TuneModel(path)
    try:
        fetched = fetch_model(source, progress=progress, sidecar_opts=sidecar_options(base))
    except RemoteError as e:
        raise ModelError(str(e)) from None
    size_gib = fetched.size / 2**30
    notes = [f"{source.label} is planned from its header ({fetched.header_bytes / 2**20:.1f} MiB read by HTTP ranges"
             f"{', cached' if fetched.cached else ''}); llama-server downloads {fetched.name} ({size_gib:.2f} GiB) at the "
             "first launch unless its cache has it, and every later launch reuses that copy."]
    extra = [s for s in fetched.sidecars_for(base) if not s.is_draft]
    if extra:
        names = ", ".join(f"{s.path} ({s.role})" for s in extra)
        notes.append(f"-hf also downloads and loads {names} at every launch, which the plan does not count; "
                     "add --no-mmproj to tune without it.")
    return TuneModel(fetched.path, True, tuple(notes))
