"""The tiny models' byte-level BPE vocabulary and chat template, learned from a fixed corpus.

Split from `tiny_model` (the weights writer); `tests/helpers/shapemodel` reuses it for shape-only models.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

CORPUS = """
The quick brown fox jumps over the lazy dog. A tiny model is a model that is tiny.
This is a test of the server. The server should answer every request quickly and
the test should check the timings, the metrics and the health of the server.
Hello world! How are you today? I am fine, thank you. What is the time now?
We write small programs to test large systems. Speculative decoding drafts tokens
and the target model verifies them. When the draft is right, the tokens are accepted.
def main(): return 0  # code is text too; print("hello") and for i in range(10): pass
one two three four five six seven eight nine ten, 1 2 3 4 5 6 7 8 9 10 100 1000.
"""

#: (text, token_type): 3 = control, 4 = user-defined.
SPECIALS = [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<think>", 4), ("</think>", 4)]

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@dataclass
class Vocab:
    tokens: list[str]
    types: list[int]
    merges: list[str]
    raw: list[bytes | None]  # bytes of each token; None for specials
    special: dict[str, int]


def build_vocab(n_merges: int) -> Vocab:
    """Byte-level BPE: 256 byte tokens, merges trained on CORPUS, then the specials."""
    b2u = _bytes_to_unicode()
    u2b = {v: k for k, v in b2u.items()}
    tokens = [b2u[b] for b in range(256)]
    raw: list[bytes | None] = [bytes([b]) for b in range(256)]
    words = re.findall(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+", CORPUS)
    seqs = Counter(tuple(b2u[b] for b in w.encode()) for w in words)
    merges: list[str] = []
    known = set(tokens)
    for _ in range(n_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for seq, c in seqs.items():
            for a, b in zip(seq, seq[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), cnt = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if cnt < 2:
            break
        merges.append(f"{a} {b}")
        new = a + b
        if new not in known:
            known.add(new)
            tokens.append(new)
            raw.append(bytes(u2b[ch] for ch in new))
        merged: Counter[tuple[str, ...]] = Counter()
        for seq, c in seqs.items():
            out, i = [], 0
            while i < len(seq):
                if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            merged[tuple(out)] += c
        seqs = merged
    types = [1] * len(tokens)
    special: dict[str, int] = {}
    for text, tt in SPECIALS:
        special[text] = len(tokens)
        tokens.append(text)
        raw.append(None)
        types.append(tt)
    return Vocab(tokens, types, merges, raw, special)
