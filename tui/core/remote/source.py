"""Which remote model llama-server flags name (`-hf REPO[:QUANT]`, `-hff`, `-hft`, `-mu URL`), and the
same settings pointed at a local header copy so the planner and exact mode can read them."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from tui.core.options import reader
from tui.core.options.settings import Settings

#: the flags that name or open a remote model; a plan of the local copy drops them
REMOTE_OPTIONS = ("--model-url", "--hf-file", "--hf-token")


@dataclass(frozen=True)
class ModelSource:
    """A model not on this disk: `kind` is "url" (`-mu`) or "hf" (`-hf REPO[:QUANT]`, `-hff FILE`)."""

    kind: str
    spec: str
    hf_file: str = ""
    token: str | None = None

    @property
    def label(self) -> str:
        return self.spec + (f" ({self.hf_file})" if self.hf_file else "")


def _last(args: list[str], name: str) -> str:
    return reader.value(args, name) or ""


def source_of(settings: Settings) -> ModelSource | None:
    """The remote model `settings` name, or None when they name only a file (`-m`) or nothing.

    As llama-server b11434 (common/arg.cpp `common_models_handler_apply`): `-hf` wins over `-m` (the
    Hub file's cache path replaces the model path); `-mu` downloads *to* `-m` (or to llama.cpp's cache),
    so with `-mu` the model is the URL's whatever `-m` says. The token is `-hft`, else `HF_TOKEN`, for
    `-mu` too (llama-server sends it as the bearer of every download, `opts.bearer_token`)."""
    extra = list(settings.extra_args)
    token = _last(extra, "--hf-token") or os.environ.get("HF_TOKEN") or None
    if settings.hf_repo:
        return ModelSource("hf", settings.hf_repo, _last(extra, "--hf-file"), token)
    url = _last(extra, "--model-url")
    if url:
        return ModelSource("url", url, "", token)
    return None


def local_settings(settings: Settings, path: str | Path) -> Settings:
    """`settings` with the model given as the local header copy at `path` (remote flags dropped)."""
    extra = reader.without(list(settings.extra_args), *REMOTE_OPTIONS)
    return replace(settings, model=str(path), hf_repo=None, extra_args=extra)
