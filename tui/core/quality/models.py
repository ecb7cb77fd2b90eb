"""The measured model and its reference, from their GGUF headers: identity, vocabulary, context.

Why the header and not the path: the caches key a model by its header digest (`sparse.header_hash`:
the header bytes and file size), so a moved or renamed file is the same model and a re-quantised
one under the same name is not. A reference must score the same tokens, so its tokenizer (model and
pre-tokenizer) and vocabulary size must equal the measured file's; llama-perplexity would otherwise
compare token ids that mean different things.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tui.core.planning.gguf_meta import GGUFError
from tui.core.planning.gguf_reader import read_gguf
from tui.core.planning.sparse import header_hash


class ModelError(ValueError):
    """A model file that cannot be read or cannot serve as the reference; one sentence naming it."""


@dataclass(frozen=True)
class ModelId:
    """What quality needs of a GGUF: its path, header digest, tokenizer, vocabulary and training context."""

    path: Path
    digest: str
    tokenizer: str
    n_vocab: int
    n_ctx_train: int
    name: str

    def same_vocabulary(self, other: ModelId) -> bool:
        return (self.tokenizer, self.n_vocab) == (other.tokenizer, other.n_vocab)


def model_id(path: str | Path, flag: str = "-m") -> ModelId:
    """Read `path`'s header; ModelError naming `flag` and the file when it is not a readable GGUF."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ModelError(f"{flag} {path}: no such file.")
    try:
        meta = read_gguf(p)
    except (GGUFError, OSError) as exc:
        raise ModelError(f"{flag} {path}: {exc}") from None
    kv = meta.kv
    tokenizer = f"{kv.get('tokenizer.ggml.model', '?')}/{kv.get('tokenizer.ggml.pre', '-')}"
    return ModelId(p, header_hash(meta), tokenizer, int(meta.hparams.n_vocab or 0),
                   int(meta.hparams.n_ctx_train or 0), str(kv.get("general.name") or p.stem))


def check_reference(model: ModelId, ref: ModelId) -> None:
    """Refuse, in one sentence, a reference whose tokens are not the model's."""
    if not model.same_vocabulary(ref):
        raise ModelError(f"--ref {ref.path}: its tokenizer ({ref.tokenizer}, {ref.n_vocab} tokens) is not that of "
                         f"{model.path.name} ({model.tokenizer}, {model.n_vocab} tokens); the reference must be "
                         "another quant of the same model.")
