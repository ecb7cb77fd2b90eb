"""mtp-tune: tune llama-server's MTP speculative decoding on GPUs that are too small."""

__version__ = "0.1.0"
