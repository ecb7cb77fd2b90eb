"""What a quality measurement is asked: the K/V pairs, and the llama-perplexity flags from the server's.

K and V are separate choices (an asymmetric pair, q8_0 K with a q4_0 V, is reported to win), so a
setting is a pair written `K/V`; a single type means both. The user's llama-server flags become the
flags of every pass, reference included, so the reference differs from a setting only in what is
measured: the options llama-perplexity also accepts (its own `--help`) are kept as written (-ngl,
-fa, -t, -ts, -ot, ...), the others (the port, the MTP draft, the API key) cannot change a logit and
are dropped, and named; the ones mtp-tune sets itself per pass (-m, -c, -ctk, -ctv, -np) are replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tui.core.options.reader import Occurrence, scan
from tui.core.options.redact import SECRET_OPTIONS

#: the reference's K/V types: llama-server's default, the unquantized cache
REFERENCE_TYPE = "f16"
#: options every pass sets itself (the context and cache types per pass; the slot count is llama-perplexity's)
OWN_OPTIONS = frozenset({
    "--model", "--ctx-size", "--cache-type-k", "--cache-type-v", "--parallel", "--kv-unified", "--hf-repo",
    "--model-url", "--hf-file", *SECRET_OPTIONS,
})
#: options that never change a figure (llama-perplexity's results are identical at 1 and 2 threads):
#: left out of the caches' keys, kept in the argv
NO_FIGURE_OPTIONS = frozenset({"--threads", "--threads-batch", "--log-verbosity", "--log-colors", "--verbose"})


class KvSpecError(ValueError):
    """A `--kv` entry that is not TYPE or K/V; names the entry."""


@dataclass(frozen=True, order=True)
class KvPair:
    """One K/V cache setting: the K type and the V type (`-ctk`, `-ctv`)."""

    k: str
    v: str

    @property
    def label(self) -> str:
        return self.k if self.k == self.v else f"{self.k}/{self.v}"

    @property
    def args(self) -> list[str]:
        return ["-ctk", self.k, "-ctv", self.v]

    @property
    def is_reference(self) -> bool:
        return self.k == REFERENCE_TYPE and self.v == REFERENCE_TYPE


def parse_kv_list(spec: str) -> list[KvPair]:
    """`--kv f16,q8_0,q8_0/q4_0` -> pairs, each once, in order (`q8_0` is `q8_0/q8_0`); [] when empty.

    Only the shape is read here; each type is checked by the one validator (as `-ctk`/`-ctv`)."""
    out: dict[KvPair, None] = {}
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        parts = [p.strip() for p in entry.split("/")]
        if len(parts) > 2 or not all(parts):
            raise KvSpecError(f"--kv {entry!r}: give a cache type (q8_0) or a K/V pair (q8_0/q4_0).")
        out.setdefault(KvPair(parts[0], parts[-1]), None)
    return list(out)


@dataclass(frozen=True)
class PassArgs:
    """The user's flags as llama-perplexity takes them: `args` kept for every pass, `dropped` named."""

    args: tuple[str, ...]
    dropped: tuple[str, ...]

    @property
    def key_args(self) -> list[str]:
        """`args` without those that never change a figure: what the caches are keyed by."""
        out: list[str] = []
        for t in scan(list(self.args)):
            if isinstance(t, Occurrence):
                if t.option.canonical not in NO_FIGURE_OPTIONS:
                    out.extend(self.args[t.index:t.end])
            else:
                out.append(t)
        return out


def perplexity_args(server_args: Sequence[str], accepted: frozenset[str]) -> PassArgs:
    """The options of `server_args` that llama-perplexity `accepted` (its --help spellings), minus ours."""
    args = [str(a) for a in server_args]
    kept: list[str] = []
    dropped: list[str] = []
    for t in scan(args):
        if isinstance(t, Occurrence):
            if t.option.canonical in OWN_OPTIONS:
                continue
            if set(t.option.spellings) & accepted:
                kept.extend(args[t.index:t.end])
            else:
                dropped.append(t.spelling)
        elif t != "--":
            dropped.append(t)
    return PassArgs(tuple(kept), tuple(dict.fromkeys(dropped)))
