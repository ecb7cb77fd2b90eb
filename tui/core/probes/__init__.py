"""Probes: trustworthy PP, TG and acceptance measurements against a llama-server (suites, runner,
hygiene warnings, statistics and comparisons)."""
