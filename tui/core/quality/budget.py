"""How much is measured: the context, the chunks, and the reference logits' size on disk.

Why a budget: the reference pass (`--kl-divergence-base FILE`) writes every scored token's whole
log-probability row, `n_vocab` 16-bit values: 802 MB for 6 chunks of 512 on Gemma 3's 262k
vocabulary, many GB for a long context. So the chunks are chosen to fit a disk cap, and a context
whose single chunk would not fit is lowered, both said; fewer chunks means a larger uncertainty,
which llama-perplexity prints beside each mean.

The context is the one asked for (`-c`) or, without one, the longest the text allows; it is also
lowered when the text is shorter than two contexts (llama-perplexity's own minimum). The text's
token count is not known before the model's tokenizer has read it, so the plan starts from a
conservative estimate (`EST_BYTES_PER_TOKEN`) and the reference pass corrects it when the
tokenizer counts fewer (`measure` lowers the context once and says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: the smallest context measured: 2 chunks of 256 score 254 tokens, above the 100 llama-perplexity needs
MIN_CTX = 256
#: contexts chosen without -c are powers of two from MIN_CTX
#: bytes of English text per token for a large-vocabulary tokenizer, on the low side of the usual 4-4.5
#: (so the estimate errs towards more tokens only for small vocabularies, which the reference corrects)
EST_BYTES_PER_TOKEN = 4.0
#: default cap for one reference file, and for all cached references together
DEFAULT_CAP_GIB = 2.0
#: chunks measured at most unless --chunks says otherwise (each costs a chunk of compute per setting)
DEFAULT_MAX_CHUNKS = 8
_HEADER_BYTES = 20  # "_logits_", n_ctx, n_vocab, n_chunk


class BudgetError(ValueError):
    """No measurement fits the text, the context or the disk cap; one sentence naming the flag."""


def ref_bytes(n_vocab: int, ctx: int, chunks: int) -> int:
    """Bytes of a `--kl-divergence-base` file (perplexity.cpp: header, the tokens, then per chunk
    `n_ctx - 1 - n_ctx/2` rows of `2*((n_vocab+1)/2) + 4` uint16)."""
    nv = 2 * ((n_vocab + 1) // 2) + 4
    return _HEADER_BYTES + 4 * ctx * chunks + chunks * (ctx - 1 - ctx // 2) * nv * 2


def estimate_tokens(n_bytes: int) -> int:
    return int(n_bytes / EST_BYTES_PER_TOKEN)


@dataclass(frozen=True)
class Budget:
    """The measurement chosen: context, chunks, the reference's size, and why each was chosen."""

    ctx: int
    chunks: int
    ref_bytes: int
    notes: tuple[str, ...] = field(default=())


def _pow2_at_most(n: int) -> int:
    p = MIN_CTX
    while p * 2 <= n:
        p *= 2
    return p


def choose(*, n_vocab: int, tokens: int, cap_bytes: int, ctx: int | None = None, chunks: int | None = None,
           n_ctx_train: int = 0, tokens_exact: bool = False) -> Budget:
    """The context and chunks to measure for a text of `tokens` tokens under `cap_bytes` of reference.

    `ctx` is the context asked for (None: the longest the text allows); `chunks` the chunks asked
    for (None: as many as the text and the cap allow, at most DEFAULT_MAX_CHUNKS)."""
    about = "" if tokens_exact else "about "
    notes: list[str] = []
    if tokens < 2 * MIN_CTX:
        raise BudgetError(f"the text has {about}{tokens} tokens, fewer than the {2 * MIN_CTX} that two contexts of "
                          f"{MIN_CTX} need; give a longer --text.")
    one_chunk_max = _pow2_at_most(max(MIN_CTX, _largest_ctx_for(n_vocab, cap_bytes)))
    if ctx is None:
        chosen = _pow2_at_most(tokens // 2)
        if n_ctx_train:
            chosen = min(chosen, _pow2_at_most(max(n_ctx_train, MIN_CTX)))
        if chosen > one_chunk_max:
            chosen = one_chunk_max
        notes.append(f"measured at -c {chosen}, the longest context the text ({about}{tokens} tokens) and the disk "
                     "cap allow; pass -c to choose")
    else:
        if ctx < MIN_CTX:
            raise BudgetError(f"-c {ctx}: quality is measured at a context of at least {MIN_CTX} tokens.")
        chosen = ctx
        if 2 * chosen > tokens:
            chosen = _pow2_at_most(tokens // 2)
            notes.append(f"measured at -c {chosen}, not {ctx}: the text has {about}{tokens} tokens and llama-perplexity "
                         f"needs two contexts' worth ({2 * ctx}); give a longer --text to measure at {ctx} (the loss usually "
                         "grows with context)")
        if ref_bytes(n_vocab, chosen, 1) > cap_bytes:
            lowered = one_chunk_max
            notes.append(f"measured at -c {lowered}, not {chosen}: one chunk at {chosen} needs "
                         f"{_gb(ref_bytes(n_vocab, chosen, 1))} of reference logits ({n_vocab} vocabulary), more than "
                         f"the {cap_bytes / 2**30:g} GiB cap (--disk-cap); the loss usually grows with context")
            chosen = lowered
    if ref_bytes(n_vocab, chosen, 1) > cap_bytes:
        raise BudgetError(f"--disk-cap {cap_bytes / 2**30:g} GiB: one chunk at -c {chosen} needs {_gb(ref_bytes(n_vocab, chosen, 1))} "
                          f"of reference logits for a {n_vocab}-token vocabulary; raise --disk-cap.")
    by_text = max(1, tokens // chosen)
    by_cap = max(1, (cap_bytes - _HEADER_BYTES) // (ref_bytes(n_vocab, chosen, 1) - _HEADER_BYTES))
    want = chunks if chunks is not None else DEFAULT_MAX_CHUNKS
    if chunks is not None and chunks < 1:
        raise BudgetError(f"--chunks {chunks}: measure at least one chunk.")
    n = min(want, by_text, by_cap)
    if chunks is not None and n < chunks:
        why = "the disk cap (--disk-cap) holds" if by_cap < min(want, by_text) else "the text has"
        notes.append(f"{n} chunk{'s' if n != 1 else ''}, not {chunks}: {why} only {n} at -c {chosen}")
    return Budget(chosen, n, ref_bytes(n_vocab, chosen, n), tuple(notes))


def _largest_ctx_for(n_vocab: int, cap_bytes: int) -> int:
    """The largest context whose one chunk of reference fits `cap_bytes` (a lower bound, whole tokens)."""
    per_token = (2 * ((n_vocab + 1) // 2) + 4) * 2
    return max(0, int(2 * (cap_bytes - _HEADER_BYTES) // (per_token + 8)))


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"
