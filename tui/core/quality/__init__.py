"""Output quality, measured by llama.cpp itself: what a KV cache type or a weight quant costs.

oracle    running llama-perplexity (bounded, killed with mtp-tune), its version and options
parse     its printed figures (mean KLD ± uncertainty, percentiles, same top token, Δp), never recomputed
request   K/V pairs (`K/V`) and the user's llama-server flags as llama-perplexity takes them
models    the measured file and its reference from their GGUF headers (digest, tokenizer, vocabulary)
text      what is scored: the user's workload, a file, or the built-in corpus
budget    the context and chunks measured, within the text and a disk cap for the reference logits
cache     reference logits (pruned to a cap) and results, keyed by model, binary, text and context
index     what is measured per model file (by header digest), newest first, found without running anything
measure   one measurement: the reference pass once, then one pass per K/V setting
agreement MTP on against off with greedy sampling, token for token (speculative decoding must not
          change the output; a difference is a finding, with its first position)

It sits beside `sweep` (tier 7 of tests/test_import_cycles.py): it runs a binary (server), reads
GGUF headers (planning) and the probe suites (probes), and the agreement launches through `lab`;
`tune` and `doctor` above may use it.
"""
