"""The Hugging Face Hub endpoint and its origin: the one place a Hugging Face token may be sent.

Lives at the lowest tier because both the remote reader (`remote`: headers, listings) and the
launcher (`server`: the HF_TOKEN a llama-server child gets) decide by it. llama.cpp b11434 takes the
endpoint from `MODEL_ENDPOINT`, else `HF_ENDPOINT`, else the Hub (common.cpp
`common_get_model_endpoint`), and sends its token as the bearer of every download, `-mu` URLs on any
host included (common/arg.cpp `opts.bearer_token = params.hf_token`); mtp-tune keeps the token to
the endpoint's origin (scheme, host and port) on every path it controls.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

DEFAULT_ENDPOINT = "https://huggingface.co/"


def endpoint() -> str:
    """llama.cpp's `common_get_model_endpoint`, with its trailing slash."""
    ep = os.environ.get("MODEL_ENDPOINT") or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    return ep if ep.endswith("/") else ep + "/"


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of `url`, the default port filled in: what `same_origin` compares."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError:  # no URL at all (a bad IPv6 literal, a port out of range): no origin
        return "", "", 0
    scheme = u.scheme.lower()
    return scheme, (u.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme, 0)


def same_origin(url: str, other: str) -> bool:
    """Whether `url` lies on `other`'s origin (scheme, host and port): only the Hub endpoint's origin
    ever receives the Hugging Face token, and only it may continue a Hub listing."""
    mine = origin(url)
    return bool(mine[1]) and mine == origin(other)


def on_hub(url: str) -> bool:
    """Whether `url` lies on the Hub endpoint's origin (the endpoint read now)."""
    return same_origin(url, endpoint())
